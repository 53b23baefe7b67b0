import { z } from 'zod';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { Protocol } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { CallToolRequestSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';

/**
 * `tools/call` as the SDK defines it, except that `name` and `arguments` may be anything. The SDK
 * requires a record there and answers anything else (null, `[]`, `"x"`, 42) with a JSON-RPC
 * error carrying a raw zod dump, and parsing a record silently drops a `__proto__` key;
 * Beidou hands the value as sent to `invokePrimitive`, which refuses a non-object and every
 * unknown key as an `invalid_input` tool error, like any other bad input.
 */
const LenientCallToolRequestSchema = CallToolRequestSchema.extend({
  // A missing or non-string `name` is refused by the handler as an unknown tool, the same way.
  params: z.preprocess(
    (params) => params ?? {},
    CallToolRequestSchema.shape.params.extend({ name: z.unknown().optional(), arguments: z.unknown().optional() }),
  ),
});

export type ToolCallRequest = z.infer<typeof LenientCallToolRequestSchema>;
type Extra = Parameters<Parameters<Server['setRequestHandler']>[1]>[1];

/**
 * Registers the tools/call handler through the base Protocol: `Server.setRequestHandler`
 * re-validates tools/call against the SDK's strict schema before the handler runs.
 */
export function onToolCall(
  server: Server,
  handler: (request: ToolCallRequest, extra: Extra) => Promise<CallToolResult>,
): void {
  (
    Protocol.prototype.setRequestHandler as (
      this: Server,
      schema: typeof LenientCallToolRequestSchema,
      h: typeof handler,
    ) => void
  ).call(server, LenientCallToolRequestSchema, handler);
}
