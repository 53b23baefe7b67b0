import type { EventDraft } from '../events/catalogue.js';
import { cascadeOrder } from '../registry/queries.js';
import type { AgentRecord, RegistryState } from '../registry/state.js';

/**
 * Terminating agents: the sentinels for an agent and the teams it leads, and the task's end
 * when it is the root (what an end does to a plan task is in plans.ts). Returns event drafts
 * for the caller to commit.
 */

export type TerminateReason = 'admin' | 'leader' | 'leader_force' | 'root_approved';

/**
 * Sentinels for `target` and, depth-first, every agent in the teams it leads (deepest
 * first, `target` last). An agent no spawner runs consumes its sentinel at once (its token
 * stops working). Terminating the root ends the task.
 */
export function terminationDrafts(
  state: RegistryState,
  callerId: string,
  target: AgentRecord,
  reason: TerminateReason,
): EventDraft[] {
  const drafts: EventDraft[] = [];
  for (const agent of cascadeOrder(state, target)) {
    if (!agent.terminate_posted) {
      drafts.push({
        event: 'terminate.posted',
        task_id: agent.task_id,
        caller_id: callerId,
        agent_id: agent.agent_id,
        reason: agent === target ? reason : 'cascade',
      });
    }
    // A spawner ends its agent's process and then acknowledges; an agent no spawner holds
    // consumes its sentinel at once (its token stops working).
    if (!agent.spawner_id)
      drafts.push({ event: 'terminate.consumed', task_id: agent.task_id, agent_id: agent.agent_id, via: 'server' });
  }
  const task = state.tasks.get(target.task_id);
  if (task && task.root_agent_id === target.agent_id && task.status === 'running') {
    drafts.push({
      event: 'task_ended',
      task_id: task.task_id,
      status: reason === 'root_approved' ? 'done' : 'terminated',
      reason,
    });
  }
  return drafts;
}
