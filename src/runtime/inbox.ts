import type { StoredEvent } from '../events/catalogue.js';
import type { Registry } from '../registry/registry.js';
import { USER, BEIDOU, type AgentRecord, type InboxMessage } from '../registry/state.js';

export type DeliveryPath = 'read_inbox' | 'spawner' | 'hook';

export interface DeliveredMessage {
  message_id: string;
  from: string;
  from_name: string;
  kind: InboxMessage['kind'];
  content: string;
  ts: number;
}

export type ArrivalListener = (agentId: string, message: InboxMessage) => void;

/**
 * Inbox runtime: wakes blocked readers when a message lands and hands messages over exactly
 * once. An inbox is `sent − delivered` in the registry; taking messages commits one
 * `agent_input` per message synchronously, so two readers racing can never both get one.
 */
export class Inboxes {
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly arrivalListeners = new Set<ArrivalListener>();
  /** Messages already handed to another delivery path (a spawner) that must not be taken again. */
  private reserved: (agentId: string, messageId: string) => boolean = () => false;

  constructor(private readonly registry: Registry) {
    registry.observe((events) => this.onCommitted(events));
  }

  private onCommitted(events: readonly StoredEvent[]): void {
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

  setReservation(isReserved: (agentId: string, messageId: string) => boolean): void {
    this.reserved = isReserved;
  }

  /** Messages a reader may take: everything waiting, minus what a spawner is delivering. */
  private available(agent: AgentRecord): InboxMessage[] {
    return [...agent.inbox.values()].filter((m) => !this.reserved(agent.agent_id, m.message_id));
  }

  /** Wake-up nudges (MCP notifications) subscribe here. */
  onArrival(listener: ArrivalListener): () => void {
    this.arrivalListeners.add(listener);
    return () => this.arrivalListeners.delete(listener);
  }

  displayName(id: string): string {
    if (id === USER || id === BEIDOU) return id;
    return this.registry.agent(id)?.name ?? id;
  }

  view(message: InboxMessage): DeliveredMessage {
    return {
      message_id: message.message_id,
      from: message.from,
      from_name: this.displayName(message.from),
      kind: message.kind,
      content: message.content,
      ts: message.ts,
    };
  }

  /** The text an agent sees for a message: `[from <name> (<agent_id>)] <content>`. */
  deliveredText(message: Pick<InboxMessage, 'from' | 'content'>): string {
    return `[from ${this.displayName(message.from)} (${message.from})] ${message.content}`;
  }

  peek(agent: AgentRecord): DeliveredMessage[] {
    return this.available(agent).map((m) => this.view(m));
  }

  /** Takes every waiting message, oldest first, marking each delivered (durable on resolve). */
  async take(agent: AgentRecord, via: DeliveryPath): Promise<DeliveredMessage[]> {
    const messages = this.available(agent);
    if (messages.length === 0) return [];
    await this.registry.commit(
      messages.map((m) => ({
        event: 'agent_input' as const,
        task_id: agent.task_id,
        caller_id: agent.agent_id,
        from: m.from,
        message_kind: m.kind === 'message' || m.kind === 'user' ? ('user' as const) : ('system' as const),
        source: 'queue' as const,
        content: m.content,
        message_id: m.message_id,
        via,
      })),
    );
    return messages.map((m) => this.view(m));
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
