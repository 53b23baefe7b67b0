import { randomUUID } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from '../util/durable-file.js';
import { pidAlive } from '../util/process.js';

/**
 * The spool dir around the spool file (spool.ts): who uses it and who this spawner is.
 *
 * Files in the spool dir: `spawner.json` (the instance id and the sequences reserved so
 * far), `spool.jsonl` (one entry a line, spool.ts), `lock.pid` (the spawner using the dir),
 * `token` (a spawner token it minted itself, 0600).
 */

export class SpoolBusy extends Error {}

/** What `spawner.json` keeps: the instance id, and the spool sequences reserved up to. */
export interface SpoolIdentity {
  instance: string;
  seq_reserved: number;
}

export function readSpoolIdentity(dir: string): SpoolIdentity | null {
  const file = path.join(dir, 'spawner.json');
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as SpoolIdentity) : null;
}

export function writeSpoolIdentity(dir: string, identity: SpoolIdentity): void {
  writeFileAtomic(
    path.join(dir, 'spawner.json'),
    `${JSON.stringify({ instance: identity.instance, seq_reserved: identity.seq_reserved })}\n`,
  );
}

/** One spawner per spool dir: a second would number the same sequences twice. */
export function lockSpoolDir(dir: string): void {
  const file = path.join(dir, 'lock.pid');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, 'wx', 0o600);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const pid = Number.parseInt(readFileSync(file, 'utf8'), 10);
    if (Number.isInteger(pid) && pid !== process.pid && pidAlive(pid)) {
      throw new SpoolBusy(
        `the spool dir ${dir} is in use by spawner pid ${pid}; give this spawner its own --spool-dir`,
      );
    }
    rmSync(file, { force: true }); // left by a process that died
  }
  throw new SpoolBusy(`could not lock the spool dir ${dir}`);
}

export function unlockSpoolDir(dir: string): void {
  rmSync(path.join(dir, 'lock.pid'), { force: true });
}

/** A spawner token this spawner minted itself, kept so its identity survives a restart. */
export function savedToken(dir: string): string | null {
  const file = path.join(dir, 'token');
  return existsSync(file) ? readFileSync(file, 'utf8').trim() || null : null;
}

export function saveToken(dir: string, token: string): void {
  const file = path.join(dir, 'token');
  const fd = openSync(file, 'w', 0o600);
  try {
    writeSync(fd, `${token}\n`);
  } finally {
    closeSync(fd);
  }
}

/** A fresh instance id: the host name and a random tail (kept in the spool dir from then on). */
export function newInstanceId(hostname: string): string {
  return `${hostname.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 60)}-${randomUUID().slice(0, 8)}`;
}
