/**
 * Errors are values: every failure a client can see has a stable code from the seed (plus
 * `invalid_input` and `internal_error`). Primitives throw a PrimitiveError; one wrapper turns
 * it into the tool result `{"error", "message", "details"}`.
 */
export const ERROR_CODES = [
  // send_message
  'unknown_recipient',
  'recipient_terminated',
  'inbox_full',
  'task_mismatch',
  // ask_user / answer_question / escalate_question
  'gateway_unavailable',
  'user_declined',
  'unknown_qid',
  'not_holder',
  'answer_count_mismatch',
  'stale',
  // signal_review / request_termination
  'envelope_missing',
  'plan_incomplete',
  // create_team / spawn_agent
  'depth_exceeded',
  'leader_override_attempted',
  'unknown_skill',
  'concurrent_create_team',
  'duplicate_member_descriptions',
  'concurrent_spawn',
  // declare_plan / remove_plan / spawn_agent / list_ready
  'cycle_detected',
  'unknown_dep',
  'duplicate_task_id',
  'self_dep',
  'empty_plan',
  'plan_already_declared',
  'no_active_plan',
  'plan_in_use',
  'unknown_task',
  'task_not_ready',
  'task_not_pending',
  // terminate_child
  'not_leader',
  'unknown_agent',
  'already_terminating',
  'child_not_pending_review',
  // the server's review gate
  'review_gate_blocked',
  // standalone
  'agent_terminated',
  'invalid_input',
  'internal_error',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export type ErrorDetails = Record<string, unknown>;

export class PrimitiveError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetails = {},
  ) {
    super(message);
    this.name = 'PrimitiveError';
  }

  toJSON(): { error: ErrorCode; message: string; details: ErrorDetails } {
    return { error: this.code, message: this.message, details: this.details };
  }
}

export const invalidInput = (field: string, message: string, details: ErrorDetails = {}) =>
  new PrimitiveError('invalid_input', `${field}: ${message}`, { field, ...details });
