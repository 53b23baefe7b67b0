/**
 * The registry's state: tasks, agents, teams (plans and questions arrive with their
 * primitives). It is only ever changed by the reducer, from events, so live operation and
 * recovery after a restart are one code path.
 */

/** The leader of a root agent: the person at the user gateway. */
export const USER = 'user';
/** The server itself, as the sender of pings, nudges and review reports. */
export const BEIDOU = 'beidou';

export type TaskStatus = 'running' | 'done' | 'terminated' | 'failed';

export interface TaskRecord {
  task_id: string;
  text: string;
  name: string | null;
  skill: string;
  model: string | null;
  workspace: string;
  spawn: boolean;
  status: TaskStatus;
  root_agent_id: string;
  created_at: number;
  ended_at: number | null;
  end_reason: string | null;
  last_event_at: number;
  event_count: number;
  agent_ids: string[];
  team_ids: string[];
}

/** Who put a message in an inbox: a peer agent, the user, or the server. */
export type InboxKind = 'message' | 'user' | 'system';

export interface InboxMessage {
  message_id: string;
  from: string;
  kind: InboxKind;
  content: string;
  ts: number;
}

export interface LaunchRequest {
  prompt: string;
  first_message: string;
  model: string | null;
  workspace_path: string;
  project_workspace_path: string;
  requested_at: number;
}

export interface AgentStats {
  input_tokens: number;
  output_tokens: number;
  cost_usd: number;
  tool_calls: number;
  llm_calls: number;
}

export type AgentStatus = 'pending_launch' | 'active' | 'terminating' | 'terminated';

export interface AgentRecord {
  agent_id: string;
  task_id: string;
  name: string;
  role: string | null;
  skill: string;
  description: string;
  model: string | null;
  team_id: string | null;
  leader_id: string;
  plan_task_id: string | null;
  workspace_path: string;
  project_workspace_path: string;
  created_at: number;
  /** Teams this agent leads, in creation order. */
  leads: string[];
  /** Undelivered messages, oldest first (a Map keeps insertion order and deletes in O(1)). */
  inbox: Map<string, InboxMessage>;
  delivered_count: number;
  sent_count: number;
  launch: LaunchRequest | null;
  terminate_posted: boolean;
  terminate_consumed: boolean;
  terminated_at: number | null;
  last_activity_at: number;
  stats: AgentStats;
}

export interface TeamRecord {
  team_id: string;
  task_id: string;
  name: string;
  leader_id: string;
  parent_team_id: string | null;
  depth: number;
  task: string;
  rules: string[];
  member_ids: string[];
  created_at: number;
  via: 'create_team' | 'spawn_agent';
}

export interface RegistryState {
  tasks: Map<string, TaskRecord>;
  agents: Map<string, AgentRecord>;
  teams: Map<string, TeamRecord>;
}

export function emptyState(): RegistryState {
  return { tasks: new Map(), agents: new Map(), teams: new Map() };
}
