import { chmodSync, closeSync, existsSync, fsyncSync, mkdirSync, openSync, renameSync, writeSync } from 'node:fs';
import { mkdir, open, rename } from 'node:fs/promises';
import path from 'node:path';

/**
 * Files that must never be seen half-written: written to a temp file, fsynced, renamed
 * into place, and the folder fsynced, so after a crash the file is either the old one or
 * the whole new one. They are the writer's alone (0600, folders made 0700): what they hold
 * (plans, a spawner's identity) is no other local user's to read.
 */

/** Mode of the files written here and of the folders made for them. */
export const PRIVATE_FILE = 0o600;
export const PRIVATE_DIR = 0o700;

function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export function writeFileAtomic(file: string, text: string): void {
  const dir = path.dirname(file);
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR });
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.tmp`);
  const fd = openSync(tmp, 'w', PRIVATE_FILE);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  fsyncDir(dir);
}

/** `writeFileAtomic` off the event loop: a large file's write and fsync do not hold other requests up. */
export async function writeFileAtomicAsync(file: string, text: string): Promise<void> {
  const dir = path.dirname(file);
  await mkdir(dir, { recursive: true, mode: PRIVATE_DIR });
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.tmp`);
  const handle = await open(tmp, 'w', PRIVATE_FILE);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(tmp, file);
  const folder = await open(dir, 'r');
  try {
    await folder.sync();
  } finally {
    await folder.close();
  }
}

/** A rename that survives a crash once it returns. */
export function renameDurably(from: string, to: string): void {
  renameSync(from, to);
  fsyncDir(path.dirname(to));
}

/**
 * A file another library will open (SQLite's database, whose `-wal` and `-shm` it creates
 * with the database's own mode): made 0600 first if it is new, set to 0600 if it is wider,
 * its `-wal` and `-shm` too when they exist.
 */
export function ensurePrivateFile(file: string): void {
  closeSync(openSync(file, 'a', PRIVATE_FILE));
  for (const f of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(f)) chmodSync(f, PRIVATE_FILE);
}
