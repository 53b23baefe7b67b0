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

export interface EventLog {
  /** Replays every stored event, task by task in sequence order, then opens for appends. */
  open(onEvent: (event: StoredEvent) => void): Promise<void>;
  /** Assigns `seq` (per task, gapless from 1) and `ts`, and queues the events for writing. */
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
