import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { homePaths, prepareHome, type Config } from '../config.js';
import type { DomainContext } from '../domain/context.js';
import { acquireHomeLock, type HomeLock } from '../events/home-lock.js';
import type { ReplayReport } from '../events/log.js';
import { newAdminToken, newSigningSecret, readOrCreateSecretFile } from '../identity/secrets.js';
import { TokenService } from '../identity/tokens.js';
import { Registry } from '../registry/registry.js';
import type { RollupStore } from '../registry/rollups.js';
import type { AnyPrimitive } from '../primitives/define.js';
import { PRIMITIVES } from '../primitives/index.js';
import type { ArchiveIndex } from '../registry/archive.js';
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
import { PACKAGE_ROOT } from '../util/version.js';
import { AdminStreams } from './admin-streams.js';
import { buildApp } from './app.js';
import { Authenticator } from './auth.js';
import { createHttpServer } from './http-limits.js';
import { McpSessions } from './mcp.js';
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

export interface BeidouServer {
  url: string;
  port: number;
  host: string;
  adminToken: string;
  adminTokenFile: string | null;
  services: Services;
  /** The rollups, in SQLite or PostgreSQL (batched; `flush()` writes the pending batch now). */
  rollups: RollupStore;
  /** Which store holds the state, and where (never a password). */
  store: { kind: Store['kind']; where: string };
  /** The watchdog, whose `tick()` a test can drive with a fake clock. */
  watchdog: Watchdog;
  /** Unloads ended tasks; `tick()` runs one pass (a test drives it with a fake clock). */
  archiver: Archiver;
  /** What the start read: events reduced, and ended tasks left archived (not read). */
  startup: { replayed_events: number; archived_tasks: number };
  /** Open MCP sessions (Streamable HTTP and SSE), for observability and tests. */
  mcpSessions(): number;
  /** Open admin SSE streams (task events, task list), likewise. */
  adminStreams(): number;
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
 * accepts connections.
 */
export async function startServer(config: Config, options: StartOptions = {}): Promise<BeidouServer> {
  const logger = options.logger ?? createLogger(config.logLevel);
  const clock = options.clock ?? systemClock;
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

  const openedAt = performance.now(); // a duration for the log line, not a time of day
  const store = await openStore(config, paths, clock);
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
    const report = await registry.open(entries);
    logReplay(logger, report);
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
  const tokens = new TokenService(secret, config.tokenTtlS, clock);
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

  const auth = new Authenticator(adminToken, services.tokens, registry);
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
  const httpServer = createHttpServer(app, config, logger, clock);

  try {
    await new Promise<void>((resolve, reject) => {
      httpServer.once('error', reject);
      httpServer.listen(config.port, config.host, () => {
        httpServer.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    // Could not listen (port taken, bad host): release the log and the databases.
    await log.close();
    await rollups.close();
    await archive.close();
    await store.close();
    throw err;
  }
  const address = httpServer.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  watchdog.start();
  archiver.start();
  services.spawners.start();
  mcp.startExpiry();

  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      // Stop accepting, end the long-lived streams, let in-flight requests finish, then
      // flush the log and the rollups.
      const closed = new Promise<void>((resolve) => httpServer.close(() => resolve()));
      watchdog.stop();
      tasksFeed.stop();
      const archiverStopped = archiver.stop();
      services.spawners.stop();
      stopping.abort();
      services.inboxes.wakeAll();
      // Blocked calls now end; let their responses reach the clients before closing
      // sessions. What is left open after that is idle or a stream: cut it.
      await mcp.drained(DRAIN_MS);
      await mcp.closeAll();
      httpServer.closeAllConnections();
      await closed;
      await archiverStopped;
      try {
        await log.close();
      } finally {
        try {
          await rollups.close();
        } finally {
          await archive.close().catch(() => undefined);
          await store.close();
          homeLock.release();
        }
      }
      logger.info('stopped');
      await new Promise<void>((resolve) => logger.flush(() => resolve()));
    })());

  return {
    url,
    port: address.port,
    host: config.host,
    adminToken,
    adminTokenFile: config.adminToken ? null : paths.adminToken,
    services,
    rollups,
    store: { kind: store.kind, where: store.where },
    watchdog,
    archiver,
    startup: { replayed_events: registry.replayedEvents, archived_tasks: registry.archived.size },
    mcpSessions: () => mcp.size,
    adminStreams: () => adminStreams.size,
    close,
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
