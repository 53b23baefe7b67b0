import { fchmodSync, fstatSync, openSync } from 'node:fs';
import { PRIVATE_FILE } from '../../util/durable-file.js';
import path from 'node:path';
import type { StoredEvent } from '../../events/catalogue.js';
import { LineIndex } from './line-index.js';

/**
 * What the JSONL log holds per task file, `events/{task_id}.jsonl`: its open fd, where each
 * line starts, what of it is durable and what waits for the next group commit. Filled by the
 * replay at start (replay.ts), then by the log's appends (jsonl-log.ts).
 */
export interface TaskFile {
  taskId: string;
  fd: number;
  /** Where each seq's line starts (the newest densely, older ones by marks: line-index.ts); `lines.count` is the last seq. */
  lines: LineIndex;
  /** Byte length once every appended line is written. */
  end: number;
  /** Byte length and seq that are on disk and synced. */
  durableEnd: number;
  durableSeq: number;
  /** Lines and events queued for the next group commit. */
  pendingLines: string[];
  pendingEvents: StoredEvent[];
  /** Failed verification at start: read-only until `beidou doctor --repair`. */
  quarantined: boolean;
}

export const emptyFile = (taskId: string, fd: number, size: number, window: number): TaskFile => ({
  taskId,
  fd,
  lines: new LineIndex(window),
  end: size,
  durableEnd: size,
  durableSeq: 0,
  pendingLines: [],
  pendingEvents: [],
  quarantined: false,
});

/**
 * The task's file of `files`, opened for appending (and created) in `dir` if it is not yet;
 * `window`: how many of its newest line offsets to hold.
 */
export function openTaskFile(files: Map<string, TaskFile>, dir: string, taskId: string, window: number): TaskFile {
  let file = files.get(taskId);
  if (file) return file;
  // The log is the server's alone: created 0600, and a file an older version made wider set so.
  const fd = openSync(path.join(dir, `${taskId}.jsonl`), 'a+', PRIVATE_FILE);
  const { size, mode } = fstatSync(fd);
  if ((mode & 0o777) !== PRIVATE_FILE) fchmodSync(fd, PRIVATE_FILE);
  file = emptyFile(taskId, fd, size, window);
  files.set(taskId, file);
  return file;
}
