import type { Request, Response } from 'express';
import { createSession } from 'better-sse';
import { settingName } from '../../config.js';
import { limitExceeded } from '../../domain/errors.js';
import { inboxSummary, inboxWatchEnd } from '../../domain/messages.js';
import type { Services } from '../../runtime/services.js';
import type { McpSessions } from '../mcp/index.js';
import { fromDomainError } from '../http/errors.js';

/** A comment line this often keeps proxies and NATs from dropping a quiet stream. */
const KEEP_ALIVE_MS = 15_000;

/**
 * `GET /api/hook/inbox/stream` (agent tokens): the agent's inbox as it changes, for the
 * `beidou relay` and the rewake hook that wake an idle Claude Code session
 * (docs/claude-code.md). Counts and sender names only, never contents: the messages stay in
 * the inbox until the agent takes them, so delivery stays exactly-once. Not an MCP session;
 * like every response, never timed out. Each agent may hold as many of these streams as MCP
 * sessions (BEIDOU_MAX_SESSIONS_PER_AGENT).
 *
 * Events: `inbox` {count, senders, latest, mcp_sessions} on connect and whenever that
 * changes; `ended` {reason: agent_terminated | task_ended | token_revoked}, after which the
 * server closes the stream (`token_revoked`: the token that opened it was revoked). `mcp_sessions` (the agent's open MCP sessions) lets the relay hold a doorbell
 * until the client has reconnected after a server restart, so its read_inbox can work.
 */
export function inboxStream(
  services: Services,
  sessions: Pick<McpSessions, 'sessionsOf' | 'watchSessions'>,
  stopping: AbortSignal,
) {
  const { registry, config } = services;
  const open = new Map<string, number>();

  return async (req: Request, res: Response): Promise<void> => {
    const p = req.principal;
    if (p?.kind !== 'agent') throw new Error('inbox stream without an agent principal');
    // The client may have gone while its token was being checked: its 'close' has passed,
    // and a stream opened now would hold its place under the cap (and a log listener) forever.
    if (res.closed || req.socket.destroyed) return;
    const agentId = p.agentId;
    const held = open.get(agentId) ?? 0;
    if (held >= config.maxSessionsPerAgent) {
      throw fromDomainError(
        limitExceeded(
          'inbox_streams_per_agent',
          config.maxSessionsPerAgent,
          settingName('maxSessionsPerAgent'),
          `agent ${agentId} already has ${config.maxSessionsPerAgent} inbox streams open; close one first`,
        ),
      );
    }
    // Express runs GET routes for HEAD too; Node sends a HEAD's headers only at its end, so a
    // stream would leave the client waiting forever, holding a place. What a GET would start with:
    if (req.method === 'HEAD') return void res.status(200).type('text/event-stream').end();
    open.set(agentId, held + 1);
    const taskId = registry.agent(agentId)!.task_id;
    let last = '';
    let unsubscribe = () => {};
    let keepAlive: NodeJS.Timeout | undefined;
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      unsubscribe();
      clearInterval(keepAlive);
      stopping.removeEventListener('abort', finish);
      const n = (open.get(agentId) ?? 1) - 1;
      if (n > 0) open.set(agentId, n);
      else open.delete(agentId);
      res.end();
    };
    // The response's 'close' is the connection's end, whenever it comes (even while the
    // session is being set up). better-sse's 'disconnected' alone would miss it then, and
    // also fires on the request's 'close', which Node emits once a request body is read.
    res.once('close', finish);
    stopping.addEventListener('abort', finish, { once: true });
    if (stopping.aborted) return finish();

    // Our own keep-alive: better-sse's starts after its session's disconnection when the
    // request closed first (a GET with a body), and would then run for ever.
    const session = await createSession(req, res, { keepAlive: null });
    if (finished) return;
    keepAlive = setInterval(() => res.write(':\n\n'), KEEP_ALIVE_MS);
    session.on('disconnected', finish);
    const update = () => {
      if (finished) return;
      const agent = registry.agent(agentId);
      if (!agent) return finish();
      const revoked = agent.tokens_gen !== p.gen;
      const ended = inboxWatchEnd(registry.state, agent) ?? (revoked ? 'token_revoked' : null);
      const summary = JSON.stringify({
        ...inboxSummary(registry.state, agent),
        mcp_sessions: sessions.sessionsOf(agentId),
      });
      try {
        // A revoked token learns nothing more of the inbox, not even its counts.
        if (!revoked && summary !== last) {
          last = summary;
          session.push(JSON.parse(summary), 'inbox');
        }
        if (ended) session.push({ reason: ended }, 'ended');
      } catch {
        // A session better-sse already counts as gone: end it (a listener must not throw).
        return finish();
      }
      if (ended) finish();
    };
    const unsubscribeLog = registry.log.subscribe(taskId, update);
    const unsubscribeSessions = sessions.watchSessions(agentId, update);
    unsubscribe = () => {
      unsubscribeLog();
      unsubscribeSessions();
    };
    update();
  };
}
