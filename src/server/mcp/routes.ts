import { randomUUID } from 'node:crypto';
import type { Express, Request, Response } from 'express';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListToolsRequestSchema,
  isInitializeRequest,
  type CallToolResult,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { DomainError } from '../../domain/errors.js';
import { deliveredText } from '../../domain/messages.js';
import type { StoredEvent } from '../../events/catalogue.js';
import type { InboxMessage } from '../../registry/state.js';
import type { AnyPrimitive } from '../../primitives/define.js';
import { invokePrimitive } from '../../primitives/invoke.js';
import type { Services } from '../../runtime/services.js';
import { VERSION } from '../../util/version.js';
import type { Authenticator } from '../http/auth.js';
import { thenBody } from '../http/body.js';
import { Connection, FlushingSSEServerTransport, requestConnection, type ReplyTracker } from './reply-flush.js';
import { SessionCap } from './session-cap.js';
import { SessionEventStore } from './resumption.js';
import { onToolCall } from './tool-call.js';
import { getLaunchPrompt, LAUNCH_PROMPT_LISTING, launchInstructions } from './launch-prompt.js';
import { toolDefinition } from './tool-listing.js';

/**
 * The MCP endpoint: Streamable HTTP at /mcp and legacy HTTP+SSE at /sse + /messages. Each
 * session is bound to the agent whose token opened it; the same tools serve both.
 */

/** Suggested reconnection delay (SSE `retry`) for a client whose POST stream dropped. */
const RESUME_RETRY_MS = 1000;

interface McpSession {
  id: string;
  agentId: string;
  server: Server;
  transport: Transport;
  /** Requests (and GET streams) open on it, and when it last had one (clock seconds): for idle expiry. */
  open: number;
  lastSeen: number;
}

export class McpSessions {
  private readonly sessions = new Map<string, McpSession>();
  private readonly byAgent = new Map<string, Set<McpSession>>();
  private readonly byName: ReadonlyMap<string, AnyPrimitive>;
  /** POSTs whose response is not yet written: shutdown lets them finish first. */
  private openPosts = 0;
  private postsDrained: Array<() => void> = [];
  private sweeper: NodeJS.Timeout | null = null;
  /** Computed at the first listing (JSON Schema generation of every tool: tens of ms a start need not spend), then shared by every session. */
  private toolList: Tool[] | null = null;
  private readonly cap: SessionCap;

  constructor(
    private readonly services: Services,
    private readonly catalogue: readonly AnyPrimitive[],
  ) {
    this.byName = new Map(catalogue.map((p) => [p.name, p]));
    this.cap = new SessionCap(services.config.maxSessionsPerAgent);
  }

  /** Durable observer: a terminated agent's sessions end with it (its token no longer opens new ones). */
  onDurable(events: readonly StoredEvent[]): void {
    for (const e of events) {
      if (e.event !== 'terminate.consumed') continue;
      for (const session of [...(this.byAgent.get(e.agent_id) ?? [])]) void session.server.close().catch(() => undefined);
    }
  }

  /** A wake-up nudge on every open session of the recipient; delivery itself is elsewhere. */
  notifyArrival(agentId: string, message: InboxMessage): void {
    const set = this.byAgent.get(agentId);
    if (!set) return;
    const text = deliveredText(this.services.registry.state, message);
    for (const session of set) {
      session.server
        .notification({
          method: 'notifications/claude/channel',
          params: { content: text, meta: { message_id: message.message_id, from: message.from } },
        })
        .catch(() => undefined);
      session.server
        .sendLoggingMessage({ level: 'info', logger: 'beidou.inbox', data: { message_id: message.message_id, from: message.from, text } })
        .catch(() => undefined);
    }
  }

  /**
   * Streamable HTTP sessions outlive their requests; one with nothing open and no request
   * for BEIDOU_SESSION_IDLE_S is closed (a client that comes back initializes anew).
   */
  startExpiry(): void {
    const idleS = this.services.config.sessionIdleS;
    this.sweeper = setInterval(() => this.expireIdle(this.now() - idleS), Math.min(60_000, (idleS * 1000) / 2));
    this.sweeper.unref();
  }

  private expireIdle(cutoff: number): void {
    for (const session of this.sessions.values()) {
      if (!(session.transport instanceof StreamableHTTPServerTransport)) continue; // SSE ends with its stream
      if (session.open === 0 && session.lastSeen < cutoff) void session.server.close().catch(() => undefined);
    }
  }

  private now(): number {
    return this.services.clock.now();
  }

  get size(): number {
    return this.sessions.size;
  }

  get(id: string): McpSession | undefined {
    return this.sessions.get(id);
  }

  /**
   * One SDK server per session, with the tool handlers bound to the session's agent. Its
   * instructions and its `launch` prompt are that agent's (launch-prompt.ts).
   */
  private newServer(agentId: string, replies: ReplyTracker): Server {
    const agent = this.services.registry.agent(agentId);
    const server = new Server(
      { name: 'beidou', version: VERSION },
      {
        capabilities: { tools: { listChanged: false }, prompts: { listChanged: false }, logging: {}, experimental: { 'claude/channel': {} } },
        // The route authenticated the agent just now; a missing one is only a race with its removal.
        ...(agent ? { instructions: launchInstructions(this.services, agent) } : {}),
      },
    );
    server.setRequestHandler(ListPromptsRequestSchema, () => ({ prompts: [LAUNCH_PROMPT_LISTING] }));
    server.setRequestHandler(GetPromptRequestSchema, (request) =>
      getLaunchPrompt(this.services, this.services.registry.agent(agentId), request.params.name),
    );
    server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: (this.toolList ??= this.catalogue.map(toolDefinition)) }));
    onToolCall(server, async (request, extra): Promise<CallToolResult> => {
      const { services } = this;
      const name = request.params.name;
      const primitive = typeof name === 'string' ? this.byName.get(name) : undefined;
      const caller = services.registry.agent(agentId);
      if (!primitive || !caller) {
        const error = !caller
          ? new DomainError('internal_error', 'the calling agent is no longer registered')
          : new DomainError('invalid_input', `name: no tool named ${(JSON.stringify(name) ?? 'undefined').slice(0, 100)}`, { field: 'name' });
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
          await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress: ++progress, message } });
        },
      });
      if (!result.ok) return errorResult(result.error);
      return { content: [{ type: 'text', text: JSON.stringify(result.output) }], structuredContent: result.output };
    });
    return server;
  }

  private add(session: McpSession): void {
    this.sessions.set(session.id, session);
    let set = this.byAgent.get(session.agentId);
    if (!set) this.byAgent.set(session.agentId, (set = new Set()));
    set.add(session);
    this.sessionsChanged(session.agentId);
  }

  private readonly sessionWatchers = new Map<string, Set<() => void>>();

  /** How many MCP sessions the agent has open: the wake relay rings once its client is connected. */
  sessionsOf(agentId: string): number {
    return this.byAgent.get(agentId)?.size ?? 0;
  }

  /** Calls `listener` whenever one of the agent's sessions opens or closes. */
  watchSessions(agentId: string, listener: () => void): () => void {
    let set = this.sessionWatchers.get(agentId);
    if (!set) this.sessionWatchers.set(agentId, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.sessionWatchers.get(agentId) === set) this.sessionWatchers.delete(agentId);
    };
  }

  private sessionsChanged(agentId: string): void {
    for (const listener of [...(this.sessionWatchers.get(agentId) ?? [])]) listener();
  }

  private remove(id: string): void {
    const session = this.sessions.get(id);
    if (!session) return;
    this.sessions.delete(id);
    const set = this.byAgent.get(session.agentId);
    set?.delete(session);
    if (set && set.size === 0) this.byAgent.delete(session.agentId);
    this.sessionsChanged(session.agentId);
  }

  /** Routes for /mcp, /sse and /messages (auth has already run and set req.principal). */
  mount(app: Express, auth: Authenticator): void {
    // The token first, the body after: a request without a valid token costs no body read.
    const agentOnly = thenBody(auth.require('agent'));

    const streamable = async (req: Request, res: Response) => {
      const agentId = principalAgent(req);
      if (req.method === 'POST') this.trackPost(res);
      const sessionId = req.header('mcp-session-id');
      if (sessionId) {
        const session = this.sessions.get(sessionId);
        if (!session) return jsonRpcError(res, 404, -32001, 'Session not found; initialize a new session');
        if (session.agentId !== agentId) return forbidden(res);
        const connection = new Connection(res);
        session.open++;
        session.lastSeen = this.now();
        this.touch(session);
        res.on('close', () => {
          session.open--;
          session.lastSeen = this.now();
        });
        await requestConnection.run(connection, () =>
          (session.transport as StreamableHTTPServerTransport).handleRequest(req, res, req.body),
        );
        return;
      }
      if (req.method !== 'POST' || !isInitializeRequest(req.body)) {
        return jsonRpcError(res, 400, -32000, 'Bad Request: send an initialize request first, or an Mcp-Session-Id header');
      }
      const release = this.reserveSession(agentId, res);
      if (!release) return;
      try {
        const { config, clock } = this.services;
        const eventStore = new SessionEventStore(
          { maxEvents: config.resumeMaxEvents, maxBytes: config.resumeMaxBytes, maxAgeS: config.resumeS },
          () => clock.now(),
        );
        const server = this.newServer(agentId, eventStore);
        const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => this.add({ id, agentId, server, transport, open: 0, lastSeen: this.now() }),
          eventStore,
          retryInterval: RESUME_RETRY_MS,
        });
        transport.onclose = () => {
          eventStore.close();
          if (transport.sessionId) this.remove(transport.sessionId);
        };
        await server.connect(transport);
        await transport.handleRequest(req, res, req.body);
      } finally {
        release();
      }
    };
    app.post('/mcp', agentOnly, streamable);
    app.get('/mcp', agentOnly, streamable);
    app.delete('/mcp', agentOnly, streamable);

    app.get('/sse', agentOnly, async (req, res) => {
      const agentId = principalAgent(req);
      const release = this.reserveSession(agentId, res);
      if (!release) return;
      const transport = new FlushingSSEServerTransport('/messages', res);
      const server = this.newServer(agentId, transport);
      const id = transport.sessionId;
      this.add({ id, agentId, server, transport, open: 1, lastSeen: this.now() });
      release();
      transport.onclose = () => this.remove(id);
      res.on('close', () => this.remove(id));
      await server.connect(transport);
    });
    app.post('/messages', agentOnly, async (req, res) => {
      const id = typeof req.query.sessionId === 'string' ? req.query.sessionId : '';
      const session = this.sessions.get(id);
      if (!session || !(session.transport instanceof FlushingSSEServerTransport)) {
        return void res.status(404).json({ error: 'unknown_session', message: 'no SSE session with that sessionId; open GET /sse first' });
      }
      if (session.agentId !== principalAgent(req)) return forbidden(res);
      await session.transport.handlePostMessage(req, res, req.body);
    });
  }

  // ---- The per-agent session cap (session-cap.ts) ----------------------------------------
  // Each agent's set is kept in least-recently-used order: touch moves a session to the end.

  private touch(session: McpSession): void {
    const set = this.byAgent.get(session.agentId);
    if (!set) return;
    set.delete(session);
    set.add(session);
  }

  /** A reservation for a new session of `agentId` (its release), or null once refused with 429. */
  private reserveSession(agentId: string, res: Response): (() => void) | null {
    const reserved = this.cap.reserve(agentId, [...(this.byAgent.get(agentId) ?? [])], (idle) => {
      this.remove(idle.id);
      void idle.server.close().catch(() => undefined);
    });
    if (typeof reserved === 'function') return reserved;
    res.status(429).json({ error: reserved.code, message: reserved.message, details: reserved.details });
    return null;
  }

  private trackPost(res: Response): void {
    this.openPosts++;
    res.once('close', () => {
      this.openPosts--;
      if (this.openPosts === 0) for (const resolve of this.postsDrained.splice(0)) resolve();
    });
  }

  /** Resolves when every POST has its response written (or after `timeoutMs`). */
  drained(timeoutMs: number): Promise<void> {
    if (this.openPosts === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.postsDrained.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  async closeAll(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    const all = [...this.sessions.values()];
    await Promise.allSettled(all.map((s) => s.server.close()));
    this.sessions.clear();
    this.byAgent.clear();
  }
}

function principalAgent(req: Request): string {
  const p = req.principal;
  if (p?.kind !== 'agent') throw new Error('agent route reached without an agent principal');
  return p.agentId;
}

function errorResult(error: DomainError): CallToolResult {
  return { isError: true, content: [{ type: 'text', text: JSON.stringify(error.toJSON()) }] };
}

function jsonRpcError(res: Response, status: number, code: number, message: string): void {
  res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
}

function forbidden(res: Response): void {
  res.status(403).json({ error: 'session_forbidden', message: 'this MCP session belongs to another agent; open your own session with your token' });
}
