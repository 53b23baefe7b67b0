import { z } from 'zod';

/**
 * The event catalogue: one zod schema per event. Every stored event also carries the
 * envelope `{seq, ts, event, task_id}`. docs/events.md lists each event with its fields
 * and who emits it; schemas/events/ holds the JSON Schemas generated from these.
 *
 * Internal producers are typed by these schemas at compile time; events that arrive from
 * outside (a spawner's drain) are validated against them at run time.
 */

const id = z.string().min(1);
const nullableId = id.nullable();

/** One sub-question of ask_user, in Claude Code's AskUserQuestion wire shape. */
export const questionSchema = z.strictObject({
  question: z.string().min(1, 'must not be empty'),
  header: z.string().max(12, 'must be at most 12 characters'),
  multiSelect: z.boolean(),
  options: z
    .array(
      z.strictObject({
        label: z.string().min(1, 'must not be empty'),
        description: z.string(),
        value: z.string().optional(),
        requires_text: z.boolean().optional(),
      }),
    )
    .refine((o) => o.length === 0 || (o.length >= 2 && o.length <= 4), 'must have 0 (free text) or 2 to 4 options'),
});

export const answerSchema = z.object({
  selected_labels: z.array(z.string()),
  selected_values: z.array(z.string()),
  text: z.string().nullable(),
});

/**
 * Who put a message in an inbox: a peer agent (`message`, by `send_message`), the user
 * (`user`), or the server routing something (`inbox.posted`: the rest). Deliveries carry it.
 */
export type InboxKind = 'message' | 'user' | 'system' | 'review_report' | 'termination_request' | 'question' | 'answer';

/**
 * The longest `stderr` of an agent's failure event: what a spawner's ring holds (200 lines of
 * 4 KiB, src/spawner/adapter.ts) with room for its notes, so a hostile post cannot put
 * megabytes there.
 */
export const AGENT_STDERR_MAX_CHARS = 1_000_000;
const stderrTail = z.string().max(AGENT_STDERR_MAX_CHARS);

/**
 * Why an agent's process failed, as its spawner diagnosed it: its binary could not be run,
 * Claude Code is not logged in, the model API answered an error, or it exited non-zero.
 */
export const AGENT_ERROR_REASONS = ['binary_missing', 'not_logged_in', 'api_error', 'exit_nonzero'] as const;
export type AgentErrorReason = (typeof AGENT_ERROR_REASONS)[number];

/** The longest tool_use_id and tool name a drained event may carry (a runtime's ids are ~30 characters). */
export const MAX_TOOL_FIELD_CHARS = 256;

export const EVENT_FIELDS = {
  /** Standalone: a task and its root agent came into being. */
  task_created: z.object({
    root_agent_id: id,
    text: z.string(),
    name: z.string().nullable(),
    skill: z.string(),
    model: z.string().nullable(),
    workspace: z.string(),
    spawn: z.boolean(),
  }),
  /** Standalone: the task reached a terminal state. */
  task_ended: z.object({
    status: z.enum(['done', 'terminated', 'failed']),
    reason: z.string(),
  }),
  /** An agent was registered (task creation, create_team, spawn_agent). */
  agent_spawned: z.object({
    agent_id: id,
    name: z.string(),
    role: z.string().nullable(),
    skill: z.string(),
    description: z.string(),
    model: z.string().nullable(),
    team_id: nullableId,
    leader_id: id,
    plan_id: nullableId,
    plan_task_id: nullableId,
    workspace_path: z.string(),
    project_workspace_path: z.string(),
  }),
  /** Standalone: a launch request queued for a spawner (the assembled prompt and first turn). */
  'launch.requested': z.object({
    agent_id: id,
    prompt: z.string(),
    first_message: z.string(),
    model: z.string().nullable(),
    workspace_path: z.string(),
    project_workspace_path: z.string(),
  }),
  team_created: z.object({
    team_id: id,
    name: z.string(),
    leader_id: id,
    parent_team_id: nullableId,
    depth: z.number().int(),
    task: z.string(),
    rules: z.array(z.string()),
    via: z.enum(['create_team', 'spawn_agent']),
  }),
  /** Standalone: a team was created deeper than the warning depth (docs/tools.md, Limits). */
  'depth.warning': z.object({
    team_id: id,
    depth: z.number().int(),
    max_depth: z.number().int(),
  }),
  /** Action side of a message: it entered the recipient's inbox. `caller_id` is an agent or "user". */
  send_message: z.object({
    caller_id: id,
    to: id,
    content: z.string(),
    message_id: id,
  }),
  /** Delivery side: the recipient consumed the message (exactly once). */
  agent_input: z.object({
    caller_id: id,
    from: id,
    message_kind: z.enum(['user', 'system', 'initial']),
    source: z.enum(['initial', 'queue']),
    content: z.string(),
    message_id: id,
    via: z.enum(['read_inbox', 'spawner', 'hook']),
  }),
  /**
   * A delivery began: these messages of `caller_id`'s inbox are in a reply on its way out
   * (`read_inbox`, a hook). `agent_input` follows once the reply is flushed; replayed
   * without it (a crash in between), they are in the inbox again, to be delivered again
   * marked `redelivered`.
   */
  delivering: z.object({
    caller_id: id,
    message_ids: z.array(id),
    via: z.enum(['read_inbox', 'hook']),
  }),
  /** Standalone: a terminate sentinel was posted to an agent's inbox. */
  'terminate.posted': z.object({
    caller_id: id,
    agent_id: id,
    reason: z.enum(['admin', 'cascade', 'leader', 'leader_force', 'root_approved']),
  }),
  /** Standalone: the sentinel was consumed; the agent's token stops working. */
  'terminate.consumed': z.object({
    agent_id: id,
    via: z.enum(['server', 'spawner']),
  }),
  /** Standalone: a message the server routed into an inbox (review reports, questions, pings, nudges). */
  'inbox.posted': z.object({
    to: id,
    from: id,
    kind: z.enum(['review_report', 'termination_request', 'question', 'answer', 'system']),
    content: z.string(),
    message_id: id,
  }),
  /**
   * Standalone: an undelivered message left an inbox without being delivered (a repeated
   * signal_review replaces the child's earlier report: the leader sees one per child).
   */
  'inbox.withdrawn': z.object({
    to: id,
    from: id,
    message_id: id,
    reason: z.enum(['replaced']),
  }),
  plan_declared: z.object({
    plan_id: id,
    owner_agent_id: id,
    team_id: z.null(),
    plan_path: z.string(),
    tasks: z.array(
      z.object({
        id: z.string(),
        role: z.string(),
        skill: z.string(),
        depends_on: z.array(z.string()),
        status: z.enum(['ready', 'blocked']),
        task: z.string(),
        description: z.string(),
        model: z.string().nullable(),
      }),
    ),
  }),
  plan_removed: z.object({ plan_id: id, owner_agent_id: id }),
  task_ready: z.object({ plan_id: id, plan_task_id: z.string() }),
  task_spawned: z.object({ plan_id: id, plan_task_id: z.string(), team_id: id, agent_id: id }),
  task_done: z.object({ plan_id: id, plan_task_id: z.string() }),
  task_failed: z.object({ plan_id: id, plan_task_id: z.string(), reason: z.string() }),
  /** Emitted by signal_review and request_termination. */
  status: z.object({
    agent_id: id,
    state: z.enum(['working', 'idle', 'blocked', 'done', 'review_pending', 'termination_requested']),
    detail: z.string(),
  }),
  liveness_check: z.object({ agent_id: id, team_id: nullableId, all_done: z.boolean().nullable() }),
  /** A leader's (or the user's) message cleared a pending review or termination request. */
  'review.acknowledged': z.object({ agent_id: id, by: id }),
  /** A leader approved a child's hand-off with terminate_child. */
  'completion.approved': z.object({ agent_id: id, leader_id: id }),
  'terminate.forced': z.object({
    caller_id: id,
    agent_id: id,
    team_id: nullableId,
    reason: z.enum(['leader_force', 'watchdog_grace']),
  }),
  'review_gate.denied': z.object({
    caller_id: id,
    tool_name: z.string(),
    pending_child_ids: z.array(id),
  }),
  /** Watchdog pass A: a pending review (or termination request) re-pinged to the leader. */
  'completion.reping': z.object({
    agent_id: id,
    leader_id: id,
    ping_count: z.number().int(),
    pending: z.enum(['review', 'termination']),
  }),
  'review.escalated_to_user': z.object({
    agent_id: id,
    leader_id: id,
    pending: z.enum(['review', 'termination']),
    qid: z.string().nullable(),
  }),
  /** Watchdog pass B: an idle leader (or the root) nudged. */
  'liveness.nudge': z.object({ agent_id: id, nudge_count: z.number().int(), idle_s: z.number() }),
  'liveness.escalated_to_user': z.object({ agent_id: id, idle_s: z.number(), qid: z.string().nullable() }),
  'watchdog.exception': z.object({ pass: z.string(), message: z.string() }),
  question_asked: z.object({
    qid: id,
    /** The agent that called ask_user, or "beidou" for the server's own questions. */
    asker: id,
    /** The agent holding it now, or null when it is at the user gateway. */
    holder: nullableId,
    prompt: z.string(),
    questions: z.array(questionSchema),
    context: z.string().nullable(),
    origin: z.enum([
      'ask_user',
      'root_review',
      'root_termination',
      'review_escalation',
      'liveness_escalation',
      'agent_failure',
    ]),
    /** For the server's questions: the agent the question is about. */
    subject_agent_id: nullableId,
  }),
  question_escalated: z.object({ qid: id, by: id, new_holder: nullableId, reason: z.string() }),
  question_answered: z.object({
    qid: id,
    asker: id,
    chain_len: z.number().int(),
    answers: z.array(answerSchema),
    answer_text: z.string(),
    /** The agent that answered, or "user". */
    by: id,
    reason: z.string().nullable(),
  }),
  question_declined: z.object({ qid: id, asker: id, reason: z.string() }),
  'completion.reported': z.object({
    agent_id: id,
    leader_id: id,
    via: z.enum(['hook', 'user_gateway']),
    decision: z.enum(['approve', 'rework']).optional(),
  }),
  'completion.empty': z.object({ agent_id: id, leader_id: id, reason: z.string() }),
  // ---- the spawner: assignment by the server ----
  /** The server handed an agent's launch to a spawner (a resume when it ran before). */
  'launch.assigned': z.object({
    agent_id: id,
    spawner_id: id,
    resume: z.boolean(),
    session_id: z.string().nullable(),
  }),
  /** A spawner missed three heartbeats; its agents wait for another spawner, which resumes them. */
  'spawner.lost': z.object({ spawner_id: id, agent_ids: z.array(id) }),
  /** Committed with a report a spawner sent from its spool: the spawner's high-water mark, so a replay is ignored. */
  'spawner.spooled': z.object({ spawner_id: id, spool_seq: z.number().int().positive() }),

  // ---- revocation (docs/security.md), by the admin ----
  /**
   * Standalone: every token minted for the agent until now is refused (each one moves the
   * agent's revocation generation on; `before`: the server's clock then, for people).
   * `spawner_id`: the spawner that held it, whose process is stopped so the agent is launched
   * again with a fresh token (null: no spawner held it, or it is being terminated).
   */
  'agent.tokens_revoked': z.object({ agent_id: id, before: z.number(), spawner_id: nullableId }),
  /** Standalone, in the system log (SYSTEM_LOG): every spawner token minted until now is refused (`before`: as above). */
  'spawner_tokens.revoked': z.object({ before: z.number() }),

  // ---- drained from agent processes by the spawner (validated on arrival) ----
  agent_started: z.object({
    agent_id: id,
    team_id: nullableId,
    role: z.string().nullable(),
    name: z.string(),
    template: z.string(),
    model_requested: z.string().nullable(),
    session_id: z.string().nullable(),
    resumed: z.boolean(),
    spawner_id: id,
  }),
  'turn.usage': z.object({
    caller_id: id,
    message_id: z.string(),
    model: z.string().nullable(),
    stop_reason: z.string().nullable(),
    input_tokens: z.number().int().min(0),
    output_tokens: z.number().int().min(0),
    cache_creation_input_tokens: z.number().int().min(0).optional(),
    cache_read_input_tokens: z.number().int().min(0).optional(),
  }),
  assistant_text: z.object({
    caller_id: id,
    message_id: z.string(),
    text: z.string(),
    stop_reason: z.string().nullable(),
  }),
  tool_called: z.object({
    caller_id: id,
    message_id: z.string().nullable(),
    // Bounded: an agent's own output names them, and the registry holds open ids (reducer).
    tool_use_id: z.string().max(MAX_TOOL_FIELD_CHARS),
    name: z.string().max(MAX_TOOL_FIELD_CHARS),
    input: z.unknown(),
  }),
  tool_result: z.object({
    caller_id: id,
    tool_use_id: z.string().max(MAX_TOOL_FIELD_CHARS),
    duration_ms: z.number().min(0),
    is_error: z.boolean(),
    error_reason: z.string().nullable(),
  }),
  'run.cost': z.object({
    agent_id: id,
    total_cost_usd: z.number().min(0),
    duration_ms: z.number().min(0),
    duration_api_ms: z.number().min(0),
    num_turns: z.number().int().min(0),
    usage: z.record(z.string(), z.unknown()),
    model_usage: z.record(z.string(), z.unknown()),
  }),
  /** An adapter failure; `reason` (absent in logs written before it existed) makes the agent's status `error`. */
  agent_error: z.object({
    caller_id: id,
    exception: z.string(),
    msg: z.string(),
    stderr: stderrTail,
    stop_reason: z.string().optional(),
    reason: z.enum(AGENT_ERROR_REASONS).optional(),
  }),
  agent_crashed: z.object({
    caller_id: id,
    exception: z.string(),
    msg: z.string(),
    strike_count: z.number().int().min(1),
    stderr: stderrTail,
  }),
  agent_completed: z.object({
    agent_id: id,
    terminated: z.boolean(),
    stop_reason: z.enum([
      'end_turn',
      'no_result',
      'cancelled',
      'crashed',
      'crash_escalated',
      'contract_violation_escalated',
    ]),
  }),
  contract_violation: z.object({
    agent_id: id,
    strike_count: z.number().int().min(1),
    action: z.enum(['resumed', 'escalated_to_leader', 'escalated_to_user']),
  }),
  /** A clean turn after strikes: the agent's crash and contract-violation strikes start again from zero. */
  'strikes.reset': z.object({ agent_id: id }),
  root_crash_escalation: z.object({ agent_id: id, crash_strikes: z.number().int(), stderr: stderrTail }),
  config_warning: z.object({ agent_id: id, skill: z.string(), warning: z.string() }),
  // ---- from `beidou hook` ----
  'ask_user_question.redirected': z.object({ caller_id: id, questions_count: z.number().int().min(0) }),
  'disallowed_alias.denied': z.object({ caller_id: id, tool_name: z.string() }),
} as const;

/**
 * The log of events that belong to no task (the spawner tokens' revocation): a task id no
 * task has (theirs are `tsk_…`), replayed, replicated and kept like any task's log, never archived.
 */
export const SYSTEM_LOG = 'beidou';

export type EventName = keyof typeof EVENT_FIELDS;
export const EVENT_NAMES = Object.keys(EVENT_FIELDS) as EventName[];

export type EventFields<N extends EventName> = z.infer<(typeof EVENT_FIELDS)[N]>;

/** What a producer hands to the log: the name, the task and the fields. */
export type EventDraft = {
  [N in EventName]: { event: N; task_id: string } & EventFields<N>;
}[EventName];

/** What the log stores and returns: the draft plus its place in the task's sequence. */
export type StoredEvent = EventDraft & { seq: number; ts: number };

export const eventEnvelope = z.object({
  seq: z.number().int().positive(),
  ts: z.number(),
  event: z.string(),
  task_id: id,
});

/**
 * Events a spawner may post for the agents it runs. The server fills in `caller_id` /
 * `agent_id` from the agent the post is for (identity never comes from the payload) and
 * builds `agent_started` itself from the registry.
 */
export const SPAWNER_EVENTS = [
  'turn.usage',
  'assistant_text',
  'tool_called',
  'tool_result',
  'run.cost',
  'agent_error',
  'agent_crashed',
  'agent_completed',
  'contract_violation',
  'strikes.reset',
  'root_crash_escalation',
  'config_warning',
  'terminate.forced',
] as const satisfies readonly EventName[];

/** The full stored shape of one event, for schemas/ and run-time validation. */
export function storedEventSchema(name: EventName) {
  return eventEnvelope.extend({ event: z.literal(name) }).extend(EVENT_FIELDS[name].shape);
}
