import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import { ensurePrivateFile, PRIVATE_FILE } from '../../util/durable-file.js';

/**
 * One writer per home. Node has no `flock`, so the lock is SQLite's: `lock.db` opened in
 * exclusive locking mode and an exclusive transaction begun on it, which takes an OS lock
 * (fcntl) that the holder keeps until it closes the database or dies, even by SIGKILL. The
 * transaction writes nothing (only the first start creates the table): what it holds is the
 * lock, so a start spends no fsync on it. The pid in `lock.pid` only names the holder in the
 * refusal; it decides nothing.
 *
 * It lives with the event log because the log is what it protects: two processes
 * appending to one task file would number the same seq twice.
 */
export class HomeLockedError extends Error {
  constructor(
    readonly home: string,
    readonly pid: number | null,
  ) {
    super(`home ${home} is in use by another beidou process (pid ${pid ?? 'unknown'}); stop it first`);
  }
}

export interface HomeLock {
  release(): void;
}

export function acquireHomeLock(home: string, paths: { lock: string; lockPid: string }): HomeLock {
  ensurePrivateFile(paths.lock);
  const db = new Database(paths.lock, { timeout: 0 });
  try {
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL)');
    // BEGIN EXCLUSIVE takes the exclusive lock; in this mode it is kept after the commit.
    db.transaction(() => undefined).exclusive();
  } catch (err) {
    db.close();
    if ((err as { code?: string }).code === 'SQLITE_BUSY') throw new HomeLockedError(home, holderPid(paths.lockPid));
    throw err;
  }
  writeFileSync(paths.lockPid, `${process.pid}\n`, { mode: PRIVATE_FILE });
  let held = true;
  return {
    release() {
      if (!held) return;
      held = false;
      // Removed while still held, so it never removes the next holder's file.
      rmSync(paths.lockPid, { force: true });
      db.close();
    },
  };
}

function holderPid(file: string): number | null {
  try {
    const pid = Number.parseInt(readFileSync(file, 'utf8'), 10);
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}
