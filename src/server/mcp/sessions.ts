import type { Response } from 'express';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { DomainError } from '../../domain/errors.js';
import { arrivalNotice, deliveredText } from '../../domain/messages.js';
import type { StoredEvent } from '../../events/catalogue.js';
import type { InboxMessage } from '../../registry/state.js';
import type { Services } from '../../runtime/services.js';
import type { AgentPrincipal, AuthRefusal, Authenticator } from '../http/auth.js';
import { SessionCap } from './session-cap.js';

/**
 * The open MCP sessions, by id and by agent: what reaches every session of an agent (a
 * wake-up, its termination), idle expiry, the per-agent cap, and the POSTs shutdown waits
 * for. The routes (routes.ts) open sessions on it and close them through it.
 */

export interface McpSession {
  id: string;
  agentId: string;
  server: Server;
  transport: Transport;
  /** Requests (and GET streams) open on it, and when it last had one (clock seconds): for idle expiry. */
  open: number;
  lastSeen: number;
  /**
   * The revocation generation of the oldest token any of its requests came with: a
   * revocation that refuses that token closes the session, and every stream opened on it.
   */
  tokenGen: number;
}

export class SessionRegistry {
  private readonly sessions = new Map<string, McpSession>();
  private readonly byAgent = new Map<string, Set<McpSession>>();
  /** POSTs whose response is not yet written: shutdown lets them finish first. */
  private openPosts = 0;
  private postsDrained: Array<() => void> = [];
  private sweeper: NodeJS.Timeout | null = null;
  private readonly cap: SessionCap;

  constructor(
    protected readonly services: Services,
    private readonly auth: Authenticator,
  ) {
    this.cap = new SessionCap(services.config.maxSessionsPerAgent);
  }

  /**
   * Durable observer: a terminated agent's sessions end with it (its token no longer opens
   * new ones); so do the sessions a revoked token of the agent used. (One that registers
   * after the revocation is applied is refused by `add`.)
   */
  onDurable(events: readonly StoredEvent[]): void {
    for (const e of events) {
      if (e.event !== 'terminate.consumed' && e.event !== 'agent.tokens_revoked') continue;
      const gen = this.services.registry.agent(e.agent_id)?.tokens_gen;
      for (const session of [...(this.byAgent.get(e.agent_id) ?? [])]) {
        if (e.event === 'agent.tokens_revoked' && session.tokenGen === gen) continue;
        void session.server.close().catch(() => undefined);
      }
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
          // A doorbell, not the words: Claude Code wraps a channel's content in its own tags.
          params: {
            content: arrivalNotice(this.services.registry.state, message),
            meta: { message_id: message.message_id, from: message.from },
          },
        })
        .catch(() => undefined);
      session.server
        .sendLoggingMessage({
          level: 'info',
          logger: 'beidou.inbox',
          data: { message_id: message.message_id, from: message.from, text },
        })
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
   * Lists a new session of `principal`'s agent, last seen now; unless its token no longer
   * stands (revoked, or its agent terminated, while the session was being set up): then
   * nothing is listed and the refusal is returned, for the caller to close what it made.
   */
  add(principal: AgentPrincipal, fields: Omit<McpSession, 'lastSeen' | 'agentId' | 'tokenGen'>): AuthRefusal | null {
    const refusal = this.auth.recheck(principal);
    if (refusal) return refusal;
    const session: McpSession = {
      ...fields,
      agentId: principal.agentId,
      tokenGen: principal.gen,
      lastSeen: this.now(),
    };
    this.sessions.set(session.id, session);
    let set = this.byAgent.get(session.agentId);
    if (!set) this.byAgent.set(session.agentId, (set = new Set()));
    set.add(session);
    this.sessionsChanged(session.agentId);
    return null;
  }

  /** A request (or GET stream) opened on the session: it is seen now, and most recently used. */
  requestOpened(session: McpSession, tokenGen: number): void {
    this.usedBy(session, tokenGen);
    session.open++;
    session.lastSeen = this.now();
    this.touch(session);
  }

  /** A request came with a token of generation `tokenGen`: the session holds what the oldest of them may see. */
  usedBy(session: McpSession, tokenGen: number): void {
    session.tokenGen = Math.min(session.tokenGen, tokenGen);
  }

  requestClosed(session: McpSession): void {
    session.open--;
    session.lastSeen = this.now();
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

  remove(id: string): void {
    const session = this.sessions.get(id);
    if (!session) return;
    this.sessions.delete(id);
    const set = this.byAgent.get(session.agentId);
    set?.delete(session);
    if (set && set.size === 0) this.byAgent.delete(session.agentId);
    this.sessionsChanged(session.agentId);
  }

  // ---- The per-agent session cap (session-cap.ts) ----------------------------------------
  // Each agent's set is kept in least-recently-used order: touch moves a session to the end.

  private touch(session: McpSession): void {
    const set = this.byAgent.get(session.agentId);
    if (!set) return;
    set.delete(session);
    set.add(session);
  }

  /** A reservation for a new session of `agentId` (its release), or the refusal (429). */
  reserve(agentId: string): (() => void) | DomainError {
    return this.cap.reserve(agentId, [...(this.byAgent.get(agentId) ?? [])], (idle) => {
      this.remove(idle.id);
      void idle.server.close().catch(() => undefined);
    });
  }

  // ---- Shutdown ---------------------------------------------------------------------------

  trackPost(res: Response): void {
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
