import type pg from 'pg';
import type { StoredEvent } from '../../events/catalogue.js';
import type { LiveMemory } from '../recent-window.js';
import type { WriterLease } from './lease.js';
import { replayRow, taskLog, type TaskLog } from './replay.js';

/** Rows read per query while following. */
const PULL_PAGE = 5_000;
/** The least time a follower's read of one page may take before its connection is taken for dead. */
const PULL_BOUND_MS = 5_000;

/** A committed row as a follower reads it: `pos` is its place in commit order. */
interface FollowedRow {
  task_id: string;
  seq: number;
  body: string;
  pos: string;
}

/** What a follower reaches of the log it keeps warm. */
export interface FollowedLog {
  /** The log's connection (a pull replaces it if it dropped), and the lease `promote` takes. */
  readonly lease: WriterLease;
  /** Whether `follower` is still the log's (it is not once promoted). */
  follows(follower: Follower): boolean;
  /** The follower became the writer, or could not: the log follows no more. */
  stopFollowing(): void;
  /** The log's memory, which a follower fills as a replay does (each task holding at most `memory` of its lines). */
  readonly tasks: Map<string, TaskLog>;
  readonly memory: LiveMemory;
  /** Ended tasks the log holds as archived: a row of one is a history this log does not match. */
  readonly archived: ReadonlySet<string>;
  close(): Promise<void>;
}

/**
 * A standby's following of the active's commits, after its log replayed without the lease
 * (the log's `follow`). Each commit sends `NOTIFY beidou_events`; the rows past the last
 * position applied are read in position order, which is commit order, so a takeover
 * (`promote`) only reads what the last moments added. A row it cannot apply as the next
 * of its task (tampering, or a history it does not match) stops the following
 * (`diverged`): the owner then takes over with a fresh `open`.
 */
export class Follower {
  /** Events applied since the replay at `follow`. */
  events = 0;
  diverged: string | null = null;
  private pulling: Promise<void> | null = null;
  /** A notification came during a pull: pull again after it. */
  private again = false;

  constructor(
    private readonly log: FollowedLog,
    private readonly onEvent: (event: StoredEvent) => void,
    /** The last position (`events.pos`) applied or skipped. */
    public position: number,
  ) {}

  /** Pulls at each commit the active announces on `client`. */
  async listenForCommits(client: pg.Client): Promise<void> {
    client.on('notification', (n) => {
      // A pull that fails (the connection lost) is retried at the owner's next `pull`.
      if (n.channel === 'beidou_events' && this.log.lease.client === client) this.pull().catch(() => undefined);
    });
    await client.query('LISTEN beidou_events');
  }

  following(): { position: number; events: number; diverged: string | null } {
    return { position: this.position, events: this.events, diverged: this.diverged };
  }

  /**
   * Applies every row committed past the last position read; at most one pull at a time
   * (a notification during one runs another after it). Resolves when caught up with what
   * was committed when it last looked; a lost connection is replaced (and LISTENs again).
   */
  pull(): Promise<void> {
    if (!this.log.follows(this) || this.diverged || this.log.lease.closed) return Promise.resolve();
    if (this.pulling) {
      this.again = true;
      return this.pulling;
    }
    this.pulling = (async () => {
      try {
        do {
          this.again = false;
          await this.pullOnce();
        } while (this.again && !this.diverged && !this.log.lease.closed && this.log.follows(this));
      } finally {
        this.pulling = null;
      }
    })();
    return this.pulling;
  }

  private async pullOnce(): Promise<void> {
    const { lease } = this.log;
    let client = lease.client;
    if (!client) {
      client = await lease.connect();
      if (lease.closed || !this.log.follows(this)) {
        await client.end().catch(() => undefined);
        return;
      }
      lease.client = client;
      await this.listenForCommits(client);
    }
    for (;;) {
      // A connection gone silent (a NAT or firewall that forgot it: no FIN, no RST) would hold
      // this read, every later pull and so every takeover, until TCP gives up (many minutes):
      // past the bound it is ended, the read fails, and the next pull reads on a new one.
      const giveUp = setTimeout(
        () => {
          if (lease.client === client) lease.client = null;
          void client.end().catch(() => undefined);
        },
        Math.max(PULL_BOUND_MS, lease.leaseS * 2_000),
      );
      let rows: FollowedRow[];
      try {
        ({ rows } = await client.query<FollowedRow>(
          'SELECT task_id, seq, body::text AS body, pos FROM events WHERE pos > $1 ORDER BY pos LIMIT $2',
          [this.position, PULL_PAGE],
        ));
      } finally {
        clearTimeout(giveUp);
      }
      for (const row of rows) {
        if (this.log.archived.has(row.task_id)) {
          this.diverged = `an event (seq ${row.seq}) of task ${row.task_id}, which this replica holds as archived`;
          return;
        }
        const task = taskLog(this.log.tasks, row.task_id, this.log.memory);
        if (!task.quarantined) {
          const problem = replayRow(task, row, this.onEvent);
          if (problem) {
            this.diverged = `task ${row.task_id}, seq ${row.seq}: ${problem}`;
            return;
          }
          this.events++;
        }
        this.position = Number(row.pos);
      }
      if (rows.length < PULL_PAGE) return;
    }
  }

  /**
   * The following log becomes the writer: takes the lease as `open` does (refused with
   * `DatabaseInUseError` while the active holds it, and the log keeps following), then reads
   * the rows committed before the takeover (nothing else can land now) and starts renewing.
   * Resolves with the events this last read applied. A follower that diverged refuses
   * (`FollowerDivergedError`) before taking anything.
   */
  async promote(): Promise<{ caughtUp: number; followed: number }> {
    const before = this.events;
    // Most of what is new is read before the lease is taken (a refusal leaves the log following).
    await this.pull();
    if (this.diverged) throw new FollowerDivergedError(this.diverged);
    const { lease } = this.log;
    const client = (lease.client ??= await lease.connect());
    await lease.leaseHeld(client, ''); // refused without a lock while the active holds the lease
    await lease.acquire(client);
    try {
      await client.query('UNLISTEN beidou_events');
      await this.pull();
      if (this.diverged) throw new FollowerDivergedError(this.diverged);
    } catch (err) {
      // The lease was taken but the history could not be caught up: hand it on at once
      // (this replica or another takes over with a fresh replay).
      this.log.stopFollowing();
      await this.log.close().catch(() => undefined);
      throw err;
    }
    this.log.stopFollowing();
    lease.startRenewing();
    return { caughtUp: this.events - before, followed: before };
  }
}

/** A standby's log that stopped following (a row it could not apply): it cannot take over warm. */
export class FollowerDivergedError extends Error {
  constructor(readonly reason: string) {
    super(`this standby stopped following the log (${reason}); taking over needs a fresh replay`);
  }
}
