import type { EventDraft, StoredEvent } from '../events/catalogue.js';
import {
  isFollowingLog,
  type ArchiveMark,
  type EventLog,
  type FollowingLog,
  type ReplayReport,
} from '../events/event-log.js';
import { ArchivedIds, removeTask, unloadRefusal, type ArchivedTask } from './archive.js';
import { extractTask, type QuarantinedTask } from './quarantine.js';
import { reduce } from './reducer.js';
import { emptyState, type AgentRecord, type RegistryState, type TaskRecord } from './state.js';

export type CommitObserver = (events: readonly StoredEvent[]) => void;

/**
 * What meters an agent's writes (the write budget, `runtime/write-budget.ts`): handed the
 * bytes a commit made for that agent adds to the log, before any of it is numbered; it
 * throws to refuse the commit, which then changes nothing.
 */
export interface WriteMeter {
  admit(writer: string, bytes: number): void;
  /** Counts the bytes against `writer` without ever refusing (what a spawner reports for its agent). */
  charge(writer: string, bytes: number): void;
}

export interface CommitOptions {
  /** The agent whose call this commit is: its bytes count against its write budget. Absent: the server's own. */
  writer?: string;
  /** Counted against the writer's budget but never refused by it (the caller decided already). */
  chargeOnly?: boolean;
}

/**
 * The registry: state as a reduction of the event log. A change is made only by
 * `commit(drafts)`: the log assigns each event its `seq`, the reducer applies it at once (so
 * the next decision, even in the same tick, sees it), and the returned promise settles when
 * the events are durable. Callers reply only after that, so nothing acknowledged is lost.
 */
export class Registry {
  readonly state: RegistryState = emptyState();
  /** Tasks whose log failed verification: kept out of `state`, shown, never written to. */
  readonly quarantined = new Map<string, QuarantinedTask>();
  /** Ended tasks unloaded from memory (docs/architecture.md, "History leaves memory"): their index entries. */
  readonly archived = new Map<string, ArchivedTask>();
  /** The agents and questions of archived tasks, to their task: a token or a route naming one is answered without a read. */
  readonly archivedAgents = new ArchivedIds(this.archived, (task) => task.agent_ids);
  readonly archivedQuestions = new ArchivedIds(this.archived, (task) => task.question_ids);
  /** Events the last `open` reduced (an archived task's are not among them). */
  replayedEvents = 0;
  private readonly observers = new Set<CommitObserver>();
  private readonly durableObservers = new Set<CommitObserver>();
  /** Meters the commits that name a writer; null: none is metered (a replay tool, a standby). */
  private meter: WriteMeter | null = null;

  constructor(readonly log: EventLog) {}

  /** From now on, commits that name a writer are metered by `meter` (an activation sets its own). */
  meterWrites(meter: WriteMeter | null): void {
    this.meter = meter;
  }

  /**
   * Rebuilds the state by reducing the logs in order; a task that fails verification is
   * quarantined. `index`: the archive index's entries; a task whose entry still matches the
   * log is not read, it stays archived (an entry that does not match is replayed).
   */
  async open(index: readonly ArchivedTask[] = []): Promise<ReplayReport> {
    return this.rebuild(index, (onEvent, options) => this.log.open(onEvent, options));
  }

  /**
   * A standby's open (docs/architecture.md, "Replicas"): the same rebuild, then the state
   * follows the active's commits (reduced as they are read; no observer sees them) until
   * `promote`.
   */
  async follow(index: readonly ArchivedTask[] = []): Promise<ReplayReport> {
    const log = this.followingLog();
    return this.rebuild(index, (onEvent, options) => log.follow(onEvent, options));
  }

  /** The follower takes over: the lease, then what was committed before it. */
  promote(): Promise<{ caughtUp: number; followed: number }> {
    return this.followingLog().promote();
  }

  /**
   * A follower unloads what the active archived: each entry whose task this state holds,
   * ended, with the log's history matching the entry's mark. Returns how many went.
   */
  absorbArchived(entries: readonly ArchivedTask[]): number {
    const log = this.followingLog();
    let gone = 0;
    for (const entry of entries) {
      if (this.archived.has(entry.task_id) || !this.state.tasks.get(entry.task_id)?.ended_at) continue;
      if (!log.forget(entry.task_id, entry.mark)) continue;
      removeTask(this.state, entry.task_id);
      this.addArchived(entry);
      gone++;
    }
    return gone;
  }

  private followingLog(): FollowingLog {
    if (!isFollowingLog(this.log))
      throw new Error("this registry's log cannot follow another writer (the PostgreSQL store can)");
    return this.log;
  }

  private async rebuild(
    index: readonly ArchivedTask[],
    opener: (
      onEvent: (event: StoredEvent) => void,
      options: { archived: Map<string, ArchiveMark> },
    ) => Promise<ReplayReport>,
  ): Promise<ReplayReport> {
    const marks = new Map<string, ArchiveMark>(index.map((e) => [e.task_id, e.mark]));
    let replaying = true; // a follower's later events are not the start's
    const report = await opener(
      (event) => {
        if (replaying) this.replayedEvents++;
        reduce(this.state, event);
      },
      { archived: marks },
    );
    replaying = false;
    const entries = new Map(index.map((e) => [e.task_id, e]));
    for (const taskId of report.archived) this.addArchived(entries.get(taskId)!);
    for (const { taskId, file, line, reason } of report.quarantined) {
      this.quarantined.set(taskId, {
        task_id: taskId,
        quarantine: { file, line, reason },
        state: extractTask(this.state, taskId),
      });
    }
    return report;
  }

  private addArchived(entry: ArchivedTask): void {
    this.archived.set(entry.task_id, entry);
    this.archivedAgents.added(entry);
    this.archivedQuestions.added(entry);
  }

  /** Why an ended task cannot leave memory now (see `unloadRefusal`), or null. */
  unloadRefusal(taskId: string): string | null {
    return unloadRefusal(this.state, taskId) ?? (this.log.isArchived(taskId) ? 'already archived' : null);
  }

  /**
   * Unloads an ended task: out of the state and out of the log's memory; its index entry
   * is returned for the store. Null (nothing changed) when it cannot go now: the caller
   * checks `unloadRefusal` first, and the log refuses while some of its events are not durable.
   */
  unload(taskId: string, now: number): ArchivedTask | null {
    if (this.unloadRefusal(taskId)) return null;
    const mark = this.log.unload(taskId);
    if (!mark) return null;
    const { task, agents, cost_usd } = removeTask(this.state, taskId);
    const entry: ArchivedTask = { task_id: taskId, mark, task, agents, cost_usd, archived_at: now };
    this.addArchived(entry);
    return entry;
  }

  /** An archived task read back from the store: its events replayed into a state of its own. */
  async loadArchived(taskId: string): Promise<RegistryState> {
    const scratch = emptyState();
    // Page by page: a page stops at its byte bound as well as its count.
    for (let since = 0; ; ) {
      const page = await this.log.readStored(taskId, since, 10_000);
      if (page.length === 0) return scratch;
      for (const event of page) reduce(scratch, event);
      since = page[page.length - 1]!.seq;
    }
  }

  /** The quarantined task an agent or a question belongs to, if any. */
  quarantineOf(kind: 'agents' | 'questions', id: string): QuarantinedTask | undefined {
    for (const q of this.quarantined.values()) if (q.state[kind].has(id)) return q;
    return undefined;
  }

  /**
   * Appends, reduces and tells observers; resolves with the events once they are durable.
   * A commit made for an agent's call names it (`writer`), and its meter may refuse it.
   */
  async commit(drafts: readonly EventDraft[], options: CommitOptions = {}): Promise<StoredEvent[]> {
    const { writer, chargeOnly } = options;
    const meter = this.meter;
    const admit =
      writer !== undefined && meter
        ? (bytes: number) => (chargeOnly ? meter.charge(writer, bytes) : meter.admit(writer, bytes))
        : undefined;
    const { events, durable } = this.log.append(drafts, admit);
    for (const event of events) reduce(this.state, event);
    for (const observer of this.observers) observer(events);
    await durable;
    for (const observer of this.durableObservers) observer(events);
    return events;
  }

  /**
   * Observers of durable events: whatever leaves the process because of an event (a
   * delivery to a spawner, a terminate command) must wait until the event is on disk.
   */
  observeDurable(observer: CommitObserver): () => void {
    this.durableObservers.add(observer);
    return () => this.durableObservers.delete(observer);
  }

  /** In-process observers see events as they are applied (before they are durable). */
  observe(observer: CommitObserver): () => void {
    this.observers.add(observer);
    return () => this.observers.delete(observer);
  }

  task(taskId: string): TaskRecord | undefined {
    return this.state.tasks.get(taskId);
  }

  agent(agentId: string): AgentRecord | undefined {
    return this.state.agents.get(agentId);
  }
}
