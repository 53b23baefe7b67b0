import type { z } from 'zod';

/**
 * Errors are values: every failure a client can see has a stable code, listed here and in
 * docs/tools.md. A decision refuses by throwing a DomainError; the tool wrapper
 * (`primitives/invoke.ts`) turns it into the tool result `{"error", "message", "details"}`
 * and the HTTP layer (`server/http-errors.ts`) into a 4xx JSON body.
 */
export const ERROR_CODES = [
  // send_message (an agent of another task is an unknown_recipient: no code tells it exists)
  'unknown_recipient',
  'recipient_terminated',
  'inbox_full',
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
  // limits (docs/security.md)
  'limit_exceeded',
  'content_too_large',
  'rate_limited',
  // standalone
  'agent_terminated',
  'invalid_input',
  'internal_error',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export type ErrorDetails = Record<string, unknown>;

export class DomainError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetails = {},
  ) {
    super(message);
    this.name = 'DomainError';
  }

  toJSON(): { error: ErrorCode; message: string; details: ErrorDetails } {
    return { error: this.code, message: this.message, details: this.details };
  }
}

export const invalidInput = (field: string, message: string, details: ErrorDetails = {}) =>
  new DomainError('invalid_input', `${field}: ${message}`, { field, ...details });

/** `['roles', 1, 'skill']` → `roles[1].skill`. */
function fieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out.length === 0 ? String(part) : `.${String(part)}`;
  }
  return out;
}

/** The first schema issue as `invalid_input`, naming the field (and index) at fault. */
export function zodToInvalidInput(error: z.ZodError): DomainError {
  const issue = error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    const field = fieldPath([...issue.path, issue.keys[0]!]);
    return invalidInput(field, 'is not an accepted field', { unknown_fields: issue.keys });
  }
  const field = fieldPath(issue.path) || '(input)';
  return invalidInput(field, issue.message);
}

/** Which quota a `limit_exceeded` names (`details.limit`). */
export type LimitName =
  | 'agents_per_task'
  | 'plan_tasks'
  | 'teams_per_leader'
  | 'pending_questions_per_agent'
  | 'sessions_per_agent'
  | 'inbox_streams_per_agent'
  | 'admin_streams';

/** A quota refused before anything is written; `setting` is the environment variable that tunes it. */
export const limitExceeded = (limit: LimitName, max: number, setting: string, message: string) =>
  new DomainError('limit_exceeded', message, { limit, max, setting });

/** A text one agent hands another is over `BEIDOU_MAX_CONTENT_CHARS`. */
export const contentTooLarge = (field: string, max: number, setting: string) =>
  new DomainError('content_too_large', `${field}: is over ${max} characters`, { field, max, setting });

/** An agent past a rate limit (its write budget, BEIDOU_MAX_WRITE_BYTES_PER_MINUTE): refused before anything is written; `setting` tunes it. */
export const rateLimited = (retryAfterS: number, setting: string, message: string) =>
  new DomainError('rate_limited', message, { retry_after_s: retryAfterS, setting });
