import { randomUUID } from 'node:crypto';
import type { Express, Request, Response } from 'express';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { Services } from '../../runtime/services.js';
import { refuse, type AgentPrincipal, type Authenticator } from '../http/auth.js';
import { Connection, FlushingSSEServerTransport, requestConnection } from './reply-flush.js';
import { StreamResumption } from './resumption.js';
import type { SessionServerFactory } from './session-server.js';
import type { SessionRegistry } from './sessions.js';

/**
 * The MCP endpoint's routes: Streamable HTTP at /mcp and legacy HTTP+SSE at /sse + /messages.
 * Each session is bound to the agent whose token opened it; the same tools serve both.
 */

/** Suggested reconnection delay (SSE `retry`) for a client whose POST stream dropped. */
const RESUME_RETRY_MS = 1000;

/** Routes for /mcp, /sse and /messages (auth has already run and set req.principal). */
export function mountMcpRoutes(
  app: Express,
  auth: Authenticator,
  services: Services,
  sessions: SessionRegistry,
  newServer: SessionServerFactory,
): void {
  // The token first (a request without a valid token costs no body read), the body, the token again.
  const agentOnly = auth.admit('agent');

  const streamable = streamableHttp(services, auth, sessions, newServer);
  app.post('/mcp', agentOnly, streamable);
  app.get('/mcp', agentOnly, streamable);
  app.delete('/mcp', agentOnly, streamable);

  app.get('/sse', agentOnly, async (req, res) => {
    const caller = principalAgent(req);
    const release = reserveSession(sessions, caller.agentId, res);
    if (!release) return;
    const transport = new FlushingSSEServerTransport('/messages', res);
    const server = newServer(caller.agentId, transport);
    const id = transport.sessionId;
    // Listed only if its token still stands now; nothing of the stream has been written yet.
    const refused = sessions.add(caller, { id, server, transport, open: 1 });
    release();
    if (refused) return refuse(res, refused);
    transport.onclose = () => sessions.remove(id);
    res.on('close', () => sessions.remove(id));
    await server.connect(transport);
  });
  app.post('/messages', agentOnly, async (req, res) => {
    const id = typeof req.query.sessionId === 'string' ? req.query.sessionId : '';
    const session = sessions.get(id);
    if (!session || !(session.transport instanceof FlushingSSEServerTransport)) {
      return void res
        .status(404)
        .json({ error: 'unknown_session', message: 'no SSE session with that sessionId; open GET /sse first' });
    }
    const caller = principalAgent(req);
    if (session.agentId !== caller.agentId) return forbidden(res);
    sessions.usedBy(session, caller.gen);
    await session.transport.handlePostMessage(req, res, req.body);
  });
}

/**
 * POST, GET and DELETE /mcp: a request with an Mcp-Session-Id goes to that session's
 * transport; an initialize request without one opens a session, resumable (resumption.ts).
 */
function streamableHttp(
  services: Services,
  auth: Authenticator,
  sessions: SessionRegistry,
  newServer: SessionServerFactory,
) {
  return async (req: Request, res: Response) => {
    const caller = principalAgent(req);
    const { agentId, gen } = caller;
    if (req.method === 'POST') sessions.trackPost(res);
    const sessionId = req.header('mcp-session-id');
    if (sessionId) {
      const session = sessions.get(sessionId);
      if (!session) return jsonRpcError(res, 404, -32001, 'Session not found; initialize a new session');
      if (session.agentId !== agentId) return forbidden(res);
      const connection = new Connection(res);
      sessions.requestOpened(session, gen);
      res.on('close', () => sessions.requestClosed(session));
      await requestConnection.run(connection, () =>
        (session.transport as StreamableHTTPServerTransport).handleRequest(req, res, req.body),
      );
      return;
    }
    if (req.method !== 'POST' || !isInitializeRequest(req.body)) {
      return jsonRpcError(
        res,
        400,
        -32000,
        'Bad Request: send an initialize request first, or an Mcp-Session-Id header',
      );
    }
    const release = reserveSession(sessions, agentId, res);
    if (!release) return;
    try {
      const { config, clock } = services;
      const resumption = new StreamResumption(
        { maxEvents: config.resumeMaxEvents, maxBytes: config.resumeMaxBytes, maxAgeS: config.resumeS },
        () => clock.now(),
      );
      const server = newServer(agentId, resumption);
      const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        // Listed only if its token still stands now (else closed: its id leads nowhere).
        onsessioninitialized: (id) => {
          if (sessions.add(caller, { id, server, transport, open: 0 })) void server.close().catch(() => undefined);
        },
        eventStore: resumption,
        retryInterval: RESUME_RETRY_MS,
      });
      transport.onclose = () => {
        resumption.close();
        if (transport.sessionId) sessions.remove(transport.sessionId);
      };
      await server.connect(transport);
      // Revoked while the session was being made: answered as at the door.
      const refused = auth.recheck(caller);
      if (refused) {
        void server.close().catch(() => undefined);
        return refuse(res, refused);
      }
      await transport.handleRequest(req, res, req.body);
    } finally {
      release();
    }
  };
}

/** A reservation for a new session of `agentId` (its release), or null once refused with 429. */
function reserveSession(sessions: SessionRegistry, agentId: string, res: Response): (() => void) | null {
  const reserved = sessions.reserve(agentId);
  if (typeof reserved === 'function') return reserved;
  res.status(429).json({ error: reserved.code, message: reserved.message, details: reserved.details });
  return null;
}

function principalAgent(req: Request): AgentPrincipal {
  const p = req.principal;
  if (p?.kind !== 'agent') throw new Error('agent route reached without an agent principal');
  return p;
}

function jsonRpcError(res: Response, status: number, code: number, message: string): void {
  res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
}

function forbidden(res: Response): void {
  res.status(403).json({
    error: 'session_forbidden',
    message: 'this MCP session belongs to another agent; open your own session with your token',
  });
}
