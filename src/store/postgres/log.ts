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
  type PreviousWriter,
  type ReplayReport,
} from '../../events/event-log.js';
import { GroupCommit } from '../group-commit.js';
import { eventLine, serialiseDrafts, serialisedBytes } from '../codec.js';
import { READ_PAGE_BYTES, UNBOUNDED, type LiveMemory } from '../recent-window.js';
import { commitRows } from './commit.js';
import { Follower, type FollowedLog } from './follower.js';
import { WriterLease, type LeaseOptions } from './lease.js';
import { replayStored, taskLog, type TaskLog } from './replay.js';
import { StoredReader } from './stored-read.js';

/**
 * The event log in PostgreSQL: every event a row of `events`, keyed by `(task_id, seq)`.
 * Like the JSONL log it numbers events synchronously and commits them by group commit:
 * every append made while a commit is in flight joins the next one, and one commit is one
 * statement (one round trip, one transaction) for every task it touches, so fifty
 * concurrent senders share one commit. A reply waits on `durable`, so what the server
 * acknowledged is committed.
 *
 * One writer per database, by a lease (`WriterLease`, lease.ts): `open` takes it and
 * replays; every commit (commit.ts) inserts only if the lease's epoch is still current. A commit that
 * fails (connection lost, key or fence refused) fails the log as a failed write fails the
 * JSONL one: memory is ahead of the store, so nothing more is acknowledged. A standby's log
 * replays without the lease and follows the writer's commits (`follow`; `Follower`,
 * follower.ts) until it takes over (`promote`).
 *
 * The newest durable events of every live task are kept in memory (their JSON lines, at
 * most `memory` of them per task), so `read` and `durableSeq` stay synchronous as the
 * interface asks; older ones are read from the table (`readStored`).
 */
export class PgEventLog implements EventLog {
  private readonly tasks = new Map<string, TaskLog>();
  private readonly listeners = new Map<string, Set<EventListener>>();
  /** Ended tasks whose rows are not held in memory (unloaded, or skipped at open). */
  private readonly archived = new Set<string>();
  private readonly commits = new GroupCommit<TaskLog>(
    (batch) => this.write(batch),
    (unwritten) => {
      for (const task of unwritten) task.pending = [];
    },
  );
  /** The log's connection and its writer lease. */
  private readonly lease: WriterLease;
  /** Older events' reads, on connections of their own. */
  private readonly stored: StoredReader;
  /** While a standby's log follows the active's commits (`follow`), until `promote`. */
  private follower: Follower | null = null;
  /** What the follower reaches of this log. */
  private readonly followed: FollowedLog;

  constructor(
    url: string,
    private readonly clock: Clock,
    options: LeaseOptions = {},
    /** What of each live task is held in memory (BEIDOU_LIVE_EVENTS_IN_MEMORY, BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY). */
    private readonly memory: LiveMemory = UNBOUNDED,
  ) {
    this.lease = new WriterLease(url, options, this.commits);
    this.stored = new StoredReader(url);
    this.followed = {
      lease: this.lease,
      follows: (follower) => this.follower === follower,
      stopFollowing: () => {
        this.follower = null;
      },
      tasks: this.tasks,
      memory,
      archived: this.archived,
      close: () => this.close(),
    };
  }

  /** The epoch this log writes under (0 before `open`). */
  get writerEpoch(): number {
    return this.lease.epoch;
  }

  /** The lease this log took over at open: who held it before, and their epoch. */
  get previous(): PreviousWriter | null {
    return this.lease.previous;
  }

  async open(onEvent: (event: StoredEvent) => void, options: OpenOptions = {}): Promise<ReplayReport> {
    const client = await this.lease.connect();
    this.lease.client = client;
    try {
      await this.lease.acquire(client);
      const report = await replayStored(
        client,
        this.tasks,
        this.archived,
        onEvent,
        { ...options, memory: this.memory },
        null,
      );
      this.lease.startRenewing();
      return report;
    } catch (err) {
      this.lease.client = null;
      await client.end().catch(() => undefined);
      throw err;
    }
  }

  /**
   * Whether this writer has confirmed its lease within its length (a renewal asked for less
   * than `BEIDOU_LEASE_S` ago succeeded). Not confirmed: it may have been paused past its
   * lease and taken over, which only its next renewal or commit would tell; it then asks
   * for a renewal at once. Its health check answers 503 meanwhile, so a load balancer
   * sends nothing to an active that may no longer be one.
   */
  leaseConfirmed(): boolean {
    return !this.follower && this.lease.confirmed();
  }

  /**
   * A standby's open: replays as `open` does but takes no lease, then follows the active's
   * commits (`Follower`), so a takeover only reads what the last moments added (`promote`).
   * Appending is refused until then.
   */
  async follow(onEvent: (event: StoredEvent) => void, options: OpenOptions = {}): Promise<ReplayReport> {
    const client = await this.lease.connect();
    this.lease.client = client;
    try {
      const { rows } = await client.query<{ pos: string }>('SELECT coalesce(max(pos), 0) AS pos FROM events');
      const upTo = Number(rows[0]!.pos);
      const report = await replayStored(
        client,
        this.tasks,
        this.archived,
        onEvent,
        { ...options, memory: this.memory },
        upTo,
      );
      this.follower = new Follower(this.followed, onEvent, upTo);
      await this.follower.listenForCommits(client);
      // What was committed between the replay's bound and the LISTEN told no one.
      this.pull().catch(() => undefined);
      return report;
    } catch (err) {
      this.lease.client = null;
      this.follower = null;
      await client.end().catch(() => undefined);
      throw err;
    }
  }

  /** What a following log has applied (null once promoted, or if it never followed). */
  following(): { position: number; events: number; diverged: string | null } | null {
    return this.follower?.following() ?? null;
  }

  /** Applies what the active committed since the last read (see `Follower.pull`). */
  pull(): Promise<void> {
    return this.follower?.pull() ?? Promise.resolve();
  }

  /** A following log becomes the writer (see `Follower.promote`). */
  async promote(): Promise<{ caughtUp: number; followed: number }> {
    if (!this.follower) throw new Error('promote() is for a log opened with follow()');
    return this.follower.promote();
  }

  /**
   * A follower unloads a task the active archived (its index entry's mark matches what
   * this log holds), so a standby's memory stays bounded by live work too.
   */
  forget(taskId: string, mark: ArchiveMark): boolean {
    const task = this.tasks.get(taskId);
    if (!task || task.quarantined || task.lines.last !== mark.lastSeq || task.pending.length > 0) return false;
    this.tasks.delete(taskId);
    this.archived.add(taskId);
    return true;
  }

  append(drafts: readonly EventDraft[], admit?: (bytes: number) => void): AppendResult {
    if (this.commits.failure) throw new EventLogFailedError(this.commits.failure);
    if (this.follower)
      throw new EventLogFailedError(
        new Error('this log follows the active replica and holds no lease: it cannot append'),
      );
    const serialised = serialiseDrafts(drafts, (taskId) => {
      if (this.tasks.get(taskId)?.quarantined) throw new TaskQuarantinedError(taskId);
      if (this.archived.has(taskId)) throw new TaskArchivedError(taskId);
    });
    admit?.(serialisedBytes(serialised));
    const { heads, bodies, fields } = serialised;
    const ts = this.clock.now();
    const events: StoredEvent[] = [];
    const touched = new Set<TaskLog>();
    for (let i = 0; i < drafts.length; i++) {
      const draft = drafts[i]!;
      const task = taskLog(this.tasks, draft.task_id, this.memory);
      const seq = ++task.assigned;
      const event = { seq, ts, event: draft.event, task_id: draft.task_id, ...fields[i] } as StoredEvent;
      // The same JSON as a JSONL line, without commit markers: a commit here is one transaction.
      const line = eventLine(seq, ts, heads[i]!, bodies[i]!, seq, 1).slice(0, -1);
      task.pending.push({ event, line });
      touched.add(task);
      events.push(event);
    }
    return { events, durable: this.commits.add(touched) };
  }

  /** One group commit: every pending row of the batch in one statement (commit.ts; GroupCommit runs one at a time). */
  private async write(batch: TaskLog[]): Promise<() => void> {
    const taken = batch.map((task) => {
      const rows = task.pending;
      task.pending = [];
      return { task, rows };
    });
    await commitRows(this.lease, taken);
    for (const { task, rows } of taken) for (const { line } of rows) task.lines.push(line);
    return () => {
      for (const { task, rows } of taken) {
        const set = this.listeners.get(task.taskId);
        if (!set || rows.length === 0) continue;
        const events = rows.map((r) => r.event);
        for (const listener of set) listener(events);
      }
    };
  }

  read(taskId: string, since: number, limit: number): StoredEvent[] {
    const task = this.tasks.get(taskId);
    if (!task || limit <= 0) return [];
    const from = Math.max(0, since);
    if (from + 1 < task.lines.first && from < task.lines.last)
      throw new Error(`events of task ${taskId} after seq ${from} are no longer in memory: read them with readStored`);
    const upTo = Math.min(task.lines.last, from + limit);
    const out: StoredEvent[] = [];
    const maxBytes = this.memory.pageBytes ?? READ_PAGE_BYTES;
    // A page stops at its byte bound too (it holds at least one event): `limit` large events are no small read.
    for (let seq = from + 1, bytes = 0; seq <= upTo; seq++) {
      const line = task.lines.at(seq)!;
      bytes += line.length;
      if (out.length > 0 && bytes > maxBytes) break;
      out.push(JSON.parse(line) as StoredEvent);
    }
    return out;
  }

  readFloor(taskId: string): number {
    const task = this.tasks.get(taskId);
    return task ? task.lines.first - 1 : 0;
  }

  inMemory(taskId: string): { events: number; bytes: number } {
    const held = this.tasks.get(taskId)?.lines.held;
    return { events: held?.count ?? 0, bytes: held?.weight ?? 0 };
  }

  unload(taskId: string): ArchiveMark | null {
    const task = this.tasks.get(taskId);
    if (!task || task.quarantined) return null;
    // Rows pending or in a commit in flight: not yet a closed history.
    if (task.pending.length > 0 || task.assigned !== task.lines.last) return null;
    this.tasks.delete(taskId);
    this.archived.add(taskId);
    return { lastSeq: task.lines.last, bytes: null };
  }

  isArchived(taskId: string): boolean {
    return this.archived.has(taskId);
  }

  async readStored(taskId: string, since: number, limit: number): Promise<StoredEvent[]> {
    const floor = this.readFloor(taskId);
    if (!this.archived.has(taskId) && since >= floor) return this.read(taskId, since, limit);
    // A live task's events below its window: those rows only, the rest from memory at the next page.
    const upTo = this.archived.has(taskId) ? null : floor;
    return this.stored.page(taskId, since, upTo, limit, this.memory.pageBytes ?? READ_PAGE_BYTES);
  }

  durableSeq(taskId: string): number {
    return this.tasks.get(taskId)?.lines.last ?? 0;
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

  private closing: Promise<void> | null = null;

  close(): Promise<void> {
    return (this.closing ??= this.closeOnce());
  }

  private async closeOnce(): Promise<void> {
    this.lease.stopRenewing();
    try {
      await this.flush();
    } finally {
      await this.stored.close();
      await this.lease.release();
    }
  }
}
