import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { agentTokenStanding, spawnerTokenStanding } from '../../domain/revocation.js';
import { SYSTEM_LOG } from '../../events/catalogue.js';
import { safeEqual } from '../../identity/secrets.js';
import { TokenError, type TokenClaims, type TokenService } from '../../identity/tokens.js';
import type { Registry } from '../../registry/registry.js';
import { jsonBody } from './body.js';

/**
 * Who is calling, from the verified bearer token. Never from a request body. `gen`: the
 * token's revocation generation, so what it opened (a session, a stream) ends when a
 * revocation reaches it and nothing registers for it after one; `taskIds`: the tasks a
 * limited spawner token may take (null: any).
 */
export type Principal =
  | { kind: 'admin' }
  | { kind: 'agent'; agentId: string; taskId: string; gen: number }
  | { kind: 'spawner'; spawnerId: string; taskIds: string[] | null; gen: number };

export type AgentPrincipal = Extract<Principal, { kind: 'agent' }>;

export type AuthRefusalCode =
  | 'missing_token'
  | 'invalid_token'
  | 'token_expired'
  | 'invalid_claims'
  | 'wrong_token_kind'
  | 'unknown_agent'
  | 'agent_terminated'
  | 'token_revoked'
  | 'task_quarantined'
  | 'system_log_quarantined';

export class AuthRefusal extends Error {
  constructor(
    readonly code: AuthRefusalCode,
    message: string,
    /** 401, but 503 while the server cannot tell (the system log quarantined): not the token's fault, try again later. */
    readonly status: 401 | 503 = 401,
  ) {
    super(message);
  }
}

declare module 'express-serve-static-core' {
  interface Request {
    principal?: Principal;
  }
}

export class Authenticator {
  constructor(
    private readonly adminToken: string,
    private readonly tokens: TokenService,
    private readonly registry: Registry,
  ) {}

  async authenticate(header: string | undefined): Promise<Principal> {
    const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    if (!match) throw new AuthRefusal('missing_token', 'send Authorization: Bearer <token>');
    const token = match[1]!;
    // Admin tokens are opaque (BEIDOU_ADMIN_TOKEN may contain dots); a JWT always has two dots.
    if (safeEqual(token, this.adminToken)) return { kind: 'admin' };
    if (!token.includes('.')) throw new AuthRefusal('invalid_token', 'the token is not a valid admin or agent token');
    let claims: TokenClaims;
    try {
      claims = await this.tokens.verify(token);
    } catch (err) {
      if (err instanceof TokenError) throw new AuthRefusal(err.code, err.message);
      throw err;
    }
    const principal: Principal =
      claims.kind === 'spawner'
        ? { kind: 'spawner', spawnerId: claims.sub, taskIds: claims.task_ids ?? null, gen: claims.gen }
        : { kind: 'agent', agentId: claims.sub, taskId: claims.task_id!, gen: claims.gen };
    // Revocation is read from the state on every request, after the cache of verified tokens.
    const refusal = this.recheck(principal);
    if (refusal) throw refusal;
    return principal;
  }

  /**
   * Whether `principal` still stands, against the state as it is now: a token may have been
   * revoked (or its agent terminated) since its request came in, while its body was read,
   * or while what it opens was being set up. Null: it stands.
   */
  recheck(principal: Principal): AuthRefusal | null {
    const { registry } = this;
    if (principal.kind === 'admin') return null;
    if (principal.kind === 'spawner') {
      const standing = spawnerTokenStanding(registry.state, principal.gen, registry.quarantined.has(SYSTEM_LOG));
      if (standing === 'token_revoked')
        return new AuthRefusal(
          'token_revoked',
          'this spawner token was revoked; mint a new one (beidou token --spawner)',
        );
      if (standing === 'system_log_quarantined')
        return new AuthRefusal(
          'system_log_quarantined',
          `the system log (${SYSTEM_LOG}), which holds the revocations of spawner tokens, is quarantined (it failed verification): no spawner token is accepted until it is repaired (beidou doctor --repair while the server is stopped)`,
          503,
        );
      return null;
    }
    const { agentId, taskId } = principal;
    if (registry.quarantined.has(taskId)) {
      return new AuthRefusal(
        'task_quarantined',
        `task ${taskId} is quarantined (its event log failed verification); its agents cannot act until it is repaired`,
      );
    }
    const agent = registry.agent(agentId);
    switch (agentTokenStanding(agent?.task_id === taskId ? agent : undefined, principal.gen)) {
      case 'unknown_agent':
        // An archived task's agents are all terminated: refused as they were before it left
        // memory. (Looked up only for an agent not in memory: a live one is never archived.)
        if (registry.archivedAgents.get(agentId) === taskId)
          return new AuthRefusal('agent_terminated', `agent ${agentId} has been terminated; its token no longer works`);
        return new AuthRefusal('unknown_agent', `no agent ${agentId} is registered in task ${taskId}`);
      case 'agent_terminated':
        return new AuthRefusal('agent_terminated', `agent ${agentId} has been terminated; its token no longer works`);
      case 'token_revoked':
        return new AuthRefusal(
          'token_revoked',
          `this token of agent ${agentId} was revoked; its spawner gets a fresh one, or mint one (beidou token --agent)`,
        );
      default:
        return null;
    }
  }

  /** Express middleware admitting only the given principal kinds; refusals are 401 JSON. */
  require(...kinds: Principal['kind'][]) {
    return async (req: Request, res: Response, next: NextFunction): Promise<void> => {
      let principal: Principal;
      try {
        principal = await this.authenticate(req.headers.authorization);
      } catch (err) {
        if (err instanceof AuthRefusal) return refuse(res, err);
        return next(err);
      }
      if (!kinds.includes(principal.kind)) {
        return refuse(
          res,
          new AuthRefusal(
            'wrong_token_kind',
            `this endpoint takes ${kinds.join(' or ')} tokens, not ${principal.kind} tokens`,
          ),
        );
      }
      req.principal = principal;
      next();
    };
  }

  /**
   * The door of every authenticated route: the token from the headers (no body read before
   * it passes), then the body, then the token again, since a slow body can outlast a
   * revocation. One middleware, so routes keep their typing.
   */
  admit(...kinds: Principal['kind'][]): RequestHandler {
    const door = this.require(...kinds);
    return (req, res, next) =>
      void door(req, res, (err?: unknown) => {
        if (err !== undefined) return next(err);
        jsonBody(req, res, (bodyErr?: unknown) => {
          if (bodyErr !== undefined) return next(bodyErr);
          const refusal = this.recheck(req.principal!);
          if (refusal) return refuse(res, refusal);
          next();
        });
      });
  }

  /** For a route about to act for its principal after a wait: throws the refusal (the app answers it) if it no longer stands. */
  assertStanding(req: Request): void {
    const refusal = this.recheck(req.principal!);
    if (refusal) throw refusal;
  }
}

export function refuse(res: Response, { code, message, status }: AuthRefusal): void {
  // RFC 6750: a request without credentials gets no error attribute.
  const challenge =
    code === 'missing_token'
      ? 'Bearer realm="beidou"'
      : `Bearer realm="beidou", error="invalid_token", error_description="${code}"`;
  // Refused (maybe before its body is read): end the connection, whatever the client still claims to send.
  res.status(status).set({ Connection: 'close' });
  if (status === 401) res.set('WWW-Authenticate', challenge);
  res.once('finish', () => res.req.socket.destroy());
  res.json({ error: code, message });
}
