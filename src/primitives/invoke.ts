import type { z } from 'zod';
import { EventLogFailedError } from '../events/log.js';
import type { AnyPrimitive, ToolContext } from './define.js';
import { PrimitiveError, invalidInput } from './errors.js';
import { childrenPendingReview } from '../registry/queries.js';

export type InvokeResult = { ok: true; output: Record<string, unknown> } | { ok: false; error: PrimitiveError };

/** Identity keys a tool input may not carry unless the tool itself defines them. */
const IDENTITY_KEYS = ['caller_id', 'task_id'] as const;

/** `['roles', 1, 'skill']` → `roles[1].skill`. */
export function fieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out.length === 0 ? String(part) : `.${String(part)}`;
  }
  return out;
}

/** The first schema issue as `invalid_input`, naming the field (and index) at fault. */
export function zodToInvalidInput(error: z.ZodError): PrimitiveError {
  const issue = error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    const field = fieldPath([...issue.path, issue.keys[0]!]);
    return invalidInput(field, 'is not an accepted field', { unknown_fields: issue.keys });
  }
  const field = fieldPath(issue.path) || '(input)';
  return invalidInput(field, issue.message);
}

/**
 * The review gate (SPEC §3): while a direct child's review is pending, a leader may only
 * review, message, read and answer; anything else is refused, naming the child and the two
 * ways out. read_inbox stays open too: for a client without a spawner it is how the review
 * report itself arrives.
 */
async function enforceReviewGate(toolName: string, ctx: ToolContext): Promise<void> {
  const { registry } = ctx.services;
  const pending = childrenPendingReview(registry.state, ctx.caller);
  if (pending.length === 0) return;
  await registry.commit([
    {
      event: 'review_gate.denied',
      task_id: ctx.caller.task_id,
      caller_id: ctx.caller.agent_id,
      tool_name: toolName,
      pending_child_ids: pending.map((c) => c.agent_id),
    },
  ]);
  const names = pending.map((c) => `${c.name} (${c.agent_id})`).join(', ');
  throw new PrimitiveError(
    'review_gate_blocked',
    `${names} signalled review and waits on you. First approve with terminate_child or send rework with send_message; until then only reading, messaging, reviewing and answering questions are allowed`,
    { pending_child_ids: pending.map((c) => c.agent_id), tool: toolName, ways_out: ['terminate_child', 'send_message'] },
  );
}

/**
 * The one wrapper between a transport and a primitive: identity guards, schema parse
 * (→ `invalid_input`), the handler, and the conversion of anything unexpected into
 * `internal_error` (logged with its stack, never shown to the client).
 */
export async function invokePrimitive(primitive: AnyPrimitive, rawArgs: unknown, ctx: ToolContext): Promise<InvokeResult> {
  try {
    // Once its sentinel is posted an agent is on its way out: it may not act any more (it
    // could otherwise spawn children the cascade, already computed, would never reach).
    if (ctx.caller.terminate_posted) {
      throw new PrimitiveError('agent_terminated', 'you are being terminated; end your turn', { agent_id: ctx.caller.agent_id });
    }
    const args = rawArgs ?? {};
    if (typeof args === 'object' && !Array.isArray(args)) {
      const shape = primitive.inputSchema.shape as Record<string, unknown>;
      if ('leader_id' in args && !('leader_id' in shape)) {
        throw new PrimitiveError(
          'leader_override_attempted',
          'leader_id cannot be supplied: the caller always leads what it creates',
          { field: 'leader_id' },
        );
      }
      for (const key of IDENTITY_KEYS) {
        if (key in args && !(key in shape)) {
          throw invalidInput(key, 'identity comes from your token and cannot be supplied in the input');
        }
      }
    }
    const parsed = primitive.inputSchema.safeParse(args);
    if (!parsed.success) throw zodToInvalidInput(parsed.error);
    if (!primitive.allowedDuringReview) await enforceReviewGate(primitive.name, ctx);
    const { activity, clock } = ctx.services;
    activity.begin(ctx.caller.agent_id, clock.now());
    try {
      const output = await primitive.handler(parsed.data, ctx);
      return { ok: true, output: output as Record<string, unknown> };
    } finally {
      activity.end(ctx.caller.agent_id, clock.now());
    }
  } catch (err) {
    if (err instanceof PrimitiveError) return { ok: false, error: err };
    const log = ctx.services.logger;
    log.error({ err, tool: primitive.name, caller: ctx.caller.agent_id }, 'primitive failed');
    const message =
      err instanceof EventLogFailedError
        ? 'the server cannot write its event log; nothing was changed'
        : 'the server hit an unexpected error; nothing was acknowledged';
    return { ok: false, error: new PrimitiveError('internal_error', message) };
  }
}
