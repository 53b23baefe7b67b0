import os from 'node:os';
import type pg from 'pg';
import type { PreviousWriter } from '../../events/event-log.js';
import { connectClient, DatabaseInUseError, describeDatabaseUrl, LOG_APPLICATION } from './connect.js';

/**
 * The PostgreSQL log's connection and the writer lease recorded on it (`log_writer`): one
 * writer per database. `acquire` takes the lease row only if it is free (never held,
 * expired, or its holder's log connection gone), ends the old holder's log connection,
 * and bumps the epoch; a lease held by a live writer is refused (`DatabaseInUseError`: a
 * replica stays a standby). The holder renews the lease every third of its length; every
 * commit holds the row and inserts only if the epoch is still its own (the log's `write`),
 * and the primary key refuses a seq already taken. The expiry says only when a standby may
 * take over; the epoch is the fence. A takeover bumps it holding the row, so a commit in
 * flight lands first (and is in the taker's replay) and none of the old epoch lands after.
 * A holder that was merely late (a long commit ahead of its renewal, a paused event loop)
 * and that no one has taken over from keeps writing and renews.
 * An advisory lock would not do: a paused (SIGSTOPped) process keeps its connection and
 * its lock, where its lease runs out. If the connection drops while idle, the next use
 * reconnects and re-checks the fence (`reconnect`). Once the log is fenced (another writer
 * took the lease) or its lease has run out while the log is failed, `onLost` is called
 * once: the owner steps down and replays afresh if it takes the lease again.
 */
export class WriterLease {
  /** The log's connection (null until opened, or once it dropped): the one the lease row names its holder's. */
  client: pg.Client | null = null;
  /** The epoch this log writes under (0 before the lease is taken). */
  epoch = 0;
  /** The lease this log took over: who held it before, and their epoch. */
  previous: PreviousWriter | null = null;
  lost: LeaseLost | null = null;
  /** Set once the log is closed: nothing is renewed, reported or followed after. */
  closed = false;
  readonly holder: string;
  readonly leaseS: number;
  private readonly onLost: (lost: LeaseLost) => void;
  private renewTimer: NodeJS.Timeout | null = null;
  private renewing = false;
  /** When the last renewal (or the takeover) that succeeded was asked for (`performance.now()`, a duration base). */
  private confirmedAt = 0;

  constructor(
    private readonly url: string,
    options: LeaseOptions,
    /** The log's group commit: a failed log renews nothing, and a fenced one fails. */
    private readonly commits: { readonly failure: Error | null; fail(err: Error): void },
  ) {
    this.holder = options.holder ?? defaultHolder();
    this.leaseS = options.leaseS ?? 3;
    this.onLost = options.onLost ?? (() => undefined);
  }

  /** A new log connection; it stops being `client` when it drops. */
  async connect(): Promise<pg.Client> {
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
  async reconnect(): Promise<pg.Client> {
    const client = await this.connect();
    const { rowCount } = await client.query('UPDATE log_writer SET holder_pid = pg_backend_pid() WHERE epoch = $1', [
      this.epoch,
    ]);
    if (rowCount === 0) {
      await client.end().catch(() => undefined);
      throw new WriterFencedError(this.epoch);
    }
    return client;
  }

  /**
   * Takes the lease if it is free, in one transaction holding the row (a commit of the
   * old holder in flight finishes first, and is in the replay that follows), then ends the
   * old holder's log connection if it is still there (a paused process keeps it open).
   */
  async acquire(client: pg.Client): Promise<void> {
    const asked = performance.now();
    await client.query('BEGIN');
    try {
      // A replica paused inside this transaction would hold the lease row from every other:
      // PostgreSQL ends its session once it idles in it for a lease.
      await client.query(
        `SET LOCAL idle_in_transaction_session_timeout = ${Math.max(1000, Math.round(this.leaseS * 1000))}`,
      );
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
        await client
          .query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2', [
            old.holder_pid,
            LOG_APPLICATION,
          ])
          .catch(() => undefined);
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
  async leaseHeld(client: pg.Client, lock: 'FOR UPDATE' | '') {
    const { rows } = await client.query<{
      epoch: string;
      holder: string | null;
      holder_pid: number | null;
      expired: boolean;
      until: Date | null;
    }>(
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

  /** Renews the lease every third of its length, from now on. */
  startRenewing(): void {
    this.renewTimer = setInterval(() => void this.renew(), (this.leaseS * 1000) / 3);
    this.renewTimer.unref();
  }

  stopRenewing(): void {
    if (this.renewTimer) clearInterval(this.renewTimer);
  }

  /**
   * Whether this writer has confirmed its lease within its length (a renewal asked for less
   * than `BEIDOU_LEASE_S` ago succeeded); if not, asks for a renewal at once (see the log's
   * `leaseConfirmed`).
   */
  confirmed(): boolean {
    if (this.epoch === 0 || this.lost) return false;
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
      const { rowCount } = await client.query(
        'UPDATE log_writer SET expires_at = now() + make_interval(secs => $2) WHERE epoch = $1',
        [this.epoch, this.leaseS],
      );
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
      const { rows } = await client.query<{ epoch: string; holder: string | null; valid: boolean }>(
        'SELECT epoch, holder, coalesce(expires_at > now(), false) AS valid FROM log_writer',
      );
      const r = rows[0]!;
      return { epoch: Number(r.epoch), holder: r.holder, valid: r.valid };
    } catch {
      return null;
    } finally {
      await client?.end().catch(() => undefined);
    }
  }

  /** Another writer took the lease: the log fails, and the owner is told who took it. */
  async fenced(err: WriterFencedError): Promise<void> {
    this.commits.fail(err);
    const now = await this.leaseRow();
    this.lose(now, err.message);
  }

  private lose(now: { epoch: number; holder: string | null } | null, reason: string): void {
    if (this.lost || this.closed) return;
    this.lost = {
      epoch: this.epoch,
      newEpoch: now && now.epoch !== this.epoch ? now.epoch : null,
      holder: now && now.epoch !== this.epoch ? now.holder : null,
      reason,
    };
    this.stopRenewing();
    this.onLost(this.lost);
  }

  /** At the log's close: hands the lease on (if still this log's) and ends the connection. */
  async release(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = null;
    // A clean stop hands the lease on at once: a standby listening takes over without
    // waiting for it to run out. Only a lease still this log's is released.
    if (client && this.epoch > 0 && !this.lost) {
      await client
        .query(
          "UPDATE log_writer SET expires_at = now() WHERE epoch = $1 AND expires_at > now() RETURNING pg_notify('beidou_lease', 'released')",
          [this.epoch],
        )
        .catch(() => undefined);
    }
    await client?.end().catch(() => undefined);
  }
}

/** Another server opened the database after this one: its commits are refused. */
export class WriterFencedError extends Error {
  constructor(readonly epoch: number) {
    super(
      `another beidou server opened the database after this one (writer epoch ${epoch} is no longer current); this server's commit was refused`,
    );
  }
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
  const { rows } = await client.query<{ addr: string | null; since: Date }>(
    'SELECT host(client_addr) AS addr, backend_start AS since FROM pg_stat_activity WHERE pid = $1',
    [pid],
  );
  return rows[0] ?? null;
}
