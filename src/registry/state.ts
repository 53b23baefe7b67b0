import type { AgentErrorReason, InboxKind } from '../events/catalogue.js';
import type { PlanTaskSpec, PlanTaskStatus } from './plan-graph.js';

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
  plan_ids: string[];
  question_ids: string[];
}

export type { InboxKind };

export interface InboxMessage {
  message_id: string;
  from: string;
  kind: InboxKind;
  content: string;
  ts: number;
  /** A delivery of it began (`delivering`) and did not end in `agent_input`: the next one is a redelivery. */
  redelivered?: true;
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

export type AgentStatus =
  | 'pending_launch'
  | 'launching'
  | 'waiting_for_spawner'
  | 'stopped'
  | 'active'
  | 'error'
  | 'review_pending'
  | 'termination_requested'
  | 'terminating'
  | 'terminated';

/** A review or termination request waiting on the leader, with the watchdog's progress on it. */
export interface PendingHandoff {
  detail: string;
  since: number;
  /** Watchdog pass A: pings sent so far and when the last one went (or `since`). */
  pings: number;
  last_ping_at: number;
  escalated: boolean;
}

export interface AgentError {
  reason: AgentErrorReason;
  msg: string;
  /** The last stderr lines the spawner sent with it (at most 20). */
  stderr: string;
  at: number;
}

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
  /** UTF-16 length of the undelivered contents: the inbox's memory, capped like its count. */
  inbox_chars: number;
  delivered_count: number;
  sent_count: number;
  launch: LaunchRequest | null;
  /** The spawner running (or about to run) this agent, if any. */
  spawner_id: string | null;
  /** Its revocation generation: how many `agent.tokens_revoked` it has had; only its tokens of this one work. */
  tokens_gen: number;
  /** The session a resume continues (Claude Code's session id, or the command adapter's). */
  session_id: string | null;
  /** Whether the agent ever ran (a spawner started it, or it called a tool). */
  started: boolean;
  /** The last failure its spawner reported (`agent_error` with a reason), until a message or a new process clears it. */
  error: AgentError | null;
  /** Whether its process is running now (between agent_started and agent_completed / spawner.lost). */
  running: boolean;
  /** Tool uses its process started and has not finished (drained tool_called without tool_result). */
  open_tool_uses: Set<string>;
  /**
   * Consecutive crashes and clean exits nobody asked for, reduced from `agent_crashed` /
   * `contract_violation` (reset by `strikes.reset` and by an escalation): sent with each
   * launch so whichever spawner runs the agent continues the count.
   */
  crash_strikes: number;
  contract_strikes: number;
  /** The spawner gave up on it (strikes exhausted): relaunched only when a message arrives. */
  parked: boolean;
  /** Cost of the agent's earlier sessions; run.cost reports a session's cumulative total. */
  cost_base: number;
  /** The plan this agent declared and is running, if any. */
  active_plan_id: string | null;
  /** The plan this agent was spawned under (with plan_task_id), if any. */
  plan_id: string | null;
  /** The team spawn_agent created for this leader (lazily, on its first spawn). */
  plan_team_id: string | null;
  review: PendingHandoff | null;
  termination_request: PendingHandoff | null;
  /** Watchdog pass B: nudges since the agent was last active. */
  nudges: number;
  last_nudge_at: number | null;
  nudge_escalated: boolean;
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

export interface PlanTaskRecord extends PlanTaskSpec {
  status: PlanTaskStatus;
  agent_id: string | null;
}

export interface PlanRecord {
  plan_id: string;
  task_id: string;
  owner_agent_id: string;
  plan_path: string;
  /** In declaration order. */
  tasks: Map<string, PlanTaskRecord>;
  created_at: number;
  removed_at: number | null;
}

export type QuestionOrigin =
  | 'ask_user'
  | 'root_review'
  | 'root_termination'
  | 'review_escalation'
  | 'liveness_escalation'
  | 'agent_failure';

export interface QuestionItem {
  question: string;
  header: string;
  multiSelect: boolean;
  options: Array<{
    label: string;
    description: string;
    value?: string | undefined;
    requires_text?: boolean | undefined;
  }>;
}

export interface Answer {
  selected_labels: string[];
  selected_values: string[];
  text: string | null;
}

export interface QuestionRecord {
  qid: string;
  task_id: string;
  asker: string;
  questions: QuestionItem[];
  /** A flat summary of the questions (at most 200 characters). */
  prompt: string;
  context: string | null;
  origin: QuestionOrigin;
  subject_agent_id: string | null;
  /** Every holder in order; the last is the current one. `user` is the user gateway. */
  chain: string[];
  status: 'pending' | 'answered' | 'declined';
  answers: Answer[] | null;
  answer_text: string | null;
  answered_by: string | null;
  created_at: number;
  answered_at: number | null;
  audit: Array<{
    by: string;
    action: 'asked' | 'escalated' | 'answered' | 'declined';
    reason: string | null;
    ts: number;
  }>;
}

export interface RegistryState {
  tasks: Map<string, TaskRecord>;
  agents: Map<string, AgentRecord>;
  teams: Map<string, TeamRecord>;
  plans: Map<string, PlanRecord>;
  questions: Map<string, QuestionRecord>;
  /** Per spawner id, the highest spool sequence committed (`spawner.spooled`): a report at or below it is a replay. */
  spool_hwm: Map<string, number>;
  /** The spawner tokens' revocation generation: how many `spawner_tokens.revoked`; only tokens of this one work. */
  spawner_tokens_gen: number;
}

export function emptyState(): RegistryState {
  return {
    tasks: new Map(),
    agents: new Map(),
    teams: new Map(),
    plans: new Map(),
    questions: new Map(),
    spool_hwm: new Map(),
    spawner_tokens_gen: 0,
  };
}
