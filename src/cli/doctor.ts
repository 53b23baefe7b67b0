import {
  closeSync,
  existsSync,
  fsyncSync,
  ftruncateSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  writeSync,
} from 'node:fs';
import path from 'node:path';
import { ConfigError, homePaths, loadConfig } from '../config.js';
import { acquireHomeLock, HomeLockedError, type HomeLock } from '../store/embedded/home-lock.js';
import { scanLog, type LogScan } from '../store/embedded/log-file.js';
import { reduce } from '../registry/reducer.js';
import { emptyState } from '../registry/state.js';
import { CliError } from './client.js';

const TASK_FILE = /^(.+)\.jsonl$/;

/**
 * `beidou doctor [--repair]`: verify every task log of a home the way the server's replay
 * does (JSON, seq order, task ids, commit markers, the reducer), one line per problem.
 * `--repair` copies each damaged file to `<file>.bak-<time>` and cuts it back to its last
 * whole commit before the fault; it refuses while a server holds the home.
 */
export async function doctor(opts: { home?: string; repair?: boolean }): Promise<void> {
  let home: string;
  try {
    home = loadConfig({ ...(opts.home ? { home: opts.home } : {}) }).home;
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, 2);
    throw err;
  }
  const paths = homePaths(home);
  if (!existsSync(paths.events))
    throw new CliError(`${home} holds no event logs (no events/ folder): nothing to check`, 2);
  const lock = opts.repair ? lockOrRefuse(home, paths, 'repairing') : null;
  try {
    let files = 0;
    let problems = 0;
    for (const name of readdirSync(paths.events).sort()) {
      const match = TASK_FILE.exec(name);
      if (!match) continue;
      files++;
      const file = path.join(paths.events, name);
      if (!statSync(file).isFile()) {
        // Not ours to repair: the operator moves it away.
        problems++;
        process.stdout.write(`${file}:0: not a regular file; move it out of events/\n`);
        continue;
      }
      const data = readFileSync(file);
      const state = emptyState();
      const scan = scanLog(data, match[1]!, (event) => reduce(state, event));
      const found = describe(scan);
      if (!found) continue;
      problems++;
      process.stdout.write(`${file}:${found.line}: ${found.reason}\n`);
      if (opts.repair) repair(file, data, scan);
    }
    if (problems === 0) {
      process.stdout.write(`${home}: ${files} task logs checked, no problems\n`);
    } else if (opts.repair) {
      process.stdout.write(`${home}: ${problems} of ${files} task logs repaired\n`);
    } else {
      process.stdout.write(
        `${home}: ${problems} of ${files} task logs have problems; beidou doctor --repair (server stopped) keeps a backup of each and cuts it back to its last whole commit\n`,
      );
      process.exitCode = 1;
    }
  } finally {
    lock?.release();
  }
}

/** The home's lock, or a refusal naming the server that holds it. */
export function lockOrRefuse(home: string, paths: { lock: string; lockPid: string }, what: string): HomeLock {
  try {
    return acquireHomeLock(home, paths);
  } catch (err) {
    if (err instanceof HomeLockedError) {
      throw new CliError(
        `${home} is in use by a running beidou server (pid ${err.pid ?? 'unknown'}): stop it before ${what}`,
        2,
      );
    }
    throw err;
  }
}

function describe(scan: LogScan): { line: number; reason: string } | null {
  if (scan.problem) return scan.problem;
  const { incomplete } = scan;
  if (incomplete) {
    return {
      line: incomplete.line,
      reason: `incomplete commit: seqs ${incomplete.firstSeq}-${incomplete.lastSeq} of a commit of ${incomplete.of} lines (the server drops it at start)`,
    };
  }
  if (scan.torn)
    return { line: scan.offsets.length + 1, reason: 'torn last line, a write cut short (the server cuts it at start)' };
  return null;
}

function repair(file: string, data: Buffer, scan: LogScan): void {
  const stamp = new Date()
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  const backup = `${file}.bak-${stamp}`;
  const out = openSync(backup, 'wx', 0o600);
  try {
    writeSync(out, data);
    fsyncSync(out);
  } finally {
    closeSync(out);
  }
  const fd = openSync(file, 'r+');
  try {
    ftruncateSync(fd, scan.end);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  process.stdout.write(`  repaired: kept seqs 1-${scan.offsets.length}; the whole file is in ${backup}\n`);
}
