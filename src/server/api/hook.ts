import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import { DomainError } from '../../domain/errors.js';
import type { EventDraft } from '../../events/catalogue.js';
import { reviewGate } from '../../domain/reviews.js';
import type { Services } from '../../runtime/services.js';
import type { Authenticator } from '../http/auth.js';
import { parseOr400 } from '../http/errors.js';
import { inboxStream } from './inbox-stream.js';
import type { McpSessions } from '../mcp/index.js';
import { responseFlushed } from '../mcp/reply-flush.js';

/**
 * What `beidou hook` asks the server (agent tokens): whether a Claude Code tool may run,
 * and the inbox messages to hand over after a tool call or instead of stopping. This is the
 * delivery path for Claude Code sessions no spawner runs (docs/claude-code.md).
 */

/** Shadow tools that compete with Beidou primitives, and what to use instead. */
export const FORBIDDEN_TOOLS: ReadonlyMap<string, string> = new Map([
  ['SendMessage', 'use mcp__beidou__send_message: messages go through Beidou inboxes'],
  ['TodoWrite', 'track work with mcp__beidou__declare_plan and hand it over with mcp__beidou__signal_review'],
]);

/** Claude Code tools a leader keeps while a child's review waits on it (docs/tools.md, the review gate). */
const REVIEW_GATE_TOOLS = new Set(['Read', 'Glob', 'Grep', 'Bash']);

const preToolBody = z.object({ tool_name: z.string().min(1), tool_input: z.unknown().optional() });

export function hookApi(
  services: Services,
  auth: Authenticator,
  sessions: Pick<McpSessions, 'sessionsOf' | 'watchSessions'>,
  stopping: AbortSignal,
): Router {
  const { registry, inboxes } = services;
  const api = Router();
  api.use(auth.admit('agent')); // the token, the body, the token again

  const caller = (req: Request) => {
    const p = req.principal;
    if (p?.kind !== 'agent') throw new Error('hook route without an agent principal');
    return registry.agent(p.agentId)!;
  };

  api.get('/inbox/stream', inboxStream(services, sessions, stopping));

  api.post('/pre-tool-use', async (req, res) => {
    const { tool_name, tool_input } = parseOr400(preToolBody, req.body);
    // At the point of use: what it commits is under the token's identity.
    auth.assertStanding(req);
    const agent = caller(req);
    const base = { task_id: agent.task_id, caller_id: agent.agent_id };
    // What the hook records is the agent's write, metered by its write budget. Past it the
    // denial still stands, unrecorded: a refusal would reach `beidou hook`, which allows on error.
    const record = (drafts: EventDraft[]) =>
      registry.commit(drafts, { writer: agent.agent_id }).catch((err: unknown) => {
        if (!(err instanceof DomainError && err.code === 'rate_limited')) throw err;
      });
    // A Map: a plain object would find `constructor` or `toString` on its prototype.
    const forbidden = FORBIDDEN_TOOLS.get(tool_name);
    if (forbidden) {
      await record([{ event: 'disallowed_alias.denied', ...base, tool_name }]);
      return void res.json({ decision: 'deny', reason: `${tool_name} is not available here: ${forbidden}.` });
    }
    if (tool_name === 'AskUserQuestion') {
      const questions = (tool_input as { questions?: unknown } | undefined)?.questions;
      await record([
        {
          event: 'ask_user_question.redirected',
          ...base,
          questions_count: Array.isArray(questions) ? questions.length : 0,
        },
      ]);
      return void res.json({
        decision: 'deny',
        reason:
          'Ask with mcp__beidou__ask_user instead (same question shape): it goes to your leader first, who answers or escalates it to the user.',
      });
    }
    // Beidou's own tools are gated by the server when called; here only Claude Code's.
    const gated = !tool_name.startsWith('mcp__beidou__') && !REVIEW_GATE_TOOLS.has(tool_name);
    const gate = gated ? reviewGate(services.domain, agent, tool_name) : null;
    if (gate) {
      await record(gate.drafts);
      return void res.json({
        decision: 'deny',
        reason: `${gate.waiting}. Approve with mcp__beidou__terminate_child or send rework with mcp__beidou__send_message first; until then only Read, Glob, Grep, Bash and the review tools are allowed.`,
      });
    }
    res.json({ decision: 'allow' });
  });

  // The messages leave the inbox only once the JSON reply has been handed to the connection
  // ('finish'); a connection closed first leaves them there, marked redelivered.
  const handOver = async (req: Request, res: Response) => {
    // At the point of use: the messages are taken only for a token that stands now.
    auth.assertStanding(req);
    const flushed = responseFlushed(res);
    const agent = caller(req);
    const messages = await inboxes.deliver(agent, 'hook', () => flushed);
    const text = messages.map((m) => m.text).join('\n\n');
    return { messages, text };
  };

  api.post('/post-tool-use', async (req, res) => {
    const { messages, text } = await handOver(req, res);
    res.json({ messages, context: messages.length > 0 ? `New messages in your Beidou inbox:\n\n${text}` : null });
  });

  api.post('/stop', async (req, res) => {
    const { messages, text } = await handOver(req, res);
    if (messages.length === 0) return void res.json({ block: false });
    res.json({
      block: true,
      messages,
      reason: `Messages arrived in your Beidou inbox; handle them before stopping:\n\n${text}`,
    });
  });

  return api;
}
