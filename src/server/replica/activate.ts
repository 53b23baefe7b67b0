/**
 * One activation of a replica (docs/architecture.md, "Replicas"): on a registry rebuilt on
 * a store (`openRegistry`, open-registry.ts, by a writer or a standby's follower),
 * everything that serves (`activate`): the services, the watchdog,
 * the archiver, the MCP sessions and the app. `role.ts` decides when a replica activates,
 * `server.ts` listens; this file only builds and tears down what one activation holds.
 */
import path from 'node:path';
import type express from 'express';
import { homePaths, type Config } from '../../config.js';
import type { DomainContext } from '../../domain/context.js';
import type { PreviousWriter } from '../../events/event-log.js';
import { TokenService } from '../../identity/tokens.js';
import type { RollupStore } from '../../registry/rollups.js';
import type { AnyPrimitive } from '../../primitives/define.js';
import { PRIMITIVES } from '../../primitives/index.js';
import { Activity } from '../../runtime/activity.js';
import { Archiver } from '../../runtime/archiver.js';
import { Inboxes } from '../../runtime/inbox.js';
import { QuestionWaiters } from '../../runtime/question-waiters.js';
import { newLocks, type Services } from '../../runtime/services.js';
import { SpawnerHub } from '../../runtime/spawners/hub.js';
import { Watchdog } from '../../runtime/watchdog.js';
import { WriteBudget } from '../../runtime/write-budget.js';
import { SkillCatalog } from '../../skills/loader.js';
import type { Clock } from '../../util/clock.js';
import { randomIds, type IdSource } from '../../util/ids.js';
import type { Logger } from '../../util/logger.js';
import { PACKAGE_ROOT } from '../../util/version.js';
import { AdminStreams } from '../api/admin-streams.js';
import { buildApp } from '../app.js';
import { Authenticator } from '../http/auth.js';
import { McpSessions } from '../mcp/index.js';
import { TasksFeed } from '../api/tasks-stream.js';
import type { LeaseLost } from '../../store/index.js';
import { openRegistry, type OpenedRegistry } from './open-registry.js';

export interface StartOptions {
  logger?: Logger;
  /** The tools to serve; the full catalogue unless a harness (the bench) adds its own. */
  catalogue?: readonly AnyPrimitive[];
  clock?: Clock;
  ids?: IdSource;
  /** Where the built dashboard is (`dist/web/` of the package); a test points it at an empty folder. */
  webRoot?: string;
}

export interface Startup {
  replayed_events: number;
  archived_tasks: number;
  /** A standby's takeover on the log it followed: events applied while following, and read at the takeover. Null: a replay. */
  warm: { followed_events: number; caught_up_events: number } | null;
}

/** How long a stop waits for in-flight requests before cutting connections. */
const DRAIN_MS = 5_000;

export function skillRoots(config: Config): string[] {
  return [path.join(PACKAGE_ROOT, 'skills'), homePaths(config.home).skills, ...config.skillsRoots];
}

/** What one activation built: everything that serves, from a replay of the log to the app. */
export interface Activation {
  app: express.Express;
  services: Services;
  rollups: RollupStore;
  watchdog: Watchdog;
  archiver: Archiver;
  startup: Startup;
  mcp: McpSessions;
  adminStreams: AdminStreams;
  epoch: number | null;
  previous: PreviousWriter | null;
  /** Ends the long-lived parts: timers, blocked calls, sessions and their streams. */
  quiesce(drain: boolean): Promise<void>;
  /** Closes the log, the rollups (written, or dropped when stepping down) and the store. */
  release(steppingDown: boolean): Promise<void>;
}

/** What an activation is built from. */
export interface ActivationOptions {
  config: Config;
  options: StartOptions;
  logger: Logger;
  clock: Clock;
  paths: ReturnType<typeof homePaths>;
  keys: { adminToken: string; secret: string };
  /** This replica's name in the lease row (null without a database URL). */
  holder: string | null;
  /** Where the log's lease-lost call goes (once). */
  onLost: (lost: LeaseLost) => void;
  /** A standby's follower to take over on, or null: open the store afresh. */
  warm: OpenedRegistry | null;
}

/**
 * Builds everything that serves, from the registry to the app, on a store it opens (with a
 * database URL: taking the lease, or refusing with `DatabaseInUseError`) or on a standby's
 * follower (`warm`), which takes the lease and reads only what it has not followed yet.
 * Nothing listens here: the replica's HTTP server hands requests to the app.
 */
export async function activate(o: ActivationOptions): Promise<Activation> {
  const { config, options, logger, clock, paths, keys, holder, onLost, warm } = o;
  const openedAt = performance.now(); // a duration for the log line, not a time of day
  let opened: OpenedRegistry;
  let takeover: { caughtUp: number; followed: number } | null = null;
  if (warm) {
    warm.route.onLost = onLost;
    takeover = await warm.registry.promote(); // DatabaseInUseError: it keeps following
    opened = warm;
  } else {
    opened = await openRegistry(config, paths, clock, logger, holder, 'writer');
    opened.route.onLost = onLost;
  }
  const { store, registry, index: archive } = opened;
  const log = store.log;
  let rollups: RollupStore;
  try {
    const where = store.kind === 'postgres' ? `the rollup tables of ${store.where}` : 'stats.db';
    rollups = store.rollups(registry.state, (err) =>
      logger.error({ err }, `could not write the rollups (${where}); \`beidou stats rebuild\` recreates them`),
    );
    await rollups.rebuild();
  } catch (err) {
    await opened.close();
    throw err;
  }

  const skills = new SkillCatalog(skillRoots(config));
  for (const err of skills.loadAll().errors)
    logger.warn({ skill: err.skillPath }, `skill not loadable: ${err.message}`);

  const stopping = new AbortController();
  const ids = options.ids ?? randomIds;
  const domain: DomainContext = { state: registry.state, config, ids };
  const tokens = new TokenService(keys.secret, config.tokenTtlS, clock);
  const inboxes = new Inboxes(registry);
  const activity = new Activity();
  // Per replica, in memory: commits made for an agent's call are metered from this activation on.
  const writeBudget = new WriteBudget(clock, config.maxWriteBytesPerMinute);
  registry.meterWrites(writeBudget);
  const services: Services = {
    config,
    registry,
    domain,
    skills,
    plans: store.plans,
    tokens,
    inboxes,
    questions: new QuestionWaiters(registry, domain),
    spawners: new SpawnerHub({ registry, domain, inboxes, tokens, skills, clock, logger, writeBudget }),
    activity,
    writeBudget,
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
  const counts = {
    tasks: registry.state.tasks.size,
    agents: registry.state.agents.size,
    archived: registry.archived.size,
    ms: Math.round(performance.now() - openedAt),
    store: store.kind,
    where: store.where,
  };
  if (takeover) {
    logger.info(
      {
        ...counts,
        events: takeover.caughtUp,
        followed: takeover.followed,
        replayed_at_follow: registry.replayedEvents,
      },
      `registry caught up from the log: ${takeover.caughtUp} events read at the takeover (${takeover.followed} followed as a standby)`,
    );
  } else {
    logger.info({ ...counts, events: registry.replayedEvents }, 'registry rebuilt from the event logs');
  }

  const auth = new Authenticator(keys.adminToken, services.tokens, registry);
  const mcp = new McpSessions(services, options.catalogue ?? PRIMITIVES, auth);
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

  return {
    app,
    services,
    rollups,
    watchdog,
    archiver,
    startup: {
      replayed_events: registry.replayedEvents,
      archived_tasks: registry.archived.size,
      warm: takeover ? { followed_events: takeover.followed, caught_up_events: takeover.caughtUp } : null,
    },
    mcp,
    adminStreams,
    epoch: log.writerEpoch,
    previous: log.previous,
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
