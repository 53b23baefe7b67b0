import {
  closeSync,
  constants,
  fdatasync,
  fdatasyncSync,
  fstatSync,
  ftruncateSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
  write,
} from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Clock } from '../../util/clock.js';
import type { EventDraft, StoredEvent } from '../../events/catalogue.js';
import {
  EventLogFailedError,
  TaskArchivedError,
  TaskQuarantinedError,
  type AppendResult,
  type ArchiveMark,
  type EventListener,
  type EventLog,
  type OpenOptions,
  type ReplayReport,
} from '../../events/event-log.js';
import { GroupCommit } from '../group-commit.js';
import { eventLine, scanLog, serialiseDrafts } from './log-file.js';

interface TaskFile {
  taskId: string;
  fd: number;
  /** Byte offset where each seq's line starts: offsets[seq - 1]. */
  offsets: number[];
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

const emptyFile = (taskId: string, fd: number, size: number): TaskFile => ({
  taskId,
  fd,
  offsets: [],
  end: size,
  durableEnd: size,
  durableSeq: 0,
  pendingLines: [],
  pendingEvents: [],
  quarantined: false,
});

const TASK_FILE = /^(.+)\.jsonl$/;

/**
 * The embedded event log: one `events/{task_id}.jsonl` per task. Appends are written by a
 * group commit: every append made while a commit is in flight joins the next one, so fifty
 * concurrent senders share one write and one fdatasync per file. A reply waits on
 * `durable`, so what the server acknowledged is on disk.
 */
export class JsonlEventLog implements EventLog {
  private readonly files = new Map<string, TaskFile>();
  private readonly listeners = new Map<string, Set<EventListener>>();
  /** Ended tasks left on disk only (unloaded, or skipped at open): no fd, no offsets. */
  private readonly archived = new Set<string>();
  private readonly commits = new GroupCommit<TaskFile>((batch) => this.write(batch));
  /** No lease: the embedded files have no writer epoch and no previous holder. */
  readonly writerEpoch = null;
  readonly previous = null;

  constructor(
    private readonly dir: string,
    private readonly clock: Clock,
  ) {}

  async open(onEvent: (event: StoredEvent) => void, options: OpenOptions = {}): Promise<ReplayReport> {
    const report: ReplayReport = { cut: [], quarantined: [], archived: [] };
    for (const name of readdirSync(this.dir).sort()) {
      const match = TASK_FILE.exec(name);
      if (!match) continue;
      const taskId = match[1]!;
      const filePath = path.join(this.dir, name);
      const mark = options.archived?.get(taskId);
      // The file is the truth: the mark is trusted only if the file still ends where it said.
      if (mark && endsAtMark(filePath, mark)) {
        this.archived.add(taskId);
        report.archived.push(taskId);
        continue;
      }
      const stat = statSync(filePath);
      if (!stat.isFile()) {
        // A folder (or a device) by a task file's name: that task cannot load, the rest can.
        this.files.set(taskId, { ...emptyFile(taskId, -1, 0), quarantined: true });
        report.quarantined.push({ taskId, file: filePath, line: 0, reason: 'not a regular file' });
        continue;
      }
      const file = this.openFile(taskId);
      const data = readFileSync(filePath);
      const scan = scanLog(data, taskId, onEvent);
      file.offsets = scan.offsets;
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

  private openFile(taskId: string): TaskFile {
    let file = this.files.get(taskId);
    if (file) return file;
    const fd = openSync(path.join(this.dir, `${taskId}.jsonl`), 'a+');
    const size = fstatSync(fd).size;
    file = emptyFile(taskId, fd, size);
    this.files.set(taskId, file);
    return file;
  }

  append(drafts: readonly EventDraft[]): AppendResult {
    if (this.commits.failure) throw new EventLogFailedError(this.commits.failure);
    const { heads, bodies, fields } = serialiseDrafts(drafts, (taskId) => {
      if (this.files.get(taskId)?.quarantined) throw new TaskQuarantinedError(taskId);
      if (this.archived.has(taskId)) throw new TaskArchivedError(taskId);
    });
    const perFile = new Map<string, number>();
    for (const d of drafts) perFile.set(d.task_id, (perFile.get(d.task_id) ?? 0) + 1);
    const ts = this.clock.now();
    const commits = new Map<string, number>();
    const touched = new Set<TaskFile>();
    const events: StoredEvent[] = [];
    for (let i = 0; i < drafts.length; i++) {
      const draft = drafts[i]!;
      const file = this.openFile(draft.task_id);
      const seq = file.offsets.length + 1;
      let first = commits.get(draft.task_id);
      if (first === undefined) commits.set(draft.task_id, (first = seq));
      const event = { seq, ts, event: draft.event, task_id: draft.task_id, ...fields[i] } as StoredEvent;
      const line = eventLine(seq, ts, heads[i]!, bodies[i]!, first, perFile.get(draft.task_id)!);
      file.offsets.push(file.end);
      file.end += Buffer.byteLength(line);
      file.pendingLines.push(line);
      file.pendingEvents.push(event);
      touched.add(file);
      events.push(event);
    }
    return { events, durable: this.commits.add(touched) };
  }

  /** One group commit: each file's pending lines written and fdatasynced (GroupCommit runs one at a time). */
  private async write(batch: TaskFile[]): Promise<() => void> {
    const written: Array<{ file: TaskFile; events: StoredEvent[]; end: number }> = [];
    try {
      // allSettled: every write has finished (or failed) before a failure cuts the files back.
      const outcomes = await Promise.allSettled(
        batch.map(async (file) => {
          const lines = file.pendingLines;
          const events = file.pendingEvents;
          file.pendingLines = [];
          file.pendingEvents = [];
          const buf = Buffer.from(lines.join(''));
          let off = 0;
          while (off < buf.length) {
            const { bytesWritten } = await writeAt(file.fd, buf, off);
            off += bytesWritten;
          }
          await datasync(file.fd);
          written.push({ file, events, end: file.durableEnd + buf.length });
        }),
      );
      const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
      if (failed) throw failed.reason;
    } catch (err) {
      // A failed write leaves memory ahead of disk: nothing of this batch was acknowledged,
      // so cut every file of it back to its last durable byte (no torn line may stay to
      // glue the next write onto); the throw refuses every later append loudly.
      for (const file of batch) {
        try {
          ftruncateSync(file.fd, file.durableEnd);
          fdatasyncSync(file.fd);
        } catch {
          // The disk refuses even that; the torn tail is cut at the next start instead.
        }
      }
      throw err;
    }
    for (const { file, events, end } of written) {
      file.durableEnd = end;
      file.durableSeq = events[events.length - 1]!.seq;
    }
    return () => {
      for (const { file, events } of written) {
        const set = this.listeners.get(file.taskId);
        if (!set) continue;
        for (const listener of set) listener(events);
      }
    };
  }

  read(taskId: string, since: number, limit: number): StoredEvent[] {
    const file = this.files.get(taskId);
    if (!file || limit <= 0) return [];
    const from = Math.max(0, since);
    const upTo = Math.min(file.durableSeq, from + limit);
    if (upTo <= from) return [];
    const start = file.offsets[from]!;
    const end = upTo < file.offsets.length ? file.offsets[upTo]! : file.durableEnd;
    const buf = Buffer.allocUnsafe(end - start);
    let got = 0;
    while (got < buf.length) got += readSync(file.fd, buf, got, buf.length - got, start + got);
    const out: StoredEvent[] = [];
    let s = 0;
    while (s < buf.length) {
      const nl = buf.indexOf(0x0a, s);
      const event = JSON.parse(buf.toString('utf8', s, nl)) as StoredEvent & { commit?: number; of?: number };
      // Commit markers belong to the file, not to the event.
      if (event.of !== undefined) {
        delete event.commit;
        delete event.of;
      }
      out.push(event);
      s = nl + 1;
    }
    return out;
  }

  unload(taskId: string): ArchiveMark | null {
    const file = this.files.get(taskId);
    if (!file || file.quarantined) return null;
    // Lines queued or in a commit in flight: not yet all on disk, so not yet a closed history.
    if (file.pendingLines.length > 0 || file.durableSeq !== file.offsets.length) return null;
    if (file.fd >= 0) closeSync(file.fd);
    this.files.delete(taskId);
    this.archived.add(taskId);
    return { lastSeq: file.durableSeq, bytes: file.durableEnd };
  }

  isArchived(taskId: string): boolean {
    return this.archived.has(taskId);
  }

  async readStored(taskId: string, since: number, limit: number): Promise<StoredEvent[]> {
    if (!this.archived.has(taskId)) return this.read(taskId, since, limit);
    const data = await readFile(path.join(this.dir, `${taskId}.jsonl`));
    const out: StoredEvent[] = [];
    let s = 0;
    while (s < data.length && out.length < limit) {
      const nl = data.indexOf(0x0a, s);
      if (nl === -1) break;
      const event = JSON.parse(data.toString('utf8', s, nl)) as StoredEvent & { commit?: number; of?: number };
      s = nl + 1;
      if (event.seq <= since) continue;
      if (event.of !== undefined) {
        delete event.commit;
        delete event.of;
      }
      out.push(event);
    }
    return out;
  }

  durableSeq(taskId: string): number {
    return this.files.get(taskId)?.durableSeq ?? 0;
  }

  subscribe(taskId: string, listener: EventListener): () => void {
    let set = this.listeners.get(taskId);
    if (!set) this.listeners.set(taskId, (set = new Set()));
    set.add(listener);
    return () => set.delete(listener);
  }

  flush(): Promise<void> {
    return this.commits.flush();
  }

  async close(): Promise<void> {
    try {
      await this.flush();
    } finally {
      for (const file of this.files.values()) if (file.fd >= 0) closeSync(file.fd);
      this.files.clear();
    }
  }
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

// The fd was opened with O_APPEND, so the kernel appends whatever position is given.
const writeAt = (fd: number, buf: Buffer, off: number) =>
  promisify(write)(fd, buf, off, buf.length - off, null);
const datasync = promisify(fdatasync);
