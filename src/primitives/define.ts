import type { z } from 'zod';
import type { AgentRecord } from '../registry/state.js';
import type { Services } from '../runtime/services.js';

/**
 * What a primitive's handler receives. Identity (`caller`) comes from the verified token,
 * never from the model's input.
 */
export interface ToolContext {
  services: Services;
  caller: AgentRecord;
  /** Aborts when the client goes away or the server stops. */
  signal: AbortSignal;
  /** Sends `notifications/progress` when the client asked for it (a no-op otherwise). */
  progress: (message: string) => Promise<void>;
  /**
   * Settles once this call's reply has been flushed to the client's connection (true), or
   * can no longer be (false). `strict`: the first connection that closes early counts as
   * false, even when the client could resume the stream later. Absent (a call made in
   * process), the reply is delivered when the handler returns.
   */
  replyFlushed?: (opts?: { strict?: boolean }) => Promise<boolean>;
}

export interface ToolAnnotations {
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  idempotentHint?: boolean;
  openWorldHint?: boolean;
}

/** One primitive: name, description, input and output schema, handler. Defined once. */
export interface Primitive<I extends z.ZodObject = z.ZodObject, O extends z.ZodObject = z.ZodObject> {
  name: string;
  title: string;
  description: string;
  inputSchema: I;
  outputSchema: O;
  annotations?: ToolAnnotations;
  /** Usable by a leader while a direct child's review is pending (the review gate, docs/tools.md). */
  allowedDuringReview?: boolean;
  /**
   * Never refused by the write budget (BEIDOU_MAX_WRITE_BYTES_PER_MINUTE): what it writes is
   * what others sent the caller (read_inbox's deliveries), and an agent past its budget
   * must still be able to read that it should stop. Read-only tools write nothing, so are never refused either.
   */
  exemptFromWriteBudget?: boolean;
  handler: (input: z.infer<I>, ctx: ToolContext) => Promise<z.infer<O>>;
}

export function definePrimitive<I extends z.ZodObject, O extends z.ZodObject>(def: Primitive<I, O>): Primitive<I, O> {
  return def;
}

// The catalogue holds primitives of many shapes; the handler is called only after its own
// schema parsed the input, so erasing the generics here is sound.
export type AnyPrimitive = Primitive<z.ZodObject, z.ZodObject>;
