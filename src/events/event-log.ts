import type { EventDraft, StoredEvent } from './catalogue.js';

/**
 * The event log: append-only, one sequence per task, authoritative. The registry is a
 * reduction of it. This interface is all the rest of the server knows, so a replicated log
 * (NATS JetStream, PostgreSQL) can take the place of the embedded JSONL files.
 */
export interface AppendResult {
  /** The events with their `seq` and `ts`, assigned synchronously and in order. */
  events: StoredEvent[];
  /** Settles once the events are durable (group commit: concurrent appends share a sync). */
  durable: Promise<void>;
}

export type EventListener = (events: readonly StoredEvent[]) => void;

/** Why a task file is not trusted: the file, its 1-based line, and the reason. */
export interface Quarantine {
  file: string;
  line: number;
  reason: string;
}

/** What a replay found and did besides replaying. */
export interface ReplayReport {
  /** Tails cut at start: a torn last line, or a trailing commit with lines missing. */
  cut: Array<{
    taskId: string;
    file: string;
    torn: boolean;
    incomplete: { firstSeq: number; lastSeq: number; of: number } | null;
  }>;
  /** Task files that failed verification: only their events before the fault were replayed. */
  quarantined: Array<{ taskId: string } & Quarantine>;
  /** Ended tasks whose archive mark matched the store: not read, not replayed (`readStored` reads them). */
  archived: string[];
}

/**
 * What the archive index remembers of an ended task's stored events, so a start can check
 * it against the store without reading them: the last seq, and for a file its size. A mark
 * that does not match (the file grew, was cut or replaced) is not trusted: the task is replayed.
 */
export interface ArchiveMark {
  lastSeq: number;
  /** The file's size in bytes (JSONL); null where the store has no file (PostgreSQL). */
  bytes: number | null;
}

export interface OpenOptions {
  /** Ended tasks the archive index holds: skipped when their mark matches the store. */
  archived?: ReadonlyMap<string, ArchiveMark>;
}

/** Who held the writer lease before a log took it over, and under which epoch. */
export interface PreviousWriter {
  holder: string | null;
  epoch: number;
  /** Whether its lease had run out (else its connection was gone). */
  expired: boolean;
}

export interface EventLog {
  /**
   * Replays every stored event, task by task in sequence order, then opens for appends. A
   * task file that fails verification does not stop it: the task is reported quarantined
   * and refuses appends.
   */
  open(onEvent: (event: StoredEvent) => void, options?: OpenOptions): Promise<ReplayReport>;
  /**
   * Assigns `seq` (per task, gapless from 1) and `ts`, and queues the events for writing.
   * All or nothing: every event is serialised first, so a batch that cannot be stored
   * (`UnstorableEventError`) or names a quarantined task (`TaskQuarantinedError`) changes
   * nothing. `admit`, when given, is handed the bytes the batch's lines take once all are
   * serialised and before any is numbered: it may throw to refuse the batch (an agent's
   * write budget), which then changes nothing either.
   */
  append(drafts: readonly EventDraft[], admit?: (bytes: number) => void): AppendResult;
  /**
   * Durable events of one task with `seq > since`, at most `limit`, read synchronously:
   * `since` may not be below `readFloor(taskId)` (older events: `readStored`).
   */
  read(taskId: string, since: number, limit: number): StoredEvent[];
  /**
   * The lowest `since` that `read` serves. A live task's newest events are held in memory
   * (at most BEIDOU_LIVE_EVENTS_IN_MEMORY of them, and BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY);
   * the JSONL log reads any line of its file synchronously (0), PostgreSQL only what it holds.
   */
  readFloor(taskId: string): number;
  /** What of a task's events the log holds in memory: how many (JSONL: line offsets), and the bytes of their text (JSONL: none). */
  inMemory(taskId: string): { events: number; bytes: number };
  /** The highest durable `seq` of a task (0 when none). */
  durableSeq(taskId: string): number;
  /** Called with each batch of a task's events once it is durable. */
  subscribe(taskId: string, listener: EventListener): () => void;
  /**
   * Drops the in-memory copy of an ended task's events (the registry archived it): later
   * appends to it are refused (`TaskArchivedError`), `read` gives nothing, `readStored`
   * reads the store. Returns its mark for the archive index, or null (and keeps it) while
   * some of its events are not durable yet.
   */
  unload(taskId: string): ArchiveMark | null;
  /** Whether the task was unloaded (or skipped at open as archived). */
  isArchived(taskId: string): boolean;
  /**
   * Durable events of one task with `seq > since`, at most `limit` (possibly fewer: page on
   * with the last seq), from memory where the log holds them and from the store where it
   * does not (an archived task, or a live one's events below `readFloor`).
   */
  readStored(taskId: string, since: number, limit: number): Promise<StoredEvent[]>;
  /** Waits until everything appended so far is durable. */
  flush(): Promise<void>;
  close(): Promise<void>;
  /**
   * The epoch this log writes under: a lease's fence, bumped at every takeover (PostgreSQL;
   * 0 before `open`). Null for a log that holds no lease (the embedded files).
   */
  readonly writerEpoch: number | null;
  /** Who held the lease before this log took it (PostgreSQL, after `open`); null before, and for a log that holds no lease. */
  readonly previous: PreviousWriter | null;
}

/**
 * A log a standby can keep warm (the PostgreSQL one): it replays without the lease, follows
 * the writer's commits, and takes over with only the last moments left to read.
 */
export interface FollowingLog extends EventLog {
  follow(onEvent: (event: StoredEvent) => void, options?: OpenOptions): Promise<ReplayReport>;
  /** Applies what was committed since the last read. */
  pull(): Promise<void>;
  /** Takes the lease and catches up; refuses (and keeps following) while another holds it. */
  promote(): Promise<{ caughtUp: number; followed: number }>;
  /** Unloads a task another writer archived, if its mark matches what this log holds. */
  forget(taskId: string, mark: ArchiveMark): boolean;
  following(): { position: number; events: number; diverged: string | null } | null;
  /** Whether the lease was confirmed within its length (false asks for a renewal at once). */
  leaseConfirmed(): boolean;
}

export function isFollowingLog(log: EventLog): log is FollowingLog {
  return typeof (log as Partial<FollowingLog>).follow === 'function';
}

export class EventLogFailedError extends Error {
  constructor(cause: unknown) {
    super(`event log is unavailable after a write failure: ${(cause as Error)?.message ?? String(cause)}`);
  }
}

/** An event of a batch cannot be serialised (a value nested too deep, for one). */
export class UnstorableEventError extends Error {
  readonly reason: string;
  constructor(
    /** Its index in the batch handed to `append`. */
    readonly index: number,
    cause: unknown,
  ) {
    const reason = (cause as Error)?.message ?? String(cause);
    super(`event ${index} cannot be stored: ${reason}`);
    this.reason = reason;
  }
}

export class TaskQuarantinedError extends Error {
  constructor(readonly taskId: string) {
    super(`task ${taskId} is quarantined: its event log failed verification (see \`beidou doctor\`)`);
  }
}

/** An append names a task that ended and was archived: its history is closed. */
export class TaskArchivedError extends Error {
  constructor(readonly taskId: string) {
    super(`task ${taskId} has ended and is archived: nothing more can be written to it`);
  }
}
