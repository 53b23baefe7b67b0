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
  cut: Array<{ taskId: string; file: string; torn: boolean; incomplete: { firstSeq: number; lastSeq: number; of: number } | null }>;
  /** Task files that failed verification: only their events before the fault were replayed. */
  quarantined: Array<{ taskId: string } & Quarantine>;
}

export interface EventLog {
  /**
   * Replays every stored event, task by task in sequence order, then opens for appends. A
   * task file that fails verification does not stop it: the task is reported quarantined
   * and refuses appends.
   */
  open(onEvent: (event: StoredEvent) => void): Promise<ReplayReport>;
  /**
   * Assigns `seq` (per task, gapless from 1) and `ts`, and queues the events for writing.
   * All or nothing: every event is serialised first, so a batch that cannot be stored
   * (`UnstorableEventError`) or names a quarantined task (`TaskQuarantinedError`) changes
   * nothing.
   */
  append(drafts: readonly EventDraft[]): AppendResult;
  /** Durable events of one task with `seq > since`, at most `limit`. */
  read(taskId: string, since: number, limit: number): StoredEvent[];
  /** The highest durable `seq` of a task (0 when none). */
  durableSeq(taskId: string): number;
  /** Called with each batch of a task's events once it is durable. */
  subscribe(taskId: string, listener: EventListener): () => void;
  /** Waits until everything appended so far is durable. */
  flush(): Promise<void>;
  close(): Promise<void>;
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
