import os from 'node:os';
import type pg from 'pg';
import type { Clock } from '../util/clock.js';
import type { EventDraft, StoredEvent } from './catalogue.js';
import {
  EventLogFailedError,
  TaskArchivedError,
  TaskQuarantinedError,
  UnstorableEventError,
  type AppendResult,
  type ArchiveMark,
  type EventListener,
  type EventLog,
  type OpenOptions,
  type ReplayReport,
} from './log.js';
import { eventLine } from './log-file.js';
import { connectClient, DatabaseInUseError, describeDatabaseUrl, LOG_APPLICATION } from './pg-connect.js';

interface TaskLog {
  taskId: string;
  /** The JSON of each durable event: lines[seq - 1]. Served by `read` (which stays synchronous). */
  lines: string[];
  /** Assigned but not yet handed to a commit, in seq order. */
  pending: Array<{ event: StoredEvent; line: string }>;
  /** The last seq assigned (durable, in a commit in flight, or pending). */
  assigned: number;
  /** Failed verification at start: read-only, its trusted prefix still readable. */
  quarantined: boolean;
}

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

/** Rows read per query at start. */
const REPLAY_PAGE = 5_000;

/**
 * The event log in PostgreSQL: every event a row of `events`, keyed by `(task_id, seq)`.
 * Like the JSONL log it numbers events synchronously and commits them by group commit:
 * every append made while a commit is in flight joins the next one, and one commit is one
 * statement (one round trip, one transaction) for every task it touches, so fifty
 * concurrent senders share one commit. A reply waits on `durable`, so what the server
 * acknowledged is committed.
 *
 * One writer per database, by a lease: `open` takes the lease row (`log_writer`) only if
 * it is free (never held, expired, or its holder's log connection gone), ends the old
 * holder's log connection, bumps the epoch, and replays; a lease held by a live writer is
 * refused (`DatabaseInUseError`: a replica stays a standby). The holder renews the lease
 * every third of its length; every commit holds the row and inserts only if the epoch is
 * still its own, and the primary key refuses a seq already taken. The expiry says only
 * when a standby may take over; the epoch is the fence. A takeover bumps it holding the row,
 * so a commit in flight lands first (and is in the taker's replay) and none of the old
 * epoch lands after. A holder that was merely late (a long commit ahead of its renewal, a
 * paused event loop) and that no one has taken over from keeps writing and renews.
 * An advisory lock would not do: a paused (SIGSTOPped) process keeps its connection and
 * its lock, where its lease runs out. If the connection drops while idle, the next commit
 * reconnects and re-checks the fence. A commit that fails (connection lost, key or fence
 * refused) fails the log as a failed write fails the JSONL one: memory is ahead of the
 * store, so nothing more is acknowledged. Once the log is fenced (another writer took the
 * lease) or its lease has run out while failed, `onLost` is called once: the owner steps
 * down and replays afresh if it takes the lease again.
 *
 * Durable events of every task are kept in memory (their JSON lines), so `read` and
 * `durableSeq` stay synchronous as the interface asks.
 */
export class PgEventLog implements EventLog {
  private readonly tasks = new Map<string, TaskLog>();
  private readonly listeners = new Map<string, Set<EventListener>>();
  /** Ended tasks whose rows are not held in memory (unloaded, or skipped at open). */
  private readonly archived = new Set<string>();
  private waiters: Waiter[] = [];
  private dirty = new Set<TaskLog>();
  private committing: Promise<void> | null = null;
  private scheduled = false;
  private failure: Error | null = null;
  private client: pg.Client | null = null;
  private epoch = 0;
  private closed = false;
  private readonly holder: string;
  private readonly leaseS: number;
  private readonly onLost: (lost: LeaseLost) => void;
  private renewTimer: NodeJS.Timeout | null = null;
  private renewing = false;
  private lost: LeaseLost | null = null;
  /** The lease this log took over at open: who held it before, and their epoch. */
  previous: { holder: string | null; epoch: number; expired: boolean } | null = null;

  constructor(
    private readonly url: string,
    private readonly clock: Clock,
    options: LeaseOptions = {},
  ) {
    this.holder = options.holder ?? defaultHolder();
    this.leaseS = options.leaseS ?? 3;
    this.onLost = options.onLost ?? (() => undefined);
  }

  /** The epoch this log writes under (0 before `open`). */
  get writerEpoch(): number {
    return this.epoch;
  }

  private async connect(): Promise<pg.Client> {
    const client = await connectClient(this.url, LOG_APPLICATION, () => {
      // An idle connection that drops is replaced at the next commit; a commit in flight
      // sees its own query fail.
      if (this.client === client) this.client = null;
    });
    client.on('end', () => {
      if (this.client === client) this.client = null;
    });
    return client;
  }

  /**
   * A new connection for a log already open (the last one dropped): it becomes the
   * lease's recorded connection only if the lease is still this log's, else the log is fenced.
   */
  private async reconnect(): Promise<pg.Client> {
    const client = await this.connect();
    const { rowCount } = await client.query('UPDATE log_writer SET holder_pid = pg_backend_pid() WHERE epoch = $1', [this.epoch]);
    if (rowCount === 0) {
      await client.end().catch(() => undefined);
      throw new WriterFencedError(this.epoch);
    }
    return client;
  }

  async open(onEvent: (event: StoredEvent) => void, options: OpenOptions = {}): Promise<ReplayReport> {
    const client = await this.connect();
    this.client = client;
    try {
      await this.acquire(client);
      const archived = options.archived?.size ? await matchingMarks(client, options.archived) : [];
      for (const taskId of archived) this.archived.add(taskId);
      const report = await this.replay(client, onEvent, archived.length > 0 ? await liveTasks(client, this.archived) : null);
      report.archived = archived;
      this.renewTimer = setInterval(() => void this.renew(), (this.leaseS * 1000) / 3);
      this.renewTimer.unref();
      return report;
    } catch (err) {
      this.client = null;
      await client.end().catch(() => undefined);
      throw err;
    }
  }

  /**
   * Takes the lease if it is free, in one transaction holding the row (a commit of the
   * old holder in flight finishes first, and is in the replay that follows), then ends the
   * old holder's log connection if it is still there (a paused process keeps it open).
   */
  private async acquire(client: pg.Client): Promise<void> {
    await client.query('BEGIN');
    let old: { epoch: string; holder: string | null; holder_pid: number | null; expired: boolean; until: Date | null };
    try {
      const { rows } = await client.query<typeof old>(
        'SELECT epoch, holder, holder_pid, (expires_at IS NULL OR expires_at <= now()) AS expired, expires_at AS until FROM log_writer FOR UPDATE',
      );
      old = rows[0]!;
      const alive = old.holder_pid === null ? null : await backend(client, old.holder_pid);
      if (!old.expired && alive) {
        throw new DatabaseInUseError(
          describeDatabaseUrl(this.url),
          `held by ${old.holder ?? 'an unnamed server'}, lease until ${old.until?.toISOString() ?? '?'}; its connection: backend pid ${old.holder_pid}${alive.addr ? ` from ${alive.addr}` : ' over the local socket'}, since ${alive.since.toISOString()}`,
          old.holder,
        );
      }
      const { rows: taken } = await client.query<{ epoch: string }>(
        `UPDATE log_writer SET epoch = epoch + 1, opened_at = now(), holder = $1, holder_pid = pg_backend_pid(),
                expires_at = now() + make_interval(secs => $2) RETURNING epoch`,
        [this.holder, this.leaseS],
      );
      await client.query('COMMIT');
      this.epoch = Number(taken[0]!.epoch);
      this.previous = { holder: old.holder, epoch: Number(old.epoch), expired: old.expired };
      if (alive) {
        // Its lease ran out but its connection lives (a paused process): end it. The epoch
        // already fences it; this frees what the session holds.
        await client.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2", [old.holder_pid, LOG_APPLICATION]).catch(() => undefined);
      }
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  }

  /** Renews the lease; once it is lost (fenced, or run out while the log is failed), says so once. */
  private async renew(): Promise<void> {
    if (this.renewing || this.closed || this.lost) return;
    this.renewing = true;
    try {
      if (this.failure) {
        // A failed log renews nothing: its lease runs out and a replica (this one, after
        // stepping down, or another) takes over with a fresh replay.
        const now = await this.leaseRow();
        if (now && (now.epoch !== this.epoch || !now.valid)) this.lose(now, this.failure.message);
        return;
      }
      const client = (this.client ??= await this.reconnect());
      // By epoch alone: a renewal that comes late, with no takeover meanwhile, still holds.
      const { rowCount } = await client.query('UPDATE log_writer SET expires_at = now() + make_interval(secs => $2) WHERE epoch = $1', [this.epoch, this.leaseS]);
      if (rowCount === 0) throw new WriterFencedError(this.epoch);
    } catch (err) {
      if (err instanceof WriterFencedError) await this.fenced(err);
      // Anything else (the database away for a moment) is retried at the next tick; if a
      // standby took over meanwhile, the epoch refuses the next commit and the renewal.
    } finally {
      this.renewing = false;
    }
  }

  /** The lease row as it is now, read on a connection of its own; null if unreadable. */
  private async leaseRow(): Promise<{ epoch: number; holder: string | null; valid: boolean } | null> {
    let client: pg.Client | null = null;
    try {
      client = await connectClient(this.url, LOG_APPLICATION);
      const { rows } = await client.query<{ epoch: string; holder: string | null; valid: boolean }>('SELECT epoch, holder, coalesce(expires_at > now(), false) AS valid FROM log_writer');
      const r = rows[0]!;
      return { epoch: Number(r.epoch), holder: r.holder, valid: r.valid };
    } catch {
      return null;
    } finally {
      await client?.end().catch(() => undefined);
    }
  }

  private async fenced(err: WriterFencedError): Promise<void> {
    if (!this.failure) {
      this.failure = err;
      this.rejectQueued();
    }
    const now = await this.leaseRow();
    this.lose(now, err.message);
  }

  private lose(now: { epoch: number; holder: string | null } | null, reason: string): void {
    if (this.lost || this.closed) return;
    this.lost = { epoch: this.epoch, newEpoch: now && now.epoch !== this.epoch ? now.epoch : null, holder: now && now.epoch !== this.epoch ? now.holder : null, reason };
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.onLost(this.lost);
  }

  /** `only`: the tasks to replay (the rest are archived); null: every task. */
  private async replay(client: pg.Client, onEvent: (event: StoredEvent) => void, only: string[] | null): Promise<ReplayReport> {
    const report: ReplayReport = { cut: [], quarantined: [], archived: [] };
    let after: [string, number] = ['', 0];
    for (;;) {
      const { rows } = await client.query<{ task_id: string; seq: number; body: string }>(
        only
          ? 'SELECT task_id, seq, body::text AS body FROM events WHERE task_id = ANY($4::text[]) AND (task_id, seq) > ($1, $2) ORDER BY task_id, seq LIMIT $3'
          : 'SELECT task_id, seq, body::text AS body FROM events WHERE (task_id, seq) > ($1, $2) ORDER BY task_id, seq LIMIT $3',
        only ? [after[0], after[1], REPLAY_PAGE, only] : [after[0], after[1], REPLAY_PAGE],
      );
      for (const row of rows) {
        const task = this.taskLog(row.task_id);
        if (task.quarantined) continue;
        const problem = this.replayRow(task, row, onEvent);
        if (problem) {
          task.quarantined = true;
          report.quarantined.push({ taskId: task.taskId, file: `events table, task ${task.taskId}`, line: row.seq, reason: problem });
        }
      }
      if (rows.length < REPLAY_PAGE) return report;
      const last = rows[rows.length - 1]!;
      after = [last.task_id, last.seq];
    }
  }

  /** Verifies one stored row as the JSONL replay verifies a line, applies it, and keeps it; or says why not. */
  private replayRow(task: TaskLog, row: { task_id: string; seq: number; body: string }, onEvent: (event: StoredEvent) => void): string | null {
    const expected = task.lines.length + 1;
    if (row.seq !== expected) return `seq ${row.seq}, expected ${expected}`;
    let event: StoredEvent;
    try {
      event = JSON.parse(row.body) as StoredEvent;
    } catch {
      return 'not valid JSON';
    }
    if (typeof event !== 'object' || event === null || Array.isArray(event) || typeof event.event !== 'string') return 'not an event object';
    if (event.seq !== row.seq) return `its body says seq ${String(event.seq)}`;
    if (event.task_id !== task.taskId) return `names task ${String(event.task_id)} in a row of task ${task.taskId}`;
    try {
      onEvent(event);
    } catch (err) {
      return `cannot be applied: ${(err as Error).message}`;
    }
    task.lines.push(row.body);
    task.assigned = row.seq;
    return null;
  }

  private taskLog(taskId: string): TaskLog {
    let task = this.tasks.get(taskId);
    if (!task) this.tasks.set(taskId, (task = { taskId, lines: [], pending: [], assigned: 0, quarantined: false }));
    return task;
  }

  append(drafts: readonly EventDraft[]): AppendResult {
    if (this.failure) throw new EventLogFailedError(this.failure);
    // Everything that can refuse comes before anything is numbered: a batch is all or nothing.
    const heads: string[] = new Array(drafts.length);
    const bodies: string[] = new Array(drafts.length);
    const fields: Array<Record<string, unknown>> = new Array(drafts.length);
    for (let i = 0; i < drafts.length; i++) {
      const { event: name, task_id, ...rest } = drafts[i]!;
      if (this.tasks.get(task_id)?.quarantined) throw new TaskQuarantinedError(task_id);
      if (this.archived.has(task_id)) throw new TaskArchivedError(task_id);
      try {
        bodies[i] = JSON.stringify(rest);
        heads[i] = `"event":${JSON.stringify(name)},"task_id":${JSON.stringify(task_id)}`;
      } catch (err) {
        throw new UnstorableEventError(i, err);
      }
      fields[i] = rest;
    }
    const ts = this.clock.now();
    const events: StoredEvent[] = [];
    for (let i = 0; i < drafts.length; i++) {
      const draft = drafts[i]!;
      const task = this.taskLog(draft.task_id);
      const seq = ++task.assigned;
      const event = { seq, ts, event: draft.event, task_id: draft.task_id, ...fields[i] } as StoredEvent;
      // The same JSON as a JSONL line, without commit markers: a commit here is one transaction.
      const line = eventLine(seq, ts, heads[i]!, bodies[i]!, seq, 1).slice(0, -1);
      task.pending.push({ event, line });
      this.dirty.add(task);
      events.push(event);
    }
    const durable = new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    this.schedule();
    return { events, durable };
  }

  private schedule(): void {
    if (this.failure) return this.rejectQueued();
    if (this.scheduled || this.committing) return;
    this.scheduled = true;
    // setImmediate lets every append made in this turn of the event loop join the commit.
    setImmediate(() => {
      this.scheduled = false;
      this.committing = this.commit().finally(() => {
        this.committing = null;
        if (this.waiters.length > 0) this.schedule();
      });
    });
  }

  private async commit(): Promise<void> {
    const batch = [...this.dirty];
    const waiters = this.waiters;
    this.dirty = new Set();
    this.waiters = [];
    const taken = batch.map((task) => {
      const rows = task.pending;
      task.pending = [];
      return { task, rows };
    });
    const taskIds: string[] = [];
    const seqs: number[] = [];
    const tss: number[] = [];
    const names: string[] = [];
    const lines: string[] = [];
    const newTasks: string[] = [];
    const newTaskTs: number[] = [];
    for (const { rows } of taken) {
      for (const { event, line } of rows) {
        taskIds.push(event.task_id);
        seqs.push(event.seq);
        tss.push(event.ts);
        names.push(event.event);
        lines.push(line);
        if (event.seq === 1) {
          newTasks.push(event.task_id);
          newTaskTs.push(event.ts);
        }
      }
    }
    try {
      if (lines.length > 0) {
        const client = (this.client ??= await this.reconnect());
        // One statement: one round trip and one transaction. The fence row is held (FOR
        // SHARE) so that a takeover bumping the epoch waits for this commit, and sees it in
        // its replay; a commit after a takeover inserts nothing.
        const { rows } = await client.query<{ stored: number }>(
          `WITH fence AS (
             SELECT epoch FROM log_writer WHERE epoch = $1 FOR SHARE
           ), new_tasks AS (
             INSERT INTO log_tasks (task_id, created_ts)
             SELECT * FROM unnest($2::text[], $3::float8[]) WHERE EXISTS (SELECT 1 FROM fence)
           ), stored AS (
             INSERT INTO events (task_id, seq, ts, event, body)
             SELECT t, s, ts, e, b::json FROM unnest($4::text[], $5::int[], $6::float8[], $7::text[], $8::text[]) AS r(t, s, ts, e, b)
             WHERE EXISTS (SELECT 1 FROM fence)
             RETURNING 1
           )
           SELECT count(*)::int AS stored FROM stored`,
          [this.epoch, newTasks, newTaskTs, taskIds, seqs, tss, names, lines],
        );
        if (rows[0]!.stored !== lines.length) throw new WriterFencedError(this.epoch);
      }
    } catch (err) {
      // Memory is ahead of the store, and whether a commit cut short was stored is not
      // known: nothing of this batch is acknowledged, and nothing more will be.
      this.failure = describeCommitFailure(err);
      const error = new EventLogFailedError(this.failure);
      for (const w of waiters) w.reject(error);
      this.rejectQueued();
      if (err instanceof WriterFencedError) void this.fenced(err);
      return;
    }
    for (const { task, rows } of taken) for (const { line } of rows) task.lines.push(line);
    for (const w of waiters) w.resolve();
    for (const { task, rows } of taken) {
      const set = this.listeners.get(task.taskId);
      if (!set || rows.length === 0) continue;
      const events = rows.map((r) => r.event);
      for (const listener of set) listener(events);
    }
  }

  private rejectQueued(): void {
    const error = new EventLogFailedError(this.failure);
    for (const w of this.waiters.splice(0)) w.reject(error);
    for (const task of this.dirty) task.pending = [];
    this.dirty.clear();
  }

  read(taskId: string, since: number, limit: number): StoredEvent[] {
    const task = this.tasks.get(taskId);
    if (!task || limit <= 0) return [];
    const from = Math.max(0, since);
    const upTo = Math.min(task.lines.length, from + limit);
    const out: StoredEvent[] = [];
    for (let i = from; i < upTo; i++) out.push(JSON.parse(task.lines[i]!) as StoredEvent);
    return out;
  }

  unload(taskId: string): ArchiveMark | null {
    const task = this.tasks.get(taskId);
    if (!task || task.quarantined) return null;
    // Rows pending or in a commit in flight: not yet a closed history.
    if (task.pending.length > 0 || task.assigned !== task.lines.length) return null;
    this.tasks.delete(taskId);
    this.archived.add(taskId);
    return { lastSeq: task.lines.length, bytes: null };
  }

  isArchived(taskId: string): boolean {
    return this.archived.has(taskId);
  }

  async readStored(taskId: string, since: number, limit: number): Promise<StoredEvent[]> {
    if (!this.archived.has(taskId)) return this.read(taskId, since, limit);
    // On the log's own connection: an archived task is read rarely, and in one statement.
    const client = (this.client ??= await this.reconnect());
    const { rows } = await client.query<{ body: string }>('SELECT body::text AS body FROM events WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3', [taskId, since, limit]);
    return rows.map((r) => JSON.parse(r.body) as StoredEvent);
  }

  durableSeq(taskId: string): number {
    return this.tasks.get(taskId)?.lines.length ?? 0;
  }

  subscribe(taskId: string, listener: EventListener): () => void {
    let set = this.listeners.get(taskId);
    if (!set) this.listeners.set(taskId, (set = new Set()));
    set.add(listener);
    return () => set.delete(listener);
  }

  async flush(): Promise<void> {
    if (this.failure) throw new EventLogFailedError(this.failure);
    if (this.waiters.length === 0 && !this.committing) return;
    const { durable } = this.append([]);
    await durable;
  }

  private closing: Promise<void> | null = null;

  close(): Promise<void> {
    return (this.closing ??= this.closeOnce());
  }

  private async closeOnce(): Promise<void> {
    if (this.renewTimer) clearInterval(this.renewTimer);
    try {
      await this.flush();
    } finally {
      this.closed = true;
      const client = this.client;
      this.client = null;
      // A clean stop hands the lease on at once: a standby listening takes over without
      // waiting for it to run out. Only a lease still this log's is released.
      if (client && this.epoch > 0 && !this.lost) {
        await client
          .query("UPDATE log_writer SET expires_at = now() WHERE epoch = $1 AND expires_at > now() RETURNING pg_notify('beidou_lease', 'released')", [this.epoch])
          .catch(() => undefined);
      }
      await client?.end().catch(() => undefined);
    }
  }
}

/** Another server opened the database after this one: its commits are refused. */
export class WriterFencedError extends Error {
  constructor(readonly epoch: number) {
    super(`another beidou server opened the database after this one (writer epoch ${epoch} is no longer current); this server's commit was refused`);
  }
}

/** A commit's failure in words an operator can act on; the driver's message stays in it. */
function describeCommitFailure(err: unknown): Error {
  if (err instanceof WriterFencedError || err instanceof DatabaseInUseError) return err;
  const e = err as { code?: string; detail?: string; message?: string };
  if (e.code === '23505') {
    return new Error(`another writer already stored an event this server numbered (${e.detail ?? e.message}): the (task_id, seq) key refused the commit`);
  }
  return new Error(`a commit to PostgreSQL failed (${e.message ?? String(err)}); whether it was stored is unknown, and nothing of it was acknowledged`);
}

/** The archived tasks whose mark still matches the table: their last seq is there and nothing after it. */
async function matchingMarks(client: pg.Client, marks: ReadonlyMap<string, ArchiveMark>): Promise<string[]> {
  // The marks as one JSON text: the driver writes array literals in JavaScript, escaping each of 10,000 elements.
  const json = JSON.stringify(Array.from(marks, ([task_id, mark]) => ({ task_id, last_seq: mark.lastSeq })));
  const { rows } = await client.query<{ task_id: string }>(
    // One descent of the (task_id, seq) key per task: the seqs from the mark on are exactly the mark's.
    `SELECT m.task_id FROM json_to_recordset($1::json) AS m(task_id text, last_seq int)
      WHERE ARRAY(SELECT e.seq FROM events e WHERE e.task_id = m.task_id AND e.seq >= m.last_seq ORDER BY e.seq LIMIT 2) = ARRAY[m.last_seq]`,
    [json],
  );
  return rows.map((r) => r.task_id);
}

/** Every task the log holds but the archived ones: what a start replays. */
async function liveTasks(client: pg.Client, archived: ReadonlySet<string>): Promise<string[]> {
  const { rows } = await client.query<{ task_id: string }>('SELECT task_id FROM log_tasks ORDER BY task_id');
  return rows.map((r) => r.task_id).filter((id) => !archived.has(id));
}

/** The lease lost: the epoch this log wrote under, the one now (and its holder) if another took it, and why. */
export interface LeaseLost {
  epoch: number;
  newEpoch: number | null;
  holder: string | null;
  reason: string;
}

export interface LeaseOptions {
  /** This writer's name in the lease row (default: host name and pid). */
  holder?: string;
  /** The lease's length in seconds (`BEIDOU_LEASE_S`, default 3); renewed every third of it. */
  leaseS?: number;
  /** Called once when the lease is lost: the owner must stop serving. */
  onLost?: (lost: LeaseLost) => void;
}

export function defaultHolder(): string {
  return `${os.hostname()}:${process.pid}`;
}

/** A backend by pid, if it is still connected: its address and start, for the refusal. */
async function backend(client: pg.Client, pid: number): Promise<{ addr: string | null; since: Date } | null> {
  const { rows } = await client.query<{ addr: string | null; since: Date }>('SELECT host(client_addr) AS addr, backend_start AS since FROM pg_stat_activity WHERE pid = $1', [pid]);
  return rows[0] ?? null;
}
