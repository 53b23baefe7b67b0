import { existsSync, rmSync } from 'node:fs';
import { ConfigError, homePaths, loadConfig } from '../config.js';
import { JsonlEventLog } from '../events/jsonl-log.js';
import { SqliteRollups } from '../registry/rollups.js';
import { Registry } from '../registry/registry.js';
import { systemClock } from '../util/clock.js';
import { CliError } from './client.js';
import { lockOrRefuse } from './doctor.js';

/**
 * `beidou stats rebuild`: recreate stats.db from the event logs. The rollups are derived
 * data, so they can always be thrown away and rebuilt. It refuses while a server holds the home.
 */
export async function statsRebuild(opts: { home?: string }): Promise<void> {
  let config;
  try {
    config = loadConfig({ ...(opts.home ? { home: opts.home } : {}) });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, 2);
    throw err;
  }
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
  rollups.rebuild();
  rollups.close();
  await registry.log.close();
  const { tasks, agents, teams, questions } = registry.state;
  process.stdout.write(`rebuilt ${paths.statsDb}: ${tasks.size} tasks, ${teams.size} teams, ${agents.size} agents, ${questions.size} questions\n`);
  for (const q of quarantined) process.stdout.write(`left out quarantined task ${q.taskId}: ${q.file}:${q.line}: ${q.reason} (see beidou doctor)\n`);
}
