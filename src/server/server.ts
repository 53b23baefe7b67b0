import type { AddressInfo } from 'node:net';
import os from 'node:os';
import express from 'express';
import { ConfigError, homePaths, prepareHome, type Config } from '../config.js';
import { isFollowingLog } from '../events/event-log.js';
import { newAdminToken, newSigningSecret, readOrCreateSecretFile, writeSecretFile } from '../identity/secrets.js';
import type { RollupStore } from '../registry/rollups.js';
import type { Archiver } from '../runtime/archiver.js';
import type { Services } from '../runtime/services.js';
import type { Watchdog } from '../runtime/watchdog.js';
import { systemClock, type Clock } from '../util/clock.js';
import { createLogger, type Logger } from '../util/logger.js';
import { tightenHomeFiles } from '../util/private-home.js';
import { VERSION } from '../util/version.js';
import { openBindRefusal } from './http/host-guard.js';
import { createHttpServer } from './http/limits.js';
import { acquireHomeLock, describeDatabaseUrl, type HomeLock, type Store } from '../store/index.js';
import type { Activation, StartOptions, Startup } from './replica/activate.js';
import { Replica } from './replica/role.js';
import { standbyApp, type Following } from './replica/standby.js';

export { skillRoots, type StartOptions, type Startup } from './replica/activate.js';
export type { Following } from './replica/standby.js';

/*
 * A Beidou server: its home, its keys, its HTTP server, and the role of the replica it is
 * (replica/role.ts; docs/architecture.md, "Replicas"): active (an activation, activate.ts,
 * serves), or a standby keeping a warm follower of the log and taking over when the active
 * one's lease runs out. Without a database URL it is the one active server of its home.
 */

export type ReplicaRole = 'active' | 'standby';

export interface BeidouServer {
  url: string;
  port: number;
  host: string;
  adminToken: string;
  adminTokenFile: string | null;
  /** The parts of the active replica (a standby has none: reading them throws). */
  readonly services: Services;
  /** The rollups, in SQLite or PostgreSQL (batched; `flush()` writes the pending batch now). */
  readonly rollups: RollupStore;
  /** Which store holds the state, and where (never a password). */
  store: { kind: Store['kind']; where: string };
  /** The watchdog, whose `tick()` a test can drive with a fake clock. */
  readonly watchdog: Watchdog;
  /** Unloads ended tasks; `tick()` runs one pass (a test drives it with a fake clock). */
  readonly archiver: Archiver;
  /** What the (last) start read: events reduced, and ended tasks left archived (not read); after a warm takeover, what was followed and what was left to read. */
  readonly startup: Startup;
  /** Open MCP sessions (Streamable HTTP and SSE), for observability and tests. */
  mcpSessions(): number;
  /** Open admin SSE streams (task events, task list), likewise. */
  adminStreams(): number;
  /** Active (holds the lease and serves) or standby (with a database URL, another replica holds it). */
  role(): ReplicaRole;
  /** This replica's name in the lease row (null without a database URL). */
  holder: string | null;
  /** Who holds the lease, as far as this standby knows, and the epoch it serves under when active. */
  lease(): { holder: string | null; epoch: number | null };
  /** A standby's following of the log (null: active, embedded, or not following). */
  following(): Following | null;
  close(): Promise<void>;
}

/**
 * Starts the server: prepares the home, opens the store (migrating a database's schema),
 * rebuilds the registry from the logs, rewrites the rollups, and listens. Resolves once it
 * accepts connections. With a database URL it is one replica of several: it listens at
 * once, takes the lease if it is free (then it is active, as above) or stays a standby,
 * and takes over when the active one's lease runs out (server/replica docs in
 * docs/architecture.md, "Replicas").
 */
export async function startServer(config: Config, options: StartOptions = {}): Promise<BeidouServer> {
  const logger = options.logger ?? createLogger(config.logLevel);
  const clock = options.clock ?? systemClock;
  if (config.databaseUrl && (!config.secret || !config.adminToken)) {
    // Every replica must sign and check tokens alike: an agent's token from one is good at the next.
    throw new ConfigError(
      'with a database URL, BEIDOU_SECRET and BEIDOU_ADMIN_TOKEN must be set in the environment (the same on every replica)',
    );
  }
  // Before the home is touched: a refused start changes nothing.
  const bindRefusal = openBindRefusal(config);
  if (bindRefusal) throw new ConfigError(bindRefusal);
  const home = prepareHome(config.home);
  const octal = (mode: number) => `0${mode.toString(8)}`;
  if (home.tightenedFrom !== null) {
    logger.warn(
      { home: config.home, mode: octal(home.tightenedFrom) },
      `the home ${config.home} was mode ${octal(home.tightenedFrom)}, open to other users of this machine: set to 0700 (its event logs, plans and keys are the server's alone)`,
    );
    // Its files may be as open: those an older version made keep their mode until set.
    const files = tightenHomeFiles(config.home);
    if (files.failed.length > 0)
      logger.warn(
        { home: config.home, failed: files.failed.length, first: files.failed[0] },
        `${files.failed.length} of the files in the home ${config.home} could not be set to 0600 (first: ${files.failed[0]!.file}, ${files.failed[0]!.reason}): chmod them yourself`,
      );
  }
  if (home.couldNotTighten !== null)
    logger.warn(
      { home: config.home, reason: home.couldNotTighten },
      `the home ${config.home} is open to other users of this machine and could not be set to 0700 (${home.couldNotTighten}): chmod 700 it, or use a home of your own`,
    );
  const paths = homePaths(config.home);
  // Before anything is read: a second server on this home is refused (HomeLockedError).
  const homeLock = acquireHomeLock(config.home, paths);
  try {
    return await serve(config, options, logger, clock, paths, homeLock);
  } catch (err) {
    homeLock.release();
    throw err;
  }
}

/** The HTTP server in front of the replica's role, and the facade the callers (the CLI, tests, the bench) hold. */
async function serve(
  config: Config,
  options: StartOptions,
  logger: Logger,
  clock: Clock,
  paths: ReturnType<typeof homePaths>,
  homeLock: HomeLock,
): Promise<BeidouServer> {
  const adminToken = config.adminToken ?? readOrCreateSecretFile(paths.adminToken, newAdminToken);
  const secret = config.secret ?? readOrCreateSecretFile(paths.secret, newSigningSecret);
  const replicated = config.databaseUrl !== undefined;
  // Each replica keeps the shared admin token in its home too, for the CLI there.
  if (replicated) writeSecretFile(paths.adminToken, adminToken);
  const standbySince = clock.now();

  // Made once the port is known (its name in the lease row carries the port); a request
  // before that finds no role yet and is answered as a standby's.
  let replica: Replica | null = null;
  const active = () => replica?.current() ?? null;
  const outer = express();
  outer.disable('x-powered-by');
  outer.set('trust proxy', false);
  // Liveness, on every replica and in every role: the process answers (Docker's HEALTHCHECK).
  outer.get(
    '/api/health/live',
    (_req, res) => void res.json({ ok: true, version: VERSION, role: active() ? 'active' : 'standby' }),
  );
  // An active replica whose lease is not confirmed lately (it was paused past it, or its
  // renewals cannot reach the database) may have been taken over: its health check says
  // so (503), and the balancer stops sending it work until a renewal succeeds or it steps down.
  outer.get('/api/health', (_req, res, next) => {
    const log = active()?.services.registry.log;
    if (!log || !isFollowingLog(log) || log.leaseConfirmed()) return next();
    res.status(503).set('Retry-After', '1').json({
      ok: false,
      version: VERSION,
      role: 'active',
      lease: 'unconfirmed',
      message:
        'this replica cannot confirm its lease lately (paused, or the database unreachable): it is checking whether it is still the active one',
    });
  });
  const standby = standbyApp(
    () =>
      replica?.standbyStatus() ?? { holder: null, retryAfterS: config.leaseS, since: standbySince, following: null },
  );
  // Each request goes to the role the replica has when it arrives.
  outer.use((req, res, next) => {
    const serving = active();
    return serving ? serving.app(req, res, next) : standby(req, res, next);
  });
  const httpServer = createHttpServer(outer, config, logger, clock);

  await new Promise<void>((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(config.port, config.host, () => {
      httpServer.off('error', reject);
      resolve();
    });
  });
  const address = httpServer.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  const holder = replicated ? `${os.hostname()}:${address.port}#${process.pid}` : null;

  const role = new Replica(
    { config, options, logger, clock, paths, keys: { adminToken, secret }, holder },
    standbySince,
  );
  replica = role;
  try {
    await role.start();
  } catch (err) {
    await new Promise<void>((resolve) => httpServer.close(() => resolve()));
    throw err;
  }

  const current = (): Activation => {
    const a = role.current();
    if (!a) throw new Error('this replica is a standby: it has no registry, services or rollups');
    return a;
  };

  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      await role.stop(httpServer, () => homeLock.release());
      logger.info('stopped');
      await new Promise<void>((resolve) => logger.flush(() => resolve()));
    })());

  const storeKind: Store['kind'] = replicated ? 'postgres' : 'embedded';
  return {
    url,
    port: address.port,
    host: config.host,
    adminToken,
    adminTokenFile: config.adminToken && !replicated ? null : paths.adminToken,
    get services() {
      return current().services;
    },
    get rollups() {
      return current().rollups;
    },
    get watchdog() {
      return current().watchdog;
    },
    get archiver() {
      return current().archiver;
    },
    get startup() {
      return current().startup;
    },
    store: { kind: storeKind, where: replicated ? describeDatabaseUrl(config.databaseUrl!) : paths.events },
    mcpSessions: () => active()?.mcp.size ?? 0,
    adminStreams: () => active()?.adminStreams.size ?? 0,
    role: () => (active() ? 'active' : 'standby'),
    holder,
    lease: () => ({ holder: role.holderSeen(), epoch: active()?.epoch ?? null }),
    following: () => role.followingNow(),
    close,
  };
}
