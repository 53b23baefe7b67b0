import type { EventDraft, StoredEvent } from '../events/catalogue.js';
import type { EventLog, ReplayReport } from '../events/log.js';
import { extractTask, type QuarantinedTask } from './quarantine.js';
import { reduce } from './reducer.js';
import { emptyState, type AgentRecord, type RegistryState, type TaskRecord } from './state.js';

export type CommitObserver = (events: readonly StoredEvent[]) => void;

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
  private readonly observers = new Set<CommitObserver>();
  private readonly durableObservers = new Set<CommitObserver>();

  constructor(readonly log: EventLog) {}

  /** Rebuilds the whole state by reducing the logs in order; a task that fails verification is quarantined. */
  async open(): Promise<ReplayReport> {
    const report = await this.log.open((event) => reduce(this.state, event));
    for (const { taskId, file, line, reason } of report.quarantined) {
      this.quarantined.set(taskId, { task_id: taskId, quarantine: { file, line, reason }, state: extractTask(this.state, taskId) });
    }
    return report;
  }

  /** The quarantined task an agent or a question belongs to, if any. */
  quarantineOf(kind: 'agents' | 'questions', id: string): QuarantinedTask | undefined {
    for (const q of this.quarantined.values()) if (q.state[kind].has(id)) return q;
    return undefined;
  }

  /** Appends, reduces and tells observers; resolves with the events once they are durable. */
  async commit(drafts: readonly EventDraft[]): Promise<StoredEvent[]> {
    const { events, durable } = this.log.append(drafts);
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
