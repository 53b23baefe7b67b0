import { existsSync, rmSync } from 'node:fs';
import { ConfigError, homePaths, loadConfig, type Config } from '../config.js';
import { DatabaseInUseError, DatabaseUnreachableError } from '../events/pg-connect.js';
import { MigrationError, SchemaTooNewError } from '../events/pg-schema.js';
import { JsonlEventLog } from '../events/jsonl-log.js';
import { SqliteRollups } from '../registry/rollups.js';
import { Registry } from '../registry/registry.js';
import { openStore } from '../server/store.js';
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
  let config;
  try {
    config = loadConfig({ ...(opts.home ? { home: opts.home } : {}), ...(opts.databaseUrl ? { databaseUrl: opts.databaseUrl } : {}) });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, 2);
    throw err;
  }
  if (config.databaseUrl) return rebuildDatabase(config);
  const paths = homePaths(config.home);
  if (!existsSync(paths.events)) throw new CliError(`${config.home} holds no event logs (no events/ folder): nothing to rebuild from`, 2);
  const lock = lockOrRefuse(config.home, paths, 'rebuilding the rollups');
  try {
    await rebuild(paths);
  } finally {
    lock.release();
  }
}

async function rebuild(paths: ReturnType<typeof homePaths>): Promise<void> {
  const registry = new Registry(new JsonlEventLog(paths.events, systemClock));
  const { quarantined } = await registry.open();
  for (const suffix of ['', '-wal', '-shm']) rmSync(paths.statsDb + suffix, { force: true });
  const rollups = new SqliteRollups(paths.statsDb, registry.state);
  await rollups.rebuild();
  await rollups.close();
  await registry.log.close();
  report(paths.statsDb, registry, quarantined);
}

/** The same from the database's events, replacing every rollup row in one transaction. */
async function rebuildDatabase(config: Config): Promise<void> {
  let store;
  try {
    store = await openStore(config, homePaths(config.home), systemClock);
  } catch (err) {
    if (err instanceof DatabaseUnreachableError || err instanceof SchemaTooNewError || err instanceof MigrationError) throw new CliError(err.message, 2);
    throw err;
  }
  try {
    const registry = new Registry(store.log);
    let quarantined;
    try {
      ({ quarantined } = await registry.open());
    } catch (err) {
      if (err instanceof DatabaseInUseError) throw new CliError(`${err.message}: stop it before rebuilding the rollups`, 2);
      throw err;
    }
    try {
      const rollups = store.rollups(registry.state);
      await rollups.rebuild({ replace: true });
      await rollups.close();
    } finally {
      await registry.log.close();
    }
    report(`the rollup tables of ${store.where}`, registry, quarantined);
  } finally {
    await store.close();
  }
}

function report(where: string, registry: Registry, quarantined: Array<{ taskId: string; file: string; line: number; reason: string }>): void {
  const { tasks, agents, teams, questions } = registry.state;
  process.stdout.write(`rebuilt ${where}: ${tasks.size} tasks, ${teams.size} teams, ${agents.size} agents, ${questions.size} questions\n`);
  for (const q of quarantined) process.stdout.write(`left out quarantined task ${q.taskId}: ${q.file}:${q.line}: ${q.reason} (see beidou doctor)\n`);
}
