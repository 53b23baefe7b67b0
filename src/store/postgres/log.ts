import os from 'node:os';
import type pg from 'pg';
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
import { eventLine, serialiseDrafts } from '../codec.js';
import { connectClient, DatabaseInUseError, describeDatabaseUrl, LOG_APPLICATION } from './connect.js';

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

/** Rows read per query at start. */
const REPLAY_PAGE = 5_000;
/** The least time a follower's read of one page may take before its connection is taken for dead. */
const PULL_BOUND_MS = 5_000;

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
  private readonly commits = new GroupCommit<TaskLog>(
    (batch) => this.write(batch),
    (unwritten) => {
      for (const task of unwritten) task.pending = [];
    },
  );
  private client: pg.Client | null = null;
  private epoch = 0;
  private closed = false;
  private readonly holder: string;
  private readonly leaseS: number;
  private readonly onLost: (lost: LeaseLost) => void;
  private renewTimer: NodeJS.Timeout | null = null;
  private renewing = false;
  /** When the last renewal (or the takeover) that succeeded was asked for (`performance.now()`, a duration base). */
  private confirmedAt = 0;
  private lost: LeaseLost | null = null;
  /** The lease this log took over at open: who held it before, and their epoch. */
  previous: { holder: string | null; epoch: number; expired: boolean } | null = null;
  /** While a standby's log follows the active's commits (`follow`), until `promote`. */
  private follower: Follower | null = null;

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
    const asked = performance.now();
    await client.query('BEGIN');
    try {
      // A replica paused inside this transaction would hold the lease row from every other:
      // PostgreSQL ends its session once it idles in it for a lease.
      await client.query(`SET LOCAL idle_in_transaction_session_timeout = ${Math.max(1000, Math.round(this.leaseS * 1000))}`);
      const { old, alive } = await this.leaseHeld(client, 'FOR UPDATE');
      const { rows: taken } = await client.query<{ epoch: string }>(
        `UPDATE log_writer SET epoch = epoch + 1, opened_at = now(), holder = $1, holder_pid = pg_backend_pid(),
                expires_at = now() + make_interval(secs => $2) RETURNING epoch`,
        [this.holder, this.leaseS],
      );
      await client.query('COMMIT');
      this.confirmedAt = asked;
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

  /**
   * The lease row and whether its holder's log connection is alive; refuses with
   * `DatabaseInUseError` while the lease is valid and held by a live connection. A
   * follower's poll asks without a lock (a row lock would hold up the active's commits).
   */
  private async leaseHeld(client: pg.Client, lock: 'FOR UPDATE' | '') {
    const { rows } = await client.query<{ epoch: string; holder: string | null; holder_pid: number | null; expired: boolean; until: Date | null }>(
      `SELECT epoch, holder, holder_pid, (expires_at IS NULL OR expires_at <= now()) AS expired, expires_at AS until FROM log_writer ${lock}`,
    );
    const old = rows[0]!;
    const alive = old.holder_pid === null ? null : await backend(client, old.holder_pid);
    if (!old.expired && alive) {
      throw new DatabaseInUseError(
        describeDatabaseUrl(this.url),
        `held by ${old.holder ?? 'an unnamed server'}, lease until ${old.until?.toISOString() ?? '?'}; its connection: backend pid ${old.holder_pid}${alive.addr ? ` from ${alive.addr}` : ' over the local socket'}, since ${alive.since.toISOString()}`,
        old.holder,
      );
    }
    return { old, alive };
  }

  /**
   * Whether this writer has confirmed its lease within its length (a renewal asked for less
   * than `BEIDOU_LEASE_S` ago succeeded). Not confirmed: it may have been paused past its
   * lease and taken over, which only its next renewal or commit would tell; it then asks
   * for a renewal at once. Its health check answers 503 meanwhile, so a load balancer
   * sends nothing to an active that may no longer be one.
   */
  leaseConfirmed(): boolean {
    if (this.epoch === 0 || this.follower || this.lost) return false;
    if (performance.now() - this.confirmedAt < this.leaseS * 1000) return true;
    void this.renew();
    return false;
  }

  /** Renews the lease; once it is lost (fenced, or run out while the log is failed), says so once. */
  private async renew(): Promise<void> {
    if (this.renewing || this.closed || this.lost) return;
    this.renewing = true;
    try {
      const failure = this.commits.failure;
      if (failure) {
        // A failed log renews nothing: its lease runs out and a replica (this one, after
        // stepping down, or another) takes over with a fresh replay.
        const now = await this.leaseRow();
        if (now && (now.epoch !== this.epoch || !now.valid)) this.lose(now, failure.message);
        return;
      }
      const client = (this.client ??= await this.reconnect());
      // By epoch alone: a renewal that comes late, with no takeover meanwhile, still holds.
      const asked = performance.now();
      const { rowCount } = await client.query('UPDATE log_writer SET expires_at = now() + make_interval(secs => $2) WHERE epoch = $1', [this.epoch, this.leaseS]);
      if (rowCount === 0) throw new WriterFencedError(this.epoch);
      this.confirmedAt = asked;
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
    this.commits.fail(err);
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
  /** `only`: the tasks to replay (the rest are archived); null: every task. `upTo`: the last position to read (a follower reads the rest as it follows). */
  private async replay(client: pg.Client, onEvent: (event: StoredEvent) => void, only: string[] | null, upTo: number | null = null): Promise<ReplayReport> {
    const report: ReplayReport = { cut: [], quarantined: [], archived: [] };
    let after: [string, number] = ['', 0];
    const bound = upTo === null ? '' : ` AND pos <= ${Math.trunc(upTo)}`;
    for (;;) {
      const { rows } = await client.query<{ task_id: string; seq: number; body: string }>(
        only
          ? `SELECT task_id, seq, body::text AS body FROM events WHERE task_id = ANY($4::text[]) AND (task_id, seq) > ($1, $2)${bound} ORDER BY task_id, seq LIMIT $3`
          : `SELECT task_id, seq, body::text AS body FROM events WHERE (task_id, seq) > ($1, $2)${bound} ORDER BY task_id, seq LIMIT $3`,
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

  /**
   * A standby's open: replays as `open` does but takes no lease, then follows the active's
   * commits (each sends `NOTIFY beidou_events`; the rows past the last position applied are
   * read in position order, which is commit order), so a takeover only reads what the last
   * moments added (`promote`). Appending is refused until then. A row the follower cannot
   * apply as the next of its task (tampering, or a history it does not match) stops the
   * following (`following().diverged`): the owner then takes over with a fresh `open`.
   */
  async follow(onEvent: (event: StoredEvent) => void, options: OpenOptions = {}): Promise<ReplayReport> {
    const client = await this.connect();
    this.client = client;
    try {
      const { rows } = await client.query<{ pos: string }>('SELECT coalesce(max(pos), 0) AS pos FROM events');
      const upTo = Number(rows[0]!.pos);
      const archived = options.archived?.size ? await matchingMarks(client, options.archived) : [];
      for (const taskId of archived) this.archived.add(taskId);
      const report = await this.replay(client, onEvent, archived.length > 0 ? await liveTasks(client, this.archived) : null, upTo);
      report.archived = archived;
      this.follower = { onEvent, position: upTo, events: 0, pulling: null, again: false, diverged: null };
      await this.listenForCommits(client);
      // What was committed between the replay's bound and the LISTEN told no one.
      this.pull().catch(() => undefined);
      return report;
    } catch (err) {
      this.client = null;
      this.follower = null;
      await client.end().catch(() => undefined);
      throw err;
    }
  }

  private async listenForCommits(client: pg.Client): Promise<void> {
    client.on('notification', (n) => {
      // A pull that fails (the connection lost) is retried at the owner's next `pull`.
      if (n.channel === 'beidou_events' && this.client === client) this.pull().catch(() => undefined);
    });
    await client.query('LISTEN beidou_events');
  }

  /** What a following log has applied (null once promoted, or if it never followed). */
  following(): { position: number; events: number; diverged: string | null } | null {
    const f = this.follower;
    return f ? { position: f.position, events: f.events, diverged: f.diverged } : null;
  }

  /**
   * Applies every row committed past the last position read; at most one pull at a time
   * (a notification during one runs another after it). Resolves when caught up with what
   * was committed when it last looked; a lost connection is replaced (and LISTENs again).
   */
  pull(): Promise<void> {
    const f = this.follower;
    if (!f || f.diverged || this.closed) return Promise.resolve();
    if (f.pulling) {
      f.again = true;
      return f.pulling;
    }
    f.pulling = (async () => {
      try {
        do {
          f.again = false;
          await this.pullOnce(f);
        } while (f.again && !f.diverged && !this.closed && this.follower === f);
      } finally {
        f.pulling = null;
      }
    })();
    return f.pulling;
  }

  private async pullOnce(f: Follower): Promise<void> {
    let client = this.client;
    if (!client) {
      client = await this.connect();
      if (this.closed || this.follower !== f) {
        await client.end().catch(() => undefined);
        return;
      }
      this.client = client;
      await this.listenForCommits(client);
    }
    for (;;) {
      // A connection gone silent (a NAT or firewall that forgot it: no FIN, no RST) would hold
      // this read, every later pull and so every takeover, until TCP gives up (many minutes):
      // past the bound it is ended, the read fails, and the next pull reads on a new one.
      const giveUp = setTimeout(() => {
        if (this.client === client) this.client = null;
        void client.end().catch(() => undefined);
      }, Math.max(PULL_BOUND_MS, this.leaseS * 2_000));
      let rows: Array<{ task_id: string; seq: number; body: string; pos: string }>;
      try {
        ({ rows } = await client.query<{ task_id: string; seq: number; body: string; pos: string }>(
          'SELECT task_id, seq, body::text AS body, pos FROM events WHERE pos > $1 ORDER BY pos LIMIT $2',
          [f.position, REPLAY_PAGE],
        ));
      } finally {
        clearTimeout(giveUp);
      }
      for (const row of rows) {
        if (this.archived.has(row.task_id)) {
          f.diverged = `an event (seq ${row.seq}) of task ${row.task_id}, which this replica holds as archived`;
          return;
        }
        const task = this.taskLog(row.task_id);
        if (!task.quarantined) {
          const problem = this.replayRow(task, row, f.onEvent);
          if (problem) {
            f.diverged = `task ${row.task_id}, seq ${row.seq}: ${problem}`;
            return;
          }
          f.events++;
        }
        f.position = Number(row.pos);
      }
      if (rows.length < REPLAY_PAGE) return;
    }
  }

  /**
   * A following log becomes the writer: takes the lease as `open` does (refused with
   * `DatabaseInUseError` while the active holds it, and the log keeps following), then reads
   * the rows committed before the takeover (nothing else can land now) and starts renewing.
   * Resolves with the events this last read applied. A follower that diverged refuses
   * (`FollowerDivergedError`) before taking anything.
   */
  async promote(): Promise<{ caughtUp: number; followed: number }> {
    const f = this.follower;
    if (!f) throw new Error('promote() is for a log opened with follow()');
    const before = f.events;
    // Most of what is new is read before the lease is taken (a refusal leaves the log following).
    await this.pull();
    if (f.diverged) throw new FollowerDivergedError(f.diverged);
    const client = (this.client ??= await this.connect());
    await this.leaseHeld(client, ''); // refused without a lock while the active holds the lease
    await this.acquire(client);
    try {
      await client.query('UNLISTEN beidou_events');
      await this.pull();
      if (f.diverged) throw new FollowerDivergedError(f.diverged);
    } catch (err) {
      // The lease was taken but the history could not be caught up: hand it on at once
      // (this replica or another takes over with a fresh replay).
      this.follower = null;
      await this.close().catch(() => undefined);
      throw err;
    }
    this.follower = null;
    this.renewTimer = setInterval(() => void this.renew(), (this.leaseS * 1000) / 3);
    this.renewTimer.unref();
    return { caughtUp: f.events - before, followed: before };
  }

  /**
   * A follower unloads a task the active archived (its index entry's mark matches what
   * this log holds), so a standby's memory stays bounded by live work too.
   */
  forget(taskId: string, mark: ArchiveMark): boolean {
    const task = this.tasks.get(taskId);
    if (!task || task.quarantined || task.lines.length !== mark.lastSeq || task.pending.length > 0) return false;
    this.tasks.delete(taskId);
    this.archived.add(taskId);
    return true;
  }

  append(drafts: readonly EventDraft[]): AppendResult {
    if (this.commits.failure) throw new EventLogFailedError(this.commits.failure);
    if (this.follower) throw new EventLogFailedError(new Error('this log follows the active replica and holds no lease: it cannot append'));
    const { heads, bodies, fields } = serialiseDrafts(drafts, (taskId) => {
      if (this.tasks.get(taskId)?.quarantined) throw new TaskQuarantinedError(taskId);
      if (this.archived.has(taskId)) throw new TaskArchivedError(taskId);
    });
    const ts = this.clock.now();
    const events: StoredEvent[] = [];
    const touched = new Set<TaskLog>();
    for (let i = 0; i < drafts.length; i++) {
      const draft = drafts[i]!;
      const task = this.taskLog(draft.task_id);
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

  /** One group commit: every pending row of the batch in one statement (GroupCommit runs one at a time). */
  private async write(batch: TaskLog[]): Promise<() => void> {
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
           -- Standbys following the log are told at commit (NOTIFY is sent only if it commits).
           SELECT (SELECT count(*)::int FROM stored) AS stored, pg_notify('beidou_events', $1::text) AS told`,
          [this.epoch, newTasks, newTaskTs, taskIds, seqs, tss, names, lines],
        );
        if (rows[0]!.stored !== lines.length) throw new WriterFencedError(this.epoch);
      }
    } catch (err) {
      // Memory is ahead of the store, and whether a commit cut short was stored is not
      // known: nothing of this batch is acknowledged, and nothing more will be (the throw).
      if (err instanceof WriterFencedError) void this.fenced(err);
      throw describeCommitFailure(err);
    }
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

  flush(): Promise<void> {
    return this.commits.flush();
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

/** A standby's log that stopped following (a row it could not apply): it cannot take over warm. */
export class FollowerDivergedError extends Error {
  constructor(readonly reason: string) {
    super(`this standby stopped following the log (${reason}); taking over needs a fresh replay`);
  }
}

interface Follower {
  onEvent: (event: StoredEvent) => void;
  /** The last position (`events.pos`) applied or skipped. */
  position: number;
  /** Events applied since the replay at `follow`. */
  events: number;
  pulling: Promise<void> | null;
  /** A notification came during a pull: pull again after it. */
  again: boolean;
  diverged: string | null;
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
