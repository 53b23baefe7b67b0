import { SYSTEM_LOG, type EventDraft } from '../events/catalogue.js';
import { currentGeneration } from '../identity/revocation.js';
import type { AgentRecord, RegistryState } from '../registry/state.js';

/**
 * Revoking tokens (docs/security.md, "Revocation"): what the admin's revocations commit,
 * whether a token is still good, and which launches a spawner limited to some tasks may take.
 * The refusal is the Authenticator's (server/http/auth.ts) at the door and again once a body
 * is read, and the runtime's where a token's holder is registered or handed something (a
 * session, a spawner stream, a launch), against what these events reduce into the state.
 */

type Draft<N extends EventDraft['event']> = Extract<EventDraft, { event: N }>;

/**
 * Every token of `agent` minted until now is refused. A spawner holding it is told to stop
 * its process (which holds such a token) and the agent is queued for a launch with a fresh
 * one; an agent being terminated keeps its spawner, which ends it as it would have.
 */
export function agentTokensRevoked(agent: AgentRecord, now: number): Draft<'agent.tokens_revoked'> {
  const held = agent.spawner_id !== null && !agent.terminate_posted;
  return {
    event: 'agent.tokens_revoked',
    task_id: agent.task_id,
    agent_id: agent.agent_id,
    before: now,
    spawner_id: held ? agent.spawner_id : null,
  };
}

/** Every spawner token minted until now is refused (the system log: spawner tokens belong to no task). */
export function spawnerTokensRevoked(now: number): Draft<'spawner_tokens.revoked'> {
  return { event: 'spawner_tokens.revoked', task_id: SYSTEM_LOG, before: now };
}

/**
 * The agents spawners hold now (running them, or about to), each with its spawner, by task:
 * task id → agent id → spawner id.
 */
export function spawnerHeldAgents(state: RegistryState): Map<string, Map<string, string>> {
  const held = new Map<string, Map<string, string>>();
  for (const a of state.agents.values()) {
    if (a.spawner_id === null || a.terminate_consumed) continue;
    const inTask = held.get(a.task_id) ?? new Map<string, string>();
    inTask.set(a.agent_id, a.spawner_id);
    held.set(a.task_id, inTask);
  }
  return held;
}

/**
 * With every spawner token revoked, the agent tokens those spawners were handed go too: a
 * revocation for each agent of one task's `held` (from spawnerHeldAgents, taken as the spawner
 * tokens were revoked) that the same spawner still holds, to commit together. They are
 * launched again with fresh tokens, by a spawner with a new token.
 */
export function heldAgentsRevoked(
  state: RegistryState,
  held: ReadonlyMap<string, string>,
  now: number,
): Draft<'agent.tokens_revoked'>[] {
  const drafts: Draft<'agent.tokens_revoked'>[] = [];
  for (const [agentId, spawnerId] of held) {
    const agent = state.agents.get(agentId);
    if (agent && agent.spawner_id === spawnerId && !agent.terminate_consumed)
      drafts.push(agentTokensRevoked(agent, now));
  }
  return drafts;
}

export type AgentTokenStanding = 'current' | 'unknown_agent' | 'agent_terminated' | 'token_revoked';

/** Whether a token of `agent` (absent: none by that id in the token's task) of generation `gen` works now. */
export function agentTokenStanding(agent: AgentRecord | undefined, gen: number): AgentTokenStanding {
  if (!agent) return 'unknown_agent';
  if (agent.terminate_consumed) return 'agent_terminated';
  return currentGeneration(gen, agent.tokens_gen) ? 'current' : 'token_revoked';
}

export type SpawnerTokenStanding = 'current' | 'token_revoked' | 'system_log_quarantined';

/**
 * Whether a spawner token of generation `gen` works now. While the system log (which holds
 * their revocations) is quarantined, none does: its generation is not known, so fail closed.
 */
export function spawnerTokenStanding(
  state: RegistryState,
  gen: number,
  systemLogQuarantined: boolean,
): SpawnerTokenStanding {
  if (systemLogQuarantined) return 'system_log_quarantined';
  return currentGeneration(gen, state.spawner_tokens_gen) ? 'current' : 'token_revoked';
}

/** Whether a spawner whose token is limited to `taskIds` (null: not limited) may run an agent of `taskId`. */
export function spawnerTakes(taskIds: readonly string[] | null, taskId: string): boolean {
  return taskIds === null || taskIds.includes(taskId);
}

/** The spawner token (its `sub`) a spawner id `SUB.INSTANCE` belongs to: its instances share the token's bound. */
export function spawnerTokenOf(spawnerId: string): string {
  const dot = spawnerId.indexOf('.');
  return dot === -1 ? spawnerId : spawnerId.slice(0, dot);
}
