import { closeSync, fdatasync, fdatasyncSync, ftruncateSync, readSync, write } from 'node:fs';
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
import { eventLine, serialiseDrafts, serialisedBytes } from '../codec.js';
import { GroupCommit } from '../group-commit.js';
import { READ_PAGE_BYTES, UNBOUNDED, type LiveMemory } from '../recent-window.js';
import { skipLines } from './line-index.js';
import { replayTaskFiles } from './replay.js';
import { openTaskFile, type TaskFile } from './task-file.js';

/**
 * The embedded event log: one `events/{task_id}.jsonl` per task. Appends are written by a
 * group commit: every append made while a commit is in flight joins the next one, so fifty
 * concurrent senders share one write and one fdatasync per file. A reply waits on
 * `durable`, so what the server acknowledged is on disk.
 *
 * No event is kept in memory once written: `read` reads the lines from the file by offset,
 * and of the offsets only the newest `memory.events` per task, and one in STRIDE before
 * them (line-index.ts), so a live task's index stays small however long it runs.
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
    /** What of a live task is held in memory: here, how many of its newest line offsets (`events`). */
    private readonly memory: LiveMemory = UNBOUNDED,
  ) {}

  async open(onEvent: (event: StoredEvent) => void, options: OpenOptions = {}): Promise<ReplayReport> {
    return replayTaskFiles(this.dir, onEvent, options, this.files, this.archived, this.memory.events);
  }

  append(drafts: readonly EventDraft[], admit?: (bytes: number) => void): AppendResult {
    if (this.commits.failure) throw new EventLogFailedError(this.commits.failure);
    const serialised = serialiseDrafts(drafts, (taskId) => {
      if (this.files.get(taskId)?.quarantined) throw new TaskQuarantinedError(taskId);
      if (this.archived.has(taskId)) throw new TaskArchivedError(taskId);
    });
    admit?.(serialisedBytes(serialised));
    const { heads, bodies, fields } = serialised;
    const perFile = new Map<string, number>();
    for (const d of drafts) perFile.set(d.task_id, (perFile.get(d.task_id) ?? 0) + 1);
    const ts = this.clock.now();
    const commits = new Map<string, number>();
    const touched = new Set<TaskFile>();
    const events: StoredEvent[] = [];
    for (let i = 0; i < drafts.length; i++) {
      const draft = drafts[i]!;
      const file = openTaskFile(this.files, this.dir, draft.task_id, this.memory.events);
      const seq = file.lines.count + 1;
      let first = commits.get(draft.task_id);
      if (first === undefined) commits.set(draft.task_id, (first = seq));
      const event = { seq, ts, event: draft.event, task_id: draft.task_id, ...fields[i] } as StoredEvent;
      const line = eventLine(seq, ts, heads[i]!, bodies[i]!, first, perFile.get(draft.task_id)!);
      file.lines.push(file.end);
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
    // Below the window of offsets held, the lines are found on disk from the mark before them.
    const start = file.lines.startOf(from + 1, file.fd);
    const end =
      upTo === file.durableSeq
        ? file.durableEnd
        : (file.lines.held(upTo + 1) ?? skipLines(file.fd, start, upTo - from));
    const buf = readPage(file.fd, start, end, this.memory.pageBytes ?? READ_PAGE_BYTES);
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
    if (file.pendingLines.length > 0 || file.durableSeq !== file.lines.count) return null;
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
    const maxBytes = this.memory.pageBytes ?? READ_PAGE_BYTES;
    let s = 0;
    let bytes = 0;
    while (s < data.length && out.length < limit) {
      const nl = data.indexOf(0x0a, s);
      if (nl === -1) break;
      const event = JSON.parse(data.toString('utf8', s, nl)) as StoredEvent & { commit?: number; of?: number };
      const size = nl + 1 - s;
      s = nl + 1;
      if (event.seq <= since) continue;
      bytes += size;
      if (out.length > 0 && bytes > maxBytes) break;
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

  /** Every line of a live task's file can be read synchronously, from its offset or its mark. */
  readFloor(_taskId: string): number {
    return 0;
  }

  inMemory(taskId: string): { events: number; bytes: number } {
    return { events: this.files.get(taskId)?.lines.heldCount ?? 0, bytes: 0 };
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

// The fd was opened with O_APPEND, so the kernel appends whatever position is given.
const writeAt = (fd: number, buf: Buffer, off: number) => promisify(write)(fd, buf, off, buf.length - off, null);
const datasync = promisify(fdatasync);

/**
 * The lines in `[start, end)` of a task file, but at most `maxBytes` of them (whole lines,
 * at least the first): a page of `limit` large events is no small read.
 */
function readPage(fd: number, start: number, end: number, maxBytes: number): Buffer {
  const size = Math.min(end - start, maxBytes);
  const buf = readAt(fd, start, size);
  if (size === end - start) return buf;
  const last = buf.lastIndexOf(0x0a);
  return last >= 0 ? buf.subarray(0, last + 1) : readAt(fd, start, skipLines(fd, start, 1) - start);
}

function readAt(fd: number, position: number, size: number): Buffer {
  const buf = Buffer.allocUnsafe(size);
  let got = 0;
  while (got < size) got += readSync(fd, buf, got, size - got, position + got);
  return buf;
}
