import { existsSync } from 'node:fs';
import { ConfigError, homePaths, loadConfig, type Config } from '../config.js';
import { DatabaseInUseError, DatabaseUnreachableError } from '../store/postgres/connect.js';
import { MigrationError, SchemaTooNewError } from '../store/postgres/schema.js';
import type { HomeLock } from '../store/embedded/home-lock.js';
import type { ReplayReport } from '../events/event-log.js';
import type { ArchivedTask, ArchiveIndex } from '../registry/archive.js';
import { Registry } from '../registry/registry.js';
import { openStore, type Store } from '../store/index.js';
import { systemClock } from '../util/clock.js';
import { CliError } from './client.js';
import { lockOrRefuse } from './doctor.js';

/**
 * `beidou stats rebuild`: recreate the rollups from the event logs: stats.db in the home, or
 * the rollup tables of the database with `--database-url` / `BEIDOU_DATABASE_URL`. The
 * rollups are derived data, so they can always be thrown away and rebuilt. It refuses
 * while a server holds the home (or the database's writer lock).
 */
export async function statsRebuild(opts: { home?: string; databaseUrl?: string }): Promise<void> {
  let config: Config;
  try {
    config = loadConfig({
      ...(opts.home ? { home: opts.home } : {}),
      ...(opts.databaseUrl ? { databaseUrl: opts.databaseUrl } : {}),
    });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, 2);
    throw err;
  }
  const paths = homePaths(config.home);
  // The embedded store is the home: it needs its event logs, and the home to itself. The
  // database's writer lock is taken by the replay instead.
  let lock: HomeLock | null = null;
  if (!config.databaseUrl) {
    if (!existsSync(paths.events))
      throw new CliError(`${config.home} holds no event logs (no events/ folder): nothing to rebuild from`, 2);
    lock = lockOrRefuse(config.home, paths, 'rebuilding the rollups');
  }
  try {
    await rebuild(config, paths);
  } finally {
    lock?.release();
  }
}

/** Replays the store's events, then replaces every rollup row (in one transaction on PostgreSQL) and the archive index. */
async function rebuild(config: Config, paths: ReturnType<typeof homePaths>): Promise<void> {
  let store: Store;
  try {
    store = await openStore(config, paths, systemClock);
  } catch (err) {
    if (err instanceof DatabaseUnreachableError || err instanceof SchemaTooNewError || err instanceof MigrationError)
      throw new CliError(err.message, 2);
    throw err;
  }
  try {
    const registry = new Registry(store.log);
    let quarantined: ReplayReport['quarantined'];
    let archived = 0;
    let held: Counts = { tasks: 0, teams: 0, agents: 0, questions: 0 };
    try {
      ({ quarantined } = await registry.open());
    } catch (err) {
      if (err instanceof DatabaseInUseError)
        throw new CliError(`${err.message}: stop it before rebuilding the rollups`, 2);
      throw err;
    }
    try {
      await store.discardDerived();
      const rollups = store.rollups(registry.state);
      await rollups.rebuild({ replace: true });
      await rollups.close();
      held = counts(registry);
      archived = await rebuildIndex(registry, store.archive(), config.archiveAfterS);
    } finally {
      await registry.log.close();
    }
    report(
      store.kind === 'postgres' ? `the rollup tables of ${store.where}` : paths.statsDb,
      held,
      quarantined,
      archived,
    );
  } finally {
    await store.close();
  }
}

/**
 * The archive index from the logs (the whole state is in memory here): every ended task a
 * server would have archived by now (ended at least `BEIDOU_ARCHIVE_AFTER_S` ago, nothing
 * live left in it) gets its entry; every other entry goes. The rollups are written first,
 * from the whole state.
 */
async function rebuildIndex(registry: Registry, index: ArchiveIndex, archiveAfterS: number): Promise<number> {
  const now = systemClock.now();
  const entries: ArchivedTask[] = [];
  try {
    for (const task of [...registry.state.tasks.values()]) {
      if (task.ended_at === null || task.ended_at + archiveAfterS > now) continue;
      const entry = registry.unload(task.task_id, now);
      if (entry) entries.push(entry);
    }
    await index.replaceAll(entries);
  } finally {
    await index.close();
  }
  return entries.length;
}

function report(
  where: string,
  counts: Counts,
  quarantined: Array<{ taskId: string; file: string; line: number; reason: string }>,
  archived: number,
): void {
  process.stdout.write(
    `rebuilt ${where}: ${counts.tasks} tasks, ${counts.teams} teams, ${counts.agents} agents, ${counts.questions} questions\n`,
  );
  if (archived > 0)
    process.stdout.write(`rebuilt the archive index: ${archived} ended tasks, read from the store when asked for\n`);
  for (const q of quarantined)
    process.stdout.write(
      `left out quarantined task ${q.taskId}: ${q.file}:${q.line}: ${q.reason} (see beidou doctor)\n`,
    );
}

interface Counts {
  tasks: number;
  teams: number;
  agents: number;
  questions: number;
}

/** What the replay holds, before the archive index takes the ended tasks out of it. */
function counts(registry: Registry): Counts {
  const { tasks, agents, teams, questions } = registry.state;
  return { tasks: tasks.size, teams: teams.size, agents: agents.size, questions: questions.size };
}
