import {
  deliveredView,
  deliveringDraft,
  deliveryDrafts,
  type DeliveredMessage,
  type DeliveryPath,
} from '../domain/messages.js';
import type { StoredEvent } from '../events/catalogue.js';
import type { Registry } from '../registry/registry.js';
import type { AgentRecord, InboxMessage } from '../registry/state.js';

export type ArrivalListener = (agentId: string, message: InboxMessage) => void;

/** Who holds a reservation: the agent's spawner, or one reply in flight. */
type Holder = 'spawner' | symbol;

/**
 * The inboxes' runtime side: which messages are available to take, the readers blocked on
 * an empty inbox, and hand-over. An inbox is `sent − delivered` in the registry. A message
 * on its way out is reserved until its delivery ends, so nobody else is handed it
 * meanwhile: pushed to a spawner, until the spawner acknowledges it; in a `read_inbox` or
 * hook reply, until the reply is flushed (then `agent_input` takes it out) or the
 * connection closes first (then it stays, marked `redelivered`).
 */
export class Inboxes {
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly arrivalListeners = new Set<ArrivalListener>();
  /** Per agent: message id → who is delivering it (runtime only). */
  private readonly reserved = new Map<string, Map<string, Holder>>();

  constructor(private readonly registry: Registry) {}

  /** In-process observer: wakes blocked readers and tells arrival listeners of each new message. */
  onApplied(events: readonly StoredEvent[]): void {
    for (const e of events) {
      // Peer and user messages, and what the server routes (reports, questions, answers, pings).
      if (e.event !== 'send_message' && e.event !== 'inbox.posted') continue;
      const message = this.registry.agent(e.to)?.inbox.get(e.message_id);
      if (!message) continue;
      this.wake(e.to);
      for (const listener of this.arrivalListeners) listener(e.to, message);
    }
  }

  /** Wake-up nudges (MCP notifications) subscribe here. */
  onArrival(listener: ArrivalListener): () => void {
    this.arrivalListeners.add(listener);
    return () => this.arrivalListeners.delete(listener);
  }

  /** Messages a reader may take: everything waiting, minus what is being delivered. */
  private available(agent: AgentRecord): InboxMessage[] {
    const reserved = this.reserved.get(agent.agent_id);
    const all = [...agent.inbox.values()];
    return reserved ? all.filter((m) => !reserved.has(m.message_id)) : all;
  }

  private reserve(agentId: string, messages: readonly InboxMessage[], holder: Holder): void {
    if (messages.length === 0) return;
    let reserved = this.reserved.get(agentId);
    if (!reserved) this.reserved.set(agentId, (reserved = new Map()));
    for (const m of messages) reserved.set(m.message_id, holder);
  }

  private unreserve(agentId: string, holder: Holder, messageId?: string): void {
    const reserved = this.reserved.get(agentId);
    if (!reserved) return;
    if (messageId !== undefined) {
      if (reserved.get(messageId) === holder) reserved.delete(messageId);
    } else {
      for (const [id, h] of reserved) if (h === holder) reserved.delete(id);
    }
    if (reserved.size === 0) this.reserved.delete(agentId);
  }

  /** Reserves for the agent's spawner every available message, and returns them to push. */
  reserveForSpawner(agent: AgentRecord): InboxMessage[] {
    const messages = this.available(agent);
    this.reserve(agent.agent_id, messages, 'spawner');
    return messages;
  }

  /** The spawner acknowledged one message (delivered), or is gone (all of them): others may take them. */
  release(agentId: string, messageId?: string): void {
    this.unreserve(agentId, 'spawner', messageId);
  }

  peek(agent: AgentRecord): DeliveredMessage[] {
    return this.available(agent).map((m) => deliveredView(this.registry.state, m));
  }

  /**
   * Takes every available message, oldest first, for a reply: commits `delivering`
   * (durable on resolve) and returns them as the agent sees them. When `flushed()` (asked
   * once the messages are in hand) settles true, `agent_input` takes them out of the
   * inbox; false, they stay (marked `redelivered`) and are free again.
   */
  async deliver(
    agent: AgentRecord,
    via: Exclude<DeliveryPath, 'spawner'>,
    flushed: () => Promise<boolean>,
  ): Promise<DeliveredMessage[]> {
    const messages = this.available(agent);
    if (messages.length === 0) return [];
    const holder = Symbol(via);
    this.reserve(agent.agent_id, messages, holder);
    const views = messages.map((m) => deliveredView(this.registry.state, m));
    try {
      await this.registry.commit([deliveringDraft(agent, messages, via)]);
    } catch (err) {
      this.unreserve(agent.agent_id, holder);
      throw err;
    }
    void flushed().then(
      (ok) => this.endDelivery(agent.agent_id, holder, messages, via, ok),
      () => this.endDelivery(agent.agent_id, holder, messages, via, false),
    );
    return views;
  }

  private endDelivery(
    agentId: string,
    holder: symbol,
    messages: readonly InboxMessage[],
    via: DeliveryPath,
    flushed: boolean,
  ): void {
    const agent = this.registry.agent(agentId);
    if (flushed && agent) {
      const still = messages.filter((m) => agent.inbox.has(m.message_id));
      // Applied at once (nobody else can take them meanwhile); the reply has gone, so
      // nothing waits on the fsync: a crash before it redelivers, marked.
      if (still.length > 0) void this.registry.commit(deliveryDrafts(agent, still, via)).catch(() => undefined);
    }
    this.unreserve(agentId, holder);
    if (!flushed) this.wake(agentId); // they are free again: a blocked reader may take them
  }

  private wake(agentId: string): void {
    const set = this.waiters.get(agentId);
    if (!set) return;
    this.waiters.delete(agentId);
    for (const wake of set) wake();
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

  /** Whether a blocked reader waits on the agent's inbox or a delivery holds some of its messages. */
  holds(agentId: string): boolean {
    return this.waiters.has(agentId) || this.reserved.has(agentId);
  }

  /** Wakes every waiter (on shutdown). */
  wakeAll(): void {
    for (const set of this.waiters.values()) for (const wake of [...set]) wake();
    this.waiters.clear();
  }
}
