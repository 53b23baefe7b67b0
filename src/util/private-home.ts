import { chmodSync, type Dirent, lstatSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { PRIVATE_DIR, PRIVATE_FILE } from './durable-file.js';

/**
 * The server's own files in a home an older version (or a person) left open to others, set
 * to the server user's alone: a file's mode is given only when it is created, so the logs of
 * ended and archived tasks, plan files, an old `lock.pid` kept the mode they were made with.
 * Each folder 0700 and file 0600 of `events/` and `plans/`; `stats.db*`, `lock.*`, `secret`,
 * `admin.token`; `agents/` itself and its `*.token` files (the rest of `agents/` may be a
 * spawner's workspaces: left as it is). Symbolic links are skipped (a chmod follows them).
 */
export function tightenHomeFiles(home: string): { changed: number; failed: Array<{ file: string; reason: string }> } {
  const result = { changed: 0, failed: [] as Array<{ file: string; reason: string }> };
  const set = (file: string, isDir: boolean) => {
    try {
      const stat = lstatSync(file);
      if (stat.isSymbolicLink() || stat.isDirectory() !== isDir) return;
      const wanted = isDir ? PRIVATE_DIR : PRIVATE_FILE;
      if ((stat.mode & 0o777) === wanted) return;
      chmodSync(file, wanted);
      result.changed++;
    } catch (err) {
      const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      if (reason !== 'ENOENT') result.failed.push({ file, reason });
    }
  };
  const tree = (dir: string) => {
    set(dir, true);
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) tree(file);
      else if (entry.isFile()) set(file, false);
    }
  };
  tree(path.join(home, 'events'));
  tree(path.join(home, 'plans'));
  let top: string[] = [];
  try {
    top = readdirSync(home);
  } catch {
    // The home was just made: nothing older in it.
  }
  for (const name of top)
    if (name.startsWith('stats.db') || name.startsWith('lock.') || name === 'secret' || name === 'admin.token')
      set(path.join(home, name), false);
  const agents = path.join(home, 'agents');
  set(agents, true);
  let tokens: string[] = [];
  try {
    tokens = readdirSync(agents).filter((name) => name.endsWith('.token'));
  } catch {
    // No agents folder.
  }
  for (const name of tokens) set(path.join(agents, name), false);
  return result;
}
