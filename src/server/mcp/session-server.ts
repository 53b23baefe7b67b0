import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListToolsRequestSchema,
  type CallToolResult,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { DomainError } from '../../domain/errors.js';
import type { AnyPrimitive } from '../../primitives/define.js';
import { invokePrimitive } from '../../primitives/invoke.js';
import type { Services } from '../../runtime/services.js';
import { VERSION } from '../../util/version.js';
import { requestConnection, type ReplyTracker } from './reply-flush.js';
import { onToolCall } from './tool-call.js';
import { getLaunchPrompt, LAUNCH_PROMPT_LISTING, launchInstructions } from './launch-prompt.js';
import { toolDefinition } from './tool-listing.js';

/**
 * The SDK server of one MCP session: the catalogue's tools, bound to the session's agent,
 * and that agent's instructions and `launch` prompt (launch-prompt.ts). Both transports
 * (routes.ts) make one per session.
 */

/** A new SDK server for a session of `agentId`, whose replies `replies` follows to the client. */
export type SessionServerFactory = (agentId: string, replies: ReplyTracker) => Server;

export function sessionServerFactory(services: Services, catalogue: readonly AnyPrimitive[]): SessionServerFactory {
  const byName: ReadonlyMap<string, AnyPrimitive> = new Map(catalogue.map((p) => [p.name, p]));
  /** Computed at the first listing (JSON Schema generation of every tool: tens of ms a start need not spend), then shared by every session. */
  let toolList: Tool[] | null = null;

  return (agentId, replies) => {
    const agent = services.registry.agent(agentId);
    const server = new Server(
      { name: 'beidou', version: VERSION },
      {
        capabilities: {
          tools: { listChanged: false },
          prompts: { listChanged: false },
          logging: {},
          experimental: { 'claude/channel': {} },
        },
        // The route authenticated the agent just now; a missing one is only a race with its removal.
        ...(agent ? { instructions: launchInstructions(services, agent) } : {}),
      },
    );
    server.setRequestHandler(ListPromptsRequestSchema, () => ({ prompts: [LAUNCH_PROMPT_LISTING] }));
    server.setRequestHandler(GetPromptRequestSchema, (request) =>
      getLaunchPrompt(services, services.registry.agent(agentId), request.params.name),
    );
    server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: (toolList ??= catalogue.map(toolDefinition)) }));
    onToolCall(server, async (request, extra): Promise<CallToolResult> => {
      const name = request.params.name;
      const primitive = typeof name === 'string' ? byName.get(name) : undefined;
      const caller = services.registry.agent(agentId);
      if (!primitive || !caller) {
        const error = !caller
          ? new DomainError('internal_error', 'the calling agent is no longer registered')
          : new DomainError(
              'invalid_input',
              `name: no tool named ${(JSON.stringify(name) ?? 'undefined').slice(0, 100)}`,
              { field: 'name' },
            );
        return errorResult(error);
      }
      const progressToken = request.params._meta?.progressToken;
      let progress = 0;
      // The HTTP request the call arrived on: a session outlives its requests, so the SDK
      // does not abort a handler when that connection drops; `gone` does (for a resumable
      // stream, only once its client has not come back in time).
      const connection = requestConnection.getStore();
      const gone = replies.gone(connection);
      const result = await invokePrimitive(primitive, request.params.arguments, {
        services,
        caller,
        signal: gone ? AbortSignal.any([extra.signal, gone]) : extra.signal,
        replyFlushed: (opts) => replies.flushed(extra.requestId, connection, opts?.strict ?? false),
        progress: async (message) => {
          if (progressToken === undefined) return;
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress: ++progress, message },
          });
        },
      });
      if (!result.ok) return errorResult(result.error);
      return { content: [{ type: 'text', text: JSON.stringify(result.output) }], structuredContent: result.output };
    });
    return server;
  };
}

function errorResult(error: DomainError): CallToolResult {
  return { isError: true, content: [{ type: 'text', text: JSON.stringify(error.toJSON()) }] };
}
