import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import type pg from 'pg';
import { ConfigError, homePaths, prepareHome, type Config } from '../config.js';
import type { DomainContext } from '../domain/context.js';
import { acquireHomeLock, type HomeLock } from '../events/home-lock.js';
import type { ReplayReport } from '../events/log.js';
import { connectClient, DatabaseInUseError, describeDatabaseUrl } from '../events/pg-connect.js';
import type { LeaseLost, PgEventLog } from '../events/pg-log.js';
import { newAdminToken, newSigningSecret, readOrCreateSecretFile, writeSecretFile } from '../identity/secrets.js';
import { TokenService } from '../identity/tokens.js';
import type { ArchiveIndex } from '../registry/archive.js';
import { Registry } from '../registry/registry.js';
import type { RollupStore } from '../registry/rollups.js';
import type { AnyPrimitive } from '../primitives/define.js';
import { PRIMITIVES } from '../primitives/index.js';
import { Activity } from '../runtime/activity.js';
import { Archiver } from '../runtime/archiver.js';
import { Inboxes } from '../runtime/inbox.js';
import { QuestionWaiters } from '../runtime/question-waiters.js';
import { newLocks, type Services } from '../runtime/services.js';
import { SpawnerHub } from '../runtime/spawners/hub.js';
import { Watchdog } from '../runtime/watchdog.js';
import { SkillCatalog } from '../skills/loader.js';
import { systemClock, type Clock } from '../util/clock.js';
import { randomIds, type IdSource } from '../util/ids.js';
import { createLogger, type Logger } from '../util/logger.js';
import { PACKAGE_ROOT, VERSION } from '../util/version.js';
import { AdminStreams } from './admin-streams.js';
import { buildApp } from './app.js';
import { Authenticator } from './auth.js';
import { createHttpServer } from './http-limits.js';
import { McpSessions } from './mcp.js';
import { standbyApp } from './standby.js';
import { TasksFeed } from './tasks-stream.js';
import { openStore, type Store } from './store.js';

export interface StartOptions {
  logger?: Logger;
  /** The tools to serve; the full catalogue unless a harness (the bench) adds its own. */
  catalogue?: readonly AnyPrimitive[];
  clock?: Clock;
  ids?: IdSource;
  /** Where the built dashboard is (`dist/web/` of the package); a test points it at an empty folder. */
  webRoot?: string;
}

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
  /** What the (last) start read: events reduced, and ended tasks left archived (not read). */
  readonly startup: { replayed_events: number; archived_tasks: number };
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
  close(): Promise<void>;
}

/** How long a stop waits for in-flight requests before cutting connections. */
const DRAIN_MS = 5_000;

export function skillRoots(config: Config): string[] {
  return [path.join(PACKAGE_ROOT, 'skills'), homePaths(config.home).skills, ...config.skillsRoots];
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
    throw new ConfigError('with a database URL, BEIDOU_SECRET and BEIDOU_ADMIN_TOKEN must be set in the environment (the same on every replica)');
  }
  prepareHome(config.home);
  const paths = homePaths(config.home);
  // Before anything is read: a second server on this home is refused (HomeLockedError).
  const homeLock = acquireHomeLock(config.home, paths);
  try {
    return await run(config, options, logger, clock, paths, homeLock);
  } catch (err) {
    homeLock.release();
    throw err;
  }
}

/** What one activation built: everything that serves, from a replay of the log to the app. */
interface Core {
  app: express.Express;
  services: Services;
  rollups: RollupStore;
  watchdog: Watchdog;
  archiver: Archiver;
  startup: { replayed_events: number; archived_tasks: number };
  mcp: McpSessions;
  adminStreams: AdminStreams;
  epoch: number | null;
  previous: PgEventLog['previous'];
  /** Ends the long-lived parts: timers, blocked calls, sessions and their streams. */
  quiesce(drain: boolean): Promise<void>;
  /** Closes the log, the rollups (written, or dropped when stepping down) and the store. */
  release(steppingDown: boolean): Promise<void>;
}

async function run(
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

  let core: Core | null = null;
  let lastHolder: string | null = null;
  let standbySince = clock.now();
  const outer = express();
  outer.disable('x-powered-by');
  outer.set('trust proxy', false);
  // Liveness, on every replica and in every role: the process answers (Docker's HEALTHCHECK).
  outer.get('/api/health/live', (_req, res) => void res.json({ ok: true, version: VERSION, role: core ? 'active' : 'standby' }));
  const standby = standbyApp(() => ({ holder: lastHolder, retryAfterS: config.leaseS, since: standbySince }));
  // Each request goes to the role the replica has when it arrives.
  outer.use((req, res, next) => (core ? core.app(req, res, next) : standby(req, res, next)));
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

  let closingDown = false;
  let activating: Promise<boolean> | null = null;
  const stepDown = async (from: Core, lost: LeaseLost) => {
    if (core !== from) return;
    core = null;
    standbySince = clock.now();
    lastHolder = lost.holder;
    logger.warn(
      { epoch: lost.epoch, new_epoch: lost.newEpoch, holder: lost.holder, reason: lost.reason },
      `lost the lease to ${lost.holder ?? 'another replica'} (epoch ${lost.epoch} → ${lost.newEpoch ?? 'none yet'}): stepping down to standby`,
    );
    try {
      await from.quiesce(false);
    } finally {
      await from.release(true).catch((err: unknown) => logger.debug({ err }, 'closing what the stepped-down replica held'));
    }
    if (!closingDown) void attempt();
  };
  let first = true;
  const attempt = (): Promise<boolean> =>
    (activating ??= (async () => {
      if (core || closingDown) return core !== null;
      let built: Core | null = null;
      try {
        built = await activate(config, options, logger, clock, paths, { adminToken, secret }, holder, (lost) => {
          // Called by the log once; the core may still be starting (then it never serves).
          if (built) void stepDown(built, lost);
          else lostEarly = lost;
        });
      } catch (err) {
        if (err instanceof DatabaseInUseError) {
          lastHolder = err.holderName;
          return false;
        }
        // At start a database that cannot be used ends the start (exit 2); later it is retried.
        if (!replicated || first) throw err;
        logger.error({ err }, `could not take over as the active replica: ${(err as Error).message}; trying again`);
        return false;
      }
      if (lostEarly || closingDown) {
        lostEarly = null;
        await built.quiesce(false);
        await built.release(!closingDown);
        return false;
      }
      core = built;
      lastHolder = holder;
      if (replicated) {
        const prev = built.previous;
        const line = prev?.holder && prev.holder !== holder && prev.epoch > 0
          ? `took over the lease from ${prev.holder} (epoch ${prev.epoch} → ${built.epoch}; ${prev.expired ? 'its lease had expired' : 'its connection was gone'}): active`
          : `holding the lease (epoch ${built.epoch}): active`;
        (prev?.holder && prev.holder !== holder ? logger.warn : logger.info).call(logger, { epoch: built.epoch, previous: prev?.holder ?? null }, line);
      }
      return true;
    })().finally(() => {
      activating = null;
      first = false;
    }));
  let lostEarly: LeaseLost | null = null;

  try {
    await attempt();
  } catch (err) {
    await new Promise<void>((resolve) => httpServer.close(() => resolve()));
    throw err;
  }

  // A standby tries again every third of the lease, and at once when the active one
  // releases it on a clean stop (NOTIFY beidou_lease).
  let poll: NodeJS.Timeout | null = null;
  let listener: pg.Client | null = null;
  const listen = async () => {
    if (listener || closingDown || !config.databaseUrl) return;
    try {
      const client = await connectClient(config.databaseUrl, 'beidou-standby');
      listener = client;
      client.on('end', () => void (listener === client && (listener = null)));
      client.on('notification', () => void (core || attempt()));
      await client.query('LISTEN beidou_lease');
    } catch {
      listener = null; // retried at the next poll
    }
  };
  if (replicated) {
    poll = setInterval(() => {
      if (core || closingDown) return;
      void listen();
      void attempt();
    }, (config.leaseS * 1000) / 3);
    poll.unref();
    void listen();
  }

  const current = (): Core => {
    if (!core) throw new Error('this replica is a standby: it has no registry, services or rollups');
    return core;
  };

  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      closingDown = true;
      if (poll) clearInterval(poll);
      await listener?.end().catch(() => undefined);
      await activating?.catch(() => undefined);
      // Stop accepting, end the long-lived streams, let in-flight requests finish, then
      // flush the log and the rollups.
      const closed = new Promise<void>((resolve) => httpServer.close(() => resolve()));
      const last = core;
      if (last) await last.quiesce(true);
      core = null;
      httpServer.closeAllConnections();
      await closed;
      try {
        await last?.release(false);
      } finally {
        homeLock.release();
      }
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
    mcpSessions: () => core?.mcp.size ?? 0,
    adminStreams: () => core?.adminStreams.size ?? 0,
    role: () => (core ? 'active' : 'standby'),
    holder,
    lease: () => ({ holder: lastHolder, epoch: core?.epoch ?? null }),
    close,
  };
}

/**
 * Opens the store and the log (with a database URL: takes the lease, or refuses with
 * `DatabaseInUseError`), replays, and builds everything that serves, from the registry to
 * the app. Nothing listens here: the replica's HTTP server hands requests to the app.
 */
async function activate(
  config: Config,
  options: StartOptions,
  logger: Logger,
  clock: Clock,
  paths: ReturnType<typeof homePaths>,
  keys: { adminToken: string; secret: string },
  holder: string | null,
  onLost: (lost: LeaseLost) => void,
): Promise<Core> {
  const openedAt = performance.now(); // a duration for the log line, not a time of day
  const store = await openStore(config, paths, clock, { ...(holder ? { holder } : {}), leaseS: config.leaseS, onLost });
  if (store.migrations?.applied.length) {
    logger.info({ applied: store.migrations.applied, version: store.migrations.version }, `migrated the database schema to version ${store.migrations.version}`);
  }
  const log = store.log;
  const registry = new Registry(log);
  let rollups: RollupStore;
  let index: ArchiveIndex | null = null;
  try {
    index = store.archive();
    const entries = await index.load();
    logReplay(logger, await registry.open(entries));
    // Entries the log no longer matches (replayed instead) or no longer has: dropped; the archiver writes them anew.
    const stale = entries.filter((e) => !registry.archived.has(e.task_id)).map((e) => e.task_id);
    if (stale.length > 0) {
      logger.warn({ tasks: stale.length }, `${stale.length} archive index entr${stale.length === 1 ? 'y' : 'ies'} did not match the event log: replayed those tasks`);
      await index.remove(stale);
    }
    const where = store.kind === 'postgres' ? `the rollup tables of ${store.where}` : 'stats.db';
    rollups = store.rollups(registry.state, (err) => logger.error({ err }, `could not write the rollups (${where}); \`beidou stats rebuild\` recreates them`));
    await rollups.rebuild();
  } catch (err) {
    await log.close().catch(() => undefined);
    await index?.close().catch(() => undefined);
    await store.close().catch(() => undefined);
    throw err;
  }
  const archive = index;

  const skills = new SkillCatalog(skillRoots(config));
  for (const err of skills.loadAll().errors) logger.warn({ skill: err.skillPath }, `skill not loadable: ${err.message}`);

  const stopping = new AbortController();
  const ids = options.ids ?? randomIds;
  const domain: DomainContext = { state: registry.state, config, ids };
  const tokens = new TokenService(keys.secret, config.tokenTtlS, clock);
  const inboxes = new Inboxes(registry);
  const activity = new Activity();
  const services: Services = {
    config,
    registry,
    domain,
    skills,
    plans: store.plans,
    tokens,
    inboxes,
    questions: new QuestionWaiters(registry, domain),
    spawners: new SpawnerHub({ registry, domain, inboxes, tokens, skills, clock, logger }),
    activity,
    stopping: stopping.signal,
    clock,
    ids,
    logger,
    locks: newLocks(),
  };
  const watchdog = new Watchdog({ registry, domain, config, clock, activity, logger });
  const archiver = new Archiver({
    registry,
    index: archive,
    archiveAfterS: config.archiveAfterS,
    clock,
    inboxes,
    questions: services.questions,
    beforeUnload: () => rollups.flush(),
    logger,
  });
  logger.info(
    { tasks: registry.state.tasks.size, agents: registry.state.agents.size, archived: registry.archived.size, events: registry.replayedEvents, ms: Math.round(performance.now() - openedAt), store: store.kind, where: store.where },
    'registry rebuilt from the event logs',
  );

  const auth = new Authenticator(keys.adminToken, services.tokens, registry);
  const mcp = new McpSessions(services, options.catalogue ?? PRIMITIVES);
  const tasksFeed = new TasksFeed(registry);

  // Every observer of committed events, here and nowhere else. In-process observers see
  // events as they are applied; durable ones once they are on disk, because what they do
  // leaves the process (an answer handed to a blocked call, a command to a spawner, a
  // session closed).
  registry.observe((events) => {
    rollups.track(events);
    inboxes.onApplied(events);
  });
  registry.observeDurable((events) => {
    services.questions.onDurable(events);
    services.spawners.onDurable(events);
    mcp.onDurable(events);
    tasksFeed.onDurable();
  });
  inboxes.onArrival((agentId, message) => mcp.notifyArrival(agentId, message));

  const adminStreams = new AdminStreams(config.maxAdminStreams, stopping.signal);
  const webRoot = options.webRoot ?? path.join(PACKAGE_ROOT, 'dist', 'web');
  const app = buildApp(services, { auth, mcp, adminStreams, tasksFeed, webRoot }, stopping.signal);
  watchdog.start();
  archiver.start();
  services.spawners.start();
  mcp.startExpiry();
  // By the store's kind, not instanceof: the embedded store does not load the PostgreSQL log's module.
  const pgLog = store.kind === 'postgres' ? (log as PgEventLog) : null;

  return {
    app,
    services,
    rollups,
    watchdog,
    archiver,
    startup: { replayed_events: registry.replayedEvents, archived_tasks: registry.archived.size },
    mcp,
    adminStreams,
    epoch: pgLog?.writerEpoch ?? null,
    previous: pgLog?.previous ?? null,
    async quiesce(drain) {
      watchdog.stop();
      tasksFeed.stop();
      const archiverStopped = archiver.stop();
      services.spawners.stop();
      stopping.abort();
      services.inboxes.wakeAll();
      // Blocked calls now end; on a clean stop let their responses reach the clients
      // before closing sessions. A replica stepping down acknowledges nothing more: its
      // sessions and streams end at once (clients reconnect through the load balancer).
      if (drain) await mcp.drained(DRAIN_MS);
      await mcp.closeAll();
      await archiverStopped;
    },
    async release(steppingDown) {
      try {
        await log.close();
      } catch (err) {
        if (!steppingDown) throw err;
      } finally {
        try {
          if (steppingDown) await (rollups.discard ?? rollups.close).call(rollups);
          else await rollups.close();
        } finally {
          await archive.close().catch(() => undefined);
          await store.close();
        }
      }
    },
  };
}

/** What the replay cut or quarantined, one warning each: the operator should know. */
function logReplay(logger: Logger, report: ReplayReport): void {
  for (const cut of report.cut) {
    const { incomplete } = cut;
    if (incomplete) {
      logger.warn(
        { file: cut.file, first_seq: incomplete.firstSeq, last_seq: incomplete.lastSeq, of: incomplete.of },
        `${cut.file}: dropped an incomplete commit (seqs ${incomplete.firstSeq}-${incomplete.lastSeq} of a commit of ${incomplete.of} lines, cut short before its end; never acknowledged)`,
      );
    } else {
      logger.warn({ file: cut.file }, `${cut.file}: cut a torn last line (a write cut short; never acknowledged)`);
    }
  }
  for (const q of report.quarantined) {
    logger.error(
      { task_id: q.taskId, file: q.file, line: q.line, reason: q.reason },
      `task ${q.taskId} quarantined: ${q.file} line ${q.line}: ${q.reason}; the other tasks run (see beidou doctor)`,
    );
  }
}
