import { SYSTEM_LOG, type EventDraft } from '../events/catalogue.js';
import { revocationCutoff } from '../identity/revocation.js';
import type { AgentRecord, RegistryState } from '../registry/state.js';

/**
 * Revoking tokens (docs/security.md, "Revocation"): what the admin's revocations commit, and
 * which launches a spawner limited to some tasks may take. The refusal itself is the
 * Authenticator's (server/http/auth.ts), against what these events reduce into the state.
 */

/**
 * Every token of `agent` minted until `now` is refused. A spawner holding it is told to stop
 * its process (which holds such a token) and the agent is queued for a launch with a fresh
 * one; an agent being terminated keeps its spawner, which ends it as it would have.
 */
type Draft<N extends EventDraft['event']> = Extract<EventDraft, { event: N }>;

export function agentTokensRevoked(agent: AgentRecord, now: number): Draft<'agent.tokens_revoked'> {
  const held = agent.spawner_id !== null && !agent.terminate_posted;
  return {
    event: 'agent.tokens_revoked',
    task_id: agent.task_id,
    agent_id: agent.agent_id,
    before: revocationCutoff(now, agent.tokens_revoked_before),
    spawner_id: held ? agent.spawner_id : null,
  };
}

/** Every spawner token minted until `now` is refused (the system log: spawner tokens belong to no task). */
export function spawnerTokensRevoked(state: RegistryState, now: number): Draft<'spawner_tokens.revoked'> {
  return {
    event: 'spawner_tokens.revoked',
    task_id: SYSTEM_LOG,
    before: revocationCutoff(now, state.spawner_tokens_revoked_before),
  };
}

/** Whether a spawner whose token is limited to `taskIds` (null: not limited) may run an agent of `taskId`. */
export function spawnerTakes(taskIds: readonly string[] | null, taskId: string): boolean {
  return taskIds === null || taskIds.includes(taskId);
}
