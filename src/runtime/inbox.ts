import { deliveredView, deliveryDrafts, type DeliveredMessage, type DeliveryPath } from '../domain/messages.js';
import type { StoredEvent } from '../events/catalogue.js';
import type { Registry } from '../registry/registry.js';
import type { AgentRecord, InboxMessage } from '../registry/state.js';

export type ArrivalListener = (agentId: string, message: InboxMessage) => void;

/**
 * The inboxes' runtime side: which messages are available to take, the readers blocked on
 * an empty inbox, and hand-over exactly once. An inbox is `sent − delivered` in the
 * registry; taking messages commits one `agent_input` each synchronously, so two readers
 * racing can never both get one. A message pushed to a spawner is reserved for it until
 * the spawner acknowledges it, so `read_inbox` and the hook skip it meanwhile.
 */
export class Inboxes {
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly arrivalListeners = new Set<ArrivalListener>();
  /** Per agent: messages handed to its spawner and not yet acknowledged (runtime only). */
  private readonly reserved = new Map<string, Set<string>>();

  constructor(private readonly registry: Registry) {}

  /** In-process observer: wakes blocked readers and tells arrival listeners of each new message. */
  onApplied(events: readonly StoredEvent[]): void {
    for (const e of events) {
      // Peer and user messages, and what the server routes (reports, questions, answers, pings).
      if (e.event !== 'send_message' && e.event !== 'inbox.posted') continue;
      const message = this.registry.agent(e.to)?.inbox.get(e.message_id);
      if (!message) continue;
      const set = this.waiters.get(e.to);
      if (set) {
        this.waiters.delete(e.to);
        for (const wake of set) wake();
      }
      for (const listener of this.arrivalListeners) listener(e.to, message);
    }
  }

  /** Wake-up nudges (MCP notifications) subscribe here. */
  onArrival(listener: ArrivalListener): () => void {
    this.arrivalListeners.add(listener);
    return () => this.arrivalListeners.delete(listener);
  }

  /** Messages a reader may take: everything waiting, minus what a spawner is delivering. */
  private available(agent: AgentRecord): InboxMessage[] {
    const reserved = this.reserved.get(agent.agent_id);
    const all = [...agent.inbox.values()];
    return reserved ? all.filter((m) => !reserved.has(m.message_id)) : all;
  }

  /** Reserves for the agent's spawner every available message, and returns them to push. */
  reserveForSpawner(agent: AgentRecord): InboxMessage[] {
    const messages = this.available(agent);
    if (messages.length === 0) return messages;
    let reserved = this.reserved.get(agent.agent_id);
    if (!reserved) this.reserved.set(agent.agent_id, (reserved = new Set()));
    for (const m of messages) reserved.add(m.message_id);
    return messages;
  }

  /** The spawner acknowledged one message (delivered), or is gone (all of them): others may take them. */
  release(agentId: string, messageId?: string): void {
    if (messageId === undefined) this.reserved.delete(agentId);
    else this.reserved.get(agentId)?.delete(messageId);
  }

  peek(agent: AgentRecord): DeliveredMessage[] {
    return this.available(agent).map((m) => deliveredView(this.registry.state, m));
  }

  /** Takes every available message, oldest first, marking each delivered (durable on resolve). */
  async take(agent: AgentRecord, via: DeliveryPath): Promise<DeliveredMessage[]> {
    const messages = this.available(agent);
    if (messages.length === 0) return [];
    await this.registry.commit(deliveryDrafts(agent, messages, via));
    return messages.map((m) => deliveredView(this.registry.state, m));
  }

  /** Resolves when a message arrives for the agent, the time is up, or the signal aborts. */
  wait(agentId: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      let set = this.waiters.get(agentId);
      if (!set) this.waiters.set(agentId, (set = new Set()));
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        set.delete(done);
        if (set.size === 0 && this.waiters.get(agentId) === set) this.waiters.delete(agentId);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      signal?.addEventListener('abort', done, { once: true });
      set.add(done);
    });
  }

  /** Wakes every waiter (on shutdown). */
  wakeAll(): void {
    for (const set of this.waiters.values()) for (const wake of [...set]) wake();
    this.waiters.clear();
  }
}
