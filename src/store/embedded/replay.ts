import {
  closeSync,
  constants,
  fdatasyncSync,
  ftruncateSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
} from 'node:fs';
import path from 'node:path';
import type { StoredEvent } from '../../events/catalogue.js';
import type { ArchiveMark, OpenOptions, ReplayReport } from '../../events/event-log.js';
import { scanLog } from './log-file.js';
import { LineIndex } from './line-index.js';
import { emptyFile, openTaskFile, type TaskFile } from './task-file.js';

/**
 * The JSONL log's start: every task file of `events/` verified and replayed (scanLog), its
 * torn tail cut, a damaged one quarantined, an archived one left on disk unread when it
 * still ends where its archive mark says.
 */

const TASK_FILE = /^(.+)\.jsonl$/;

/**
 * Replays the task files of `dir` into `onEvent`, filling `files` with each one's state
 * (`window`: the line offsets each holds densely) and `archived` with the tasks left on disk only.
 */
export function replayTaskFiles(
  dir: string,
  onEvent: (event: StoredEvent) => void,
  options: OpenOptions,
  files: Map<string, TaskFile>,
  archived: Set<string>,
  window: number,
): ReplayReport {
  const report: ReplayReport = { cut: [], quarantined: [], archived: [] };
  for (const name of readdirSync(dir).sort()) {
    const match = TASK_FILE.exec(name);
    if (!match) continue;
    const taskId = match[1]!;
    const filePath = path.join(dir, name);
    const mark = options.archived?.get(taskId);
    // The file is the truth: the mark is trusted only if the file still ends where it said.
    if (mark && endsAtMark(filePath, mark)) {
      archived.add(taskId);
      report.archived.push(taskId);
      continue;
    }
    const stat = statSync(filePath);
    if (!stat.isFile()) {
      // A folder (or a device) by a task file's name: that task cannot load, the rest can.
      files.set(taskId, { ...emptyFile(taskId, -1, 0, window), quarantined: true });
      report.quarantined.push({ taskId, file: filePath, line: 0, reason: 'not a regular file' });
      continue;
    }
    const file = openTaskFile(files, dir, taskId, window);
    const data = readFileSync(filePath);
    const scan = scanLog(data, taskId, onEvent);
    file.lines = LineIndex.of(scan.offsets, window);
    file.end = file.durableEnd = scan.end;
    file.durableSeq = scan.offsets.length;
    if (scan.problem) {
      // Left as it is for `beidou doctor`; its trusted prefix stays readable.
      file.quarantined = true;
      report.quarantined.push({ taskId, file: filePath, ...scan.problem });
    } else if (scan.end < data.length) {
      // A torn line or a commit missing lines was never acknowledged (the reply waits
      // for the sync of the whole commit): cut it, so the next write starts clean.
      ftruncateSync(file.fd, scan.end);
      fdatasyncSync(file.fd);
      const { incomplete } = scan;
      report.cut.push({
        taskId,
        file: filePath,
        torn: scan.torn,
        incomplete: incomplete && { firstSeq: incomplete.firstSeq, lastSeq: incomplete.lastSeq, of: incomplete.of },
      });
    }
  }
  return report;
}

/**
 * The seq of a file's last line, reading only its tail: every line starts `{"seq":N,`, so
 * the start of the last line is enough. -1 when the file does not end in a whole line.
 */
function lastSeqOf(filePath: string, size: number): number {
  if (size === 0) return 0;
  const fd = openSync(filePath, 'r');
  try {
    // One read of the tail finds the last line's start unless that line is longer than it.
    let end = size;
    for (;;) {
      const start = Math.max(0, end - TAIL.length);
      const n = readSync(fd, TAIL, 0, end - start, start);
      if (end === size && TAIL[n - 1] !== 0x0a) return -1;
      // Past the final newline, back to the newline before the last line (or the file's start).
      const from = end === size ? n - 2 : n - 1;
      const nl = from >= 0 ? TAIL.lastIndexOf(0x0a, from) : -1;
      if (nl === -1 && start > 0) {
        end = start;
        continue;
      }
      const lineStart = start + nl + 1;
      let head: string;
      if (lineStart + 24 <= start + n) head = TAIL.toString('latin1', nl + 1, nl + 1 + 24);
      else {
        const buf = Buffer.alloc(24);
        head = buf.toString('latin1', 0, readSync(fd, buf, 0, buf.length, lineStart));
      }
      const match = /^\{"seq":(\d+),/.exec(head);
      return match ? Number(match[1]) : -1;
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * Whether a task file still ends where its archive mark says: `mark.bytes` long, its last
 * line that of `mark.lastSeq`. One open and one read, no stat: asked for one byte more
 * than the tail before the mark, the read returns exactly the tail only if the file ends
 * at the mark. False on any doubt (an error, a folder, a FIFO: opened without blocking),
 * and then the file is looked at as any other.
 */
function endsAtMark(filePath: string, mark: ArchiveMark): boolean {
  const { bytes, lastSeq } = mark;
  if (bytes === null || bytes <= 0) return false;
  let fd: number;
  try {
    fd = openSync(filePath, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch {
    return false;
  }
  try {
    const tail = Math.min(bytes, TAIL.length - 1);
    const n = readSync(fd, TAIL, 0, tail + 1, bytes - tail);
    if (n !== tail || TAIL[n - 1] !== 0x0a) return false;
    // Back from the final newline to the one before the last line (or the file's start).
    let nl = n - 2;
    while (nl >= 0 && TAIL[nl] !== 0x0a) nl--;
    // A last line longer than the tail: found by the longer search.
    if (nl < 0 && bytes > tail) return lastSeqOf(filePath, bytes) === lastSeq;
    const match = /^\{"seq":(\d+),/.exec(TAIL.toString('latin1', nl + 1, Math.min(n, nl + 1 + 24)));
    return match !== null && Number(match[1]) === lastSeq;
  } catch {
    return false;
  } finally {
    closeSync(fd);
  }
}

/** The tail read of `lastSeqOf` and `endsAtMark`, shared: the start checks one file at a time. */
const TAIL = Buffer.allocUnsafe(8 * 1024);
