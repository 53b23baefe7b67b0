import { deliveredText, deliveryDrafts, displayName } from '../../domain/messages.js';
import { ownAgent } from '../../domain/spawners.js';
import type { EventDraft } from '../../events/catalogue.js';
import type { Registry } from '../../registry/registry.js';
import type { AgentRecord } from '../../registry/state.js';
import type { Inboxes } from '../inbox.js';
import type { SpawnerConnections } from './connections.js';

/**
 * Messages and terminations on their way to the spawner running an agent. A message pushed
 * is reserved in the inbox until the spawner acknowledges it; the acknowledgement commits
 * the `agent_input` that delivers it (exactly once: a repeated ack finds it gone).
 */
export class Deliveries {
  constructor(
    private readonly registry: Registry,
    private readonly inboxes: Inboxes,
    private readonly connections: SpawnerConnections,
  ) {}

  /** Pushes every waiting message of a running agent that is not already in flight. */
  push(agent: AgentRecord): void {
    if (!agent.running || agent.terminate_posted) return;
    const conn = this.connections.get(agent.spawner_id);
    if (!conn) return;
    const { state } = this.registry;
    for (const message of this.inboxes.reserveForSpawner(agent)) {
      conn.send({
        type: 'deliver',
        agent_id: agent.agent_id,
        message_id: message.message_id,
        from: message.from,
        from_name: displayName(state, message.from),
        kind: message.kind,
        content: deliveredText(state, message),
        ...(message.redelivered ? { redelivered: true as const } : {}),
      });
    }
  }

  terminate(agent: AgentRecord): void {
    this.connections.get(agent.spawner_id)?.send({ type: 'terminate', agent_id: agent.agent_id });
  }

  /** The spawner wrote the message into its agent: the delivery happened. */
  async acknowledge(spawnerId: string, agentId: string, messageId: string, mark: EventDraft[] = []): Promise<void> {
    const agent = ownAgent(this.registry.state, spawnerId, agentId);
    const message = agent.inbox.get(messageId);
    this.inboxes.release(agentId, messageId);
    if (!message) return; // already delivered (a repeated ack after a reconnect)
    await this.registry.commit([...deliveryDrafts(agent, [message], 'spawner'), ...mark]);
  }
}
