import type { AddressInfo } from 'node:net';
import os from 'node:os';
import express from 'express';
import type pg from 'pg';
import { ConfigError, homePaths, prepareHome, type Config } from '../config.js';
import { acquireHomeLock, type HomeLock } from '../store/embedded/home-lock.js';
import { isFollowingLog } from '../events/event-log.js';
import { connectClient, DatabaseInUseError, describeDatabaseUrl } from '../store/postgres/connect.js';
import type { LeaseLost } from '../store/postgres/lease.js';
import { newAdminToken, newSigningSecret, readOrCreateSecretFile, writeSecretFile } from '../identity/secrets.js';
import type { RollupStore } from '../registry/rollups.js';
import type { Archiver } from '../runtime/archiver.js';
import type { Services } from '../runtime/services.js';
import type { Watchdog } from '../runtime/watchdog.js';
import { systemClock, type Clock } from '../util/clock.js';
import { createLogger, type Logger } from '../util/logger.js';
import { VERSION } from '../util/version.js';
import { createHttpServer } from './http/limits.js';
import { standbyApp, type Following } from './replica/standby.js';
import type { Store } from '../store/index.js';
import { activate, openRegistry, type Core, type Opened, type StartOptions, type Startup } from './replica/activate.js';

export { skillRoots, type StartOptions, type Startup } from './replica/activate.js';
export type { Following } from './replica/standby.js';

/*
 * A Beidou server: its HTTP server, and the role of the replica it is (docs/architecture.md,
 * "Replicas"): active (an activation, activate.ts, serves), or a standby keeping a warm
 * follower of the log and taking over when the active one's lease runs out. Without a
 * database URL it is the one active server of its home.
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
  // An active replica whose lease is not confirmed lately (it was paused past it, or its
  // renewals cannot reach the database) may have been taken over: its health check says
  // so (503), and the balancer stops sending it work until a renewal succeeds or it steps down.
  outer.get('/api/health', (_req, res, next) => {
    const log = core?.services.registry.log;
    if (!core || !log || !isFollowingLog(log) || log.leaseConfirmed()) return next();
    res
      .status(503)
      .set('Retry-After', '1')
      .json({ ok: false, version: VERSION, role: 'active', lease: 'unconfirmed', message: 'this replica cannot confirm its lease lately (paused, or the database unreachable): it is checking whether it is still the active one' });
  });
  const standby = standbyApp(() => ({ holder: lastHolder, retryAfterS: config.leaseS, since: standbySince, following: currentFollowing() }));
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
  // A standby keeps a registry that follows the active's commits (warm), so that taking
  // over reads only the last moments' events instead of the whole live log.
  let warm: Opened | null = null;
  let following: Promise<void> | null = null;
  const followingLog = () => (warm && isFollowingLog(warm.registry.log) ? warm.registry.log : null);
  const dropFollower = async () => {
    const w = warm;
    warm = null;
    await w?.close();
  };
  const startFollowing = () => {
    if (!replicated || warm || following || core || closingDown) return;
    following = (async () => {
      try {
        const opened = await openRegistry(config, paths, clock, logger, holder, 'follower');
        if (core || closingDown) return void (await opened.close());
        warm = opened;
        logger.info(
          { events: opened.registry.replayedEvents, tasks: opened.registry.state.tasks.size, archived: opened.registry.archived.size },
          `standby: following the log (${opened.registry.replayedEvents} events replayed, ${opened.registry.state.tasks.size} live tasks)`,
        );
      } catch (err) {
        logger.warn({ err }, `standby: could not follow the log (${(err as Error).message}); trying again, and a takeover meanwhile replays from the log`);
      }
    })().finally(() => {
      following = null;
    });
  };
  // The active archived tasks (NOTIFY beidou_archive): the follower unloads them too.
  // One pass at a time; a notice during one runs another after it (none is dropped).
  let absorbing: Promise<void> | null = null;
  let absorbAgain = false;
  const absorbArchived = (): Promise<void> => {
    if (absorbing) {
      absorbAgain = true;
      return absorbing;
    }
    absorbing = (async () => {
      do {
        absorbAgain = false;
        const w = warm;
        if (!w) return;
        try {
          // Caught up first, so the marks of what was archived match what it holds.
          await followingLog()?.pull();
          // Only the ended tasks it still holds: a read that grows with live work, not history.
          const ended = [...w.registry.state.tasks.values()].filter((t) => t.ended_at !== null).map((t) => t.task_id);
          const entries = await w.index.loadFor(ended);
          if (warm !== w) return; // it took over meanwhile: its archiver does this now
          const gone = w.registry.absorbArchived(entries);
          if (gone > 0) logger.debug({ tasks: gone }, 'standby: unloaded tasks the active archived');
        } catch (err) {
          // Tried again at the next notice; a takeover's archiver archives them anyway.
          logger.debug({ err }, 'standby: could not read the archive index');
        }
      } while (absorbAgain);
    })().finally(() => {
      absorbing = null;
    });
    return absorbing;
  };
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
    if (!closingDown) {
      startFollowing();
      void attempt();
    }
  };
  let first = true;
  const attempt = (): Promise<boolean> =>
    (activating ??= (async () => {
      if (core || closingDown) return core !== null;
      await following;
      // A follower that stopped following cannot take over warm: a fresh replay does.
      const stopped = followingLog()?.following()?.diverged;
      if (stopped) {
        logger.warn({ reason: stopped }, `this standby stopped following the log (${stopped}): a takeover replays from the log`);
        await dropFollower();
      }
      const from = warm;
      let built: Core | null = null;
      try {
        built = await activate(config, options, logger, clock, paths, { adminToken, secret }, holder, (lost) => {
          // Called by the log once; the core may still be starting (then it never serves).
          if (built) void stepDown(built, lost);
          else lostEarly = lost;
        }, from);
        if (from) warm = null; // it serves now
      } catch (err) {
        if (err instanceof DatabaseInUseError) {
          lastHolder = err.holderName;
          return false;
        }
        if (from) {
          const still = isFollowingLog(from.registry.log) ? from.registry.log.following() : null;
          if (still && !still.diverged) {
            // Refused before the lease was taken (the database away for a moment): it still
            // follows, and the next attempt reads on from where it is.
            logger.warn({ err }, `could not take over: ${(err as Error).message}; trying again`);
            return false;
          }
          // It took the lease but could not catch up, or stopped following: the next
          // attempt replays afresh.
          warm = null;
          await from.close();
          logger.warn({ err }, `could not take over on the followed log: ${(err as Error).message}; trying again with a fresh replay`);
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
      // A follower the poll opened while this took over cold (`from` was null) would follow
      // the active's own commits for ever: a second copy of the state, and a read per commit.
      if (warm) void dropFollower();
      if (replicated) {
        const prev = built.previous;
        const w = built.startup.warm;
        const how = w
          ? `; warm (read ${w.caught_up_events} events at the takeover, ${w.followed_events} followed as a standby)`
          : `; replayed ${built.startup.replayed_events} events`;
        const line = prev?.holder && prev.holder !== holder && prev.epoch > 0
          ? `took over the lease from ${prev.holder} (epoch ${prev.epoch} → ${built.epoch}; ${prev.expired ? 'its lease had expired' : 'its connection was gone'}): active${how}`
          : `holding the lease (epoch ${built.epoch}): active${how}`;
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
      client.on('notification', (n) => {
        if (core) return;
        if (n.channel === 'beidou_archive') void absorbArchived();
        else void attempt();
      });
      await client.query('LISTEN beidou_lease');
      await client.query('LISTEN beidou_archive');
    } catch {
      listener = null; // retried at the next poll
    }
  };
  if (replicated) {
    poll = setInterval(() => {
      if (core || closingDown) return;
      void listen();
      startFollowing();
      // Each attempt of a follower first reads what is new (a missed NOTIFY costs one poll).
      void attempt();
    }, (config.leaseS * 1000) / 3);
    poll.unref();
    void listen();
    // A standby is ready once it follows the log (a failure to is logged; the poll retries).
    if (!core) {
      startFollowing();
      await following;
    }
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
      await following;
      await dropFollower();
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

  function currentFollowing(): Following | null {
    const f = core ? null : followingLog()?.following();
    const r = warm?.registry;
    return f && r ? { ...f, replayed: r.replayedEvents, tasks: r.state.tasks.size, archived: r.archived.size } : null;
  }

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
    following: currentFollowing,
    close,
  };
}
