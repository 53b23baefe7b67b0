import { DomainError, invalidInput, zodToInvalidInput } from '../domain/errors.js';
import { reviewGate, reviewGateError } from '../domain/reviews.js';
import { EventLogFailedError } from '../events/event-log.js';
import type { AnyPrimitive, ToolContext } from './define.js';

export type InvokeResult = { ok: true; output: Record<string, unknown> } | { ok: false; error: DomainError };

/** Identity keys a tool input may not carry unless the tool itself defines them. */
const IDENTITY_KEYS = ['caller_id', 'task_id'] as const;

/**
 * The one wrapper between a transport and a primitive: identity guards, schema parse
 * (→ `invalid_input`), the write budget (→ `rate_limited`), the review gate, the handler,
 * and the conversion of anything unexpected into `internal_error` (logged with its stack,
 * never shown to the client).
 */
export async function invokePrimitive(
  primitive: AnyPrimitive,
  rawArgs: unknown,
  ctx: ToolContext,
): Promise<InvokeResult> {
  try {
    // Once its sentinel is posted an agent is on its way out: it may not act any more (it
    // could otherwise spawn children the cascade, already computed, would never reach).
    if (ctx.caller.terminate_posted) {
      throw new DomainError('agent_terminated', 'you are being terminated; end your turn', {
        agent_id: ctx.caller.agent_id,
      });
    }
    // Absent arguments are an empty input; anything but an object (null, an array, a string,
    // a number) is a malformed call, refused like any other bad input.
    if (rawArgs !== undefined && (rawArgs === null || typeof rawArgs !== 'object' || Array.isArray(rawArgs))) {
      throw invalidInput(
        'arguments',
        `must be an object, got ${rawArgs === null ? 'null' : Array.isArray(rawArgs) ? 'an array' : typeof rawArgs}`,
      );
    }
    const args = (rawArgs ?? {}) as Record<string, unknown>;
    // Own keys only: an inherited name (or a `__proto__` key) is not a field the caller sent.
    const shape = primitive.inputSchema.shape as Record<string, unknown>;
    if (Object.hasOwn(args, 'leader_id') && !Object.hasOwn(shape, 'leader_id')) {
      throw new DomainError(
        'leader_override_attempted',
        'leader_id cannot be supplied: the caller always leads what it creates',
        { field: 'leader_id' },
      );
    }
    for (const key of IDENTITY_KEYS) {
      if (Object.hasOwn(args, key) && !Object.hasOwn(shape, key)) {
        throw invalidInput(key, 'identity comes from your token and cannot be supplied in the input');
      }
    }
    const parsed = primitive.inputSchema.safeParse(args);
    if (!parsed.success) throw zodToInvalidInput(parsed.error);
    // The write budget, before the call does anything (a plan file is written before its
    // event): an agent that has written its budget is refused here; the commit checks again.
    if (!primitive.annotations?.readOnlyHint && !primitive.exemptFromWriteBudget)
      ctx.services.writeBudget.check(ctx.caller.agent_id);
    // The review gate: while a direct child's review is pending, a leader may only review,
    // message, read and answer. read_inbox stays open too: for a client without a spawner
    // it is how the review report itself arrives.
    const gate = primitive.allowedDuringReview ? null : reviewGate(ctx.services.domain, ctx.caller, primitive.name);
    if (gate) {
      await ctx.services.registry.commit(gate.drafts, { writer: ctx.caller.agent_id });
      throw reviewGateError(gate, primitive.name);
    }
    const { activity, clock } = ctx.services;
    activity.begin(ctx.caller.agent_id, clock.now());
    try {
      const output = await primitive.handler(parsed.data, ctx);
      return { ok: true, output: output as Record<string, unknown> };
    } finally {
      activity.end(ctx.caller.agent_id, clock.now());
    }
  } catch (err) {
    if (err instanceof DomainError) return { ok: false, error: err };
    const log = ctx.services.logger;
    log.error({ err, tool: primitive.name, caller: ctx.caller.agent_id }, 'primitive failed');
    const message =
      err instanceof EventLogFailedError
        ? 'the server cannot write its event log; nothing was changed'
        : 'the server hit an unexpected error; nothing was acknowledged';
    return { ok: false, error: new DomainError('internal_error', message) };
  }
}
