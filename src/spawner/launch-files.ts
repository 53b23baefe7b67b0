import { closeSync, constants, lstatSync, mkdirSync, openSync, readdirSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * The private folders an agent's launch files live in (its MCP config with its token, its
 * settings whose hooks run as the spawner's user, its system prompt): `beidou-<uid>` in the
 * system's temporary folder, `spawner-<instance>` in it for each spawner, and a fresh
 * folder per agent process in that, removed when the process ends.
 *
 * Each folder is created mode 0700 or, when it exists already, accepted only if it is a
 * real folder (not a symlink) owned by this user with no access for anyone else: another
 * local user who made `beidou-<uid>` first, or swapped in a symlink, is refused in one
 * line. Files are created exclusively and never through a symlink (`O_EXCL|O_NOFOLLOW`).
 */

export class LaunchFolderError extends Error {}

const uid = () => (typeof process.getuid === 'function' ? process.getuid() : null);

/** Throws LaunchFolderError unless `dir` is a folder of this user's, reachable by nobody else. */
export function checkPrivateDir(dir: string): void {
  const st = lstatSync(dir);
  const fix = `remove it (or point TMPDIR elsewhere) and start the spawner again`;
  if (st.isSymbolicLink()) throw new LaunchFolderError(`the launch folder ${dir} is a symlink, not a folder: ${fix}`);
  if (!st.isDirectory()) throw new LaunchFolderError(`the launch folder ${dir} is not a folder: ${fix}`);
  const me = uid();
  if (me !== null && st.uid !== me)
    throw new LaunchFolderError(`the launch folder ${dir} belongs to uid ${st.uid}, not to this user (${me}): ${fix}`);
  if (me !== null && (st.mode & 0o077) !== 0)
    throw new LaunchFolderError(
      `the launch folder ${dir} has mode 0${(st.mode & 0o777).toString(8)}, wider than 0700: ${fix}`,
    );
}

/** Creates `dir` (its parent must exist) mode 0700, or checks the one there. */
export function ensurePrivateDir(dir: string): void {
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  checkPrivateDir(dir);
}

const EXCLUSIVE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | (constants.O_NOFOLLOW ?? 0);

/** Writes a new file mode 0600: refused if anything (a file, a symlink) is at that path already. */
export function writePrivateFile(dir: string, name: string, text: string): string {
  const file = path.join(dir, name);
  const fd = openSync(file, EXCLUSIVE, 0o600);
  try {
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
  return file;
}

/** One agent process's launch folder. */
export class AgentLaunchDir {
  constructor(readonly path: string) {}

  /** Writes `name` in this folder (exclusively, 0600) and answers its path. */
  write(name: string, text: string): string {
    return writePrivateFile(this.path, name, text);
  }

  remove(): void {
    rmSync(this.path, { recursive: true, force: true });
  }
}

/** A spawner's launch folders: `<tmp>/beidou-<uid>/spawner-<instance>/<agent>-<n>`. */
export class LaunchFiles {
  private count = 0;

  private constructor(
    /** `beidou-<uid>`: every spawner's of this user (the sandbox hides all of it). */
    readonly root: string,
    /** This spawner's. */
    readonly dir: string,
  ) {}

  /**
   * Opens this spawner's folder, checked; what a spawner of the same instance left there (it
   * died before removing its agents' files) is removed.
   */
  static open(instance: string, base = os.tmpdir()): LaunchFiles {
    const root = path.join(base, `beidou-${uid() ?? os.userInfo().username}`);
    ensurePrivateDir(root);
    const dir = path.join(root, `spawner-${instance.replace(/[^A-Za-z0-9._-]/g, '_')}`);
    ensurePrivateDir(dir);
    for (const stale of readdirSync(dir)) rmSync(path.join(dir, stale), { recursive: true, force: true });
    return new LaunchFiles(root, dir);
  }

  /** A fresh folder for one process of `agentId`. */
  agentDir(agentId: string): AgentLaunchDir {
    checkPrivateDir(this.dir);
    const dir = path.join(this.dir, `${agentId.replace(/[^A-Za-z0-9._-]/g, '_')}-${++this.count}`);
    mkdirSync(dir, { mode: 0o700 }); // EEXIST: something made it under us; refused
    checkPrivateDir(dir);
    return new AgentLaunchDir(dir);
  }

  /** Removes this spawner's folder (its agents are gone). */
  close(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
