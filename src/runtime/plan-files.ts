import { closeSync, fsyncSync, mkdirSync, openSync, renameSync, writeSync } from 'node:fs';
import path from 'node:path';
import { homePaths } from '../config.js';

/**
 * Plan files: `plans/{task_id}/{plan_id}.json`, written atomically (temp file, fsync,
 * rename, fsync of the folder) so a reader never sees half a plan. `remove_plan` renames
 * the file to `{plan_id}.removed.json`. The event log stays the source of truth; the files
 * are the human-readable copy the seed promises.
 */

export function planPath(home: string, taskId: string, planId: string): string {
  return path.join(homePaths(home).plans, taskId, `${planId}.json`);
}

function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export function writePlanFile(file: string, content: unknown): void {
  const dir = path.dirname(file);
  mkdirSync(dir, { recursive: true });
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.tmp`);
  const fd = openSync(tmp, 'w', 0o644);
  try {
    writeSync(fd, JSON.stringify(content, null, 2) + '\n');
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  fsyncDir(dir);
}

export function markPlanFileRemoved(file: string): string {
  const removed = file.replace(/\.json$/, '.removed.json');
  renameSync(file, removed);
  fsyncDir(path.dirname(file));
  return removed;
}
