import {
  USER,
  type RegistryState,
  type AgentRecord,
  type AgentStatus,
  type QuestionOrigin,
  type QuestionRecord,
  type TeamRecord,
} from './state.js';

/** Read-only views over the state. Nothing here changes it. */

export function agentStatus(agent: AgentRecord): AgentStatus {
  if (agent.terminate_consumed) return 'terminated';
  if (agent.terminate_posted) return 'terminating';
  if (agent.review) return 'review_pending';
  if (agent.termination_request) return 'termination_requested';
  // A reported failure stands until a message or a new process clears it (docs/spawner-protocol.md).
  if (agent.error) return 'error';
  if (agent.running || !agent.launch) return 'active';
  if (agent.parked) return 'stopped';
  if (agent.spawner_id) return 'launching';
  // Queued: never started yet, or started before and now waiting for a spawner to resume it.
  return agent.started ? 'waiting_for_spawner' : 'pending_launch';
}

export type PeerScope = 'team' | 'children' | 'all';

export interface PeerView {
  agent_id: string;
  role: string | null;
  team_id: string | null;
  status: AgentStatus;
  is_leader_of: string[];
  name: string | null;
}

export function peerView(agent: AgentRecord): PeerView {
  return {
    agent_id: agent.agent_id,
    role: agent.role,
    team_id: agent.team_id,
    status: agentStatus(agent),
    is_leader_of: [...agent.leads],
    name: agent.name,
  };
}

/**
 * `team`: the caller's teammates and the leader of its team (the agents it works beside and
 * answers to); `children`: members of every team the caller leads; `all`: every agent of
 * the task, the caller included. Order is registration order, so it is stable.
 */
export function peersOf(state: RegistryState, caller: AgentRecord, scope: PeerScope): AgentRecord[] {
  const task = state.tasks.get(caller.task_id);
  if (!task) return [];
  const byId = (id: string) => state.agents.get(id);
  if (scope === 'all') return task.agent_ids.map(byId).filter((a): a is AgentRecord => a !== undefined);
  if (scope === 'children') return directChildren(state, caller);
  if (!caller.team_id) return [];
  const team = state.teams.get(caller.team_id);
  if (!team) return [];
  const ids = [team.leader_id, ...team.member_ids].filter((id) => id !== caller.agent_id);
  return ids.map(byId).filter((a): a is AgentRecord => a !== undefined);
}

/** Members of the teams the agent leads (one hop), itself excluded. */
export function directChildren(state: RegistryState, leader: AgentRecord): AgentRecord[] {
  const out: AgentRecord[] = [];
  for (const teamId of leader.leads) {
    const team = state.teams.get(teamId);
    if (!team) continue;
    for (const id of team.member_ids) {
      const member = state.agents.get(id);
      if (member && member.agent_id !== leader.agent_id) out.push(member);
    }
  }
  return out;
}

/**
 * The depth a team led by `leader` has: the root's teams are depth 1, and a team led by a
 * member of a depth-d team is depth d+1.
 */
export function depthOfTeamLedBy(state: RegistryState, leader: AgentRecord): number {
  const own: TeamRecord | undefined = leader.team_id ? state.teams.get(leader.team_id) : undefined;
  return (own?.depth ?? 0) + 1;
}

/**
 * Depth-first order for a termination cascade: every agent in the teams `target` leads,
 * deepest first, then `target` itself. Agents already terminated are skipped.
 */
export function cascadeOrder(state: RegistryState, target: AgentRecord): AgentRecord[] {
  const out: AgentRecord[] = [];
  const seen = new Set<string>();
  const visit = (agent: AgentRecord) => {
    if (seen.has(agent.agent_id)) return;
    seen.add(agent.agent_id);
    for (const child of directChildren(state, agent)) visit(child);
    if (!agent.terminate_consumed) out.push(agent);
  };
  visit(target);
  return out;
}

/** The leader's direct children whose hand-off (review or termination request) waits on it. */
export function childrenAwaitingLeader(state: RegistryState, leader: AgentRecord): AgentRecord[] {
  return directChildren(state, leader).filter((c) => !c.terminate_consumed && (c.review || c.termination_request));
}

/** Direct children with a pending review: what the review gate looks at. */
export function childrenPendingReview(state: RegistryState, leader: AgentRecord): AgentRecord[] {
  return directChildren(state, leader).filter((c) => c.review !== null && !c.terminate_posted);
}

/** The agent's active plan, if it has one. */
export function activePlan(state: RegistryState, agent: AgentRecord) {
  return agent.active_plan_id ? state.plans.get(agent.active_plan_id) : undefined;
}

/** Ready task ids of a plan, in declaration order. */
export function readyTasks(plan: { tasks: Map<string, { status: string }> }): string[] {
  return [...plan.tasks].filter(([, t]) => t.status === 'ready').map(([id]) => id);
}

/** Who holds a question now: the last of its chain (`user` at the gateway). */
export function questionHolder(q: QuestionRecord): string {
  return q.chain.at(-1)!;
}

/** Questions waiting at the user gateway, oldest first. */
export function pendingAtGateway(state: RegistryState): QuestionRecord[] {
  return [...state.questions.values()].filter((q) => q.status === 'pending' && questionHolder(q) === USER);
}

/** Whether a question of the server's about `subjectId` is already waiting (one at a time). */
export function hasPendingSystemQuestion(state: RegistryState, origin: QuestionOrigin, subjectId: string): boolean {
  for (const q of state.questions.values()) {
    if (q.status === 'pending' && q.origin === origin && q.subject_agent_id === subjectId) return true;
  }
  return false;
}
