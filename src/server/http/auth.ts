import type { NextFunction, Request, Response } from 'express';
import { revokedBy } from '../../identity/revocation.js';
import { safeEqual } from '../../identity/secrets.js';
import { TokenError, type TokenClaims, type TokenService } from '../../identity/tokens.js';
import type { Registry } from '../../registry/registry.js';

/**
 * Who is calling, from the verified bearer token. Never from a request body. `issuedAt`: the
 * token's `iat`, so what it opened (a session, a stream) ends when a revocation reaches it;
 * `taskIds`: the tasks a limited spawner token may take (null: any).
 */
export type Principal =
  | { kind: 'admin' }
  | { kind: 'agent'; agentId: string; taskId: string; issuedAt: number }
  | { kind: 'spawner'; spawnerId: string; taskIds: string[] | null; issuedAt: number };

export type AuthRefusalCode =
  | 'missing_token'
  | 'invalid_token'
  | 'token_expired'
  | 'invalid_claims'
  | 'wrong_token_kind'
  | 'unknown_agent'
  | 'agent_terminated'
  | 'token_revoked'
  | 'task_quarantined';

export class AuthRefusal extends Error {
  constructor(
    readonly code: AuthRefusalCode,
    message: string,
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
    // Revocation is read from the state on every request, after the cache of verified tokens.
    if (claims.kind === 'spawner') {
      if (revokedBy(claims.iat, this.registry.state.spawner_tokens_revoked_before)) {
        throw new AuthRefusal(
          'token_revoked',
          'this spawner token was revoked; mint a new one (beidou token --spawner)',
        );
      }
      return { kind: 'spawner', spawnerId: claims.sub, taskIds: claims.task_ids ?? null, issuedAt: claims.iat };
    }
    if (claims.task_id !== undefined && this.registry.quarantined.has(claims.task_id)) {
      throw new AuthRefusal(
        'task_quarantined',
        `task ${claims.task_id} is quarantined (its event log failed verification); its agents cannot act until it is repaired`,
      );
    }
    const agent = this.registry.agent(claims.sub);
    if (!agent || agent.task_id !== claims.task_id) {
      // An archived task's agents are all terminated: refused as they were before it left
      // memory. (Looked up only for an agent not in memory: a live one is never archived.)
      if (claims.task_id !== undefined && this.registry.archivedAgents.get(claims.sub) === claims.task_id) {
        throw new AuthRefusal('agent_terminated', `agent ${claims.sub} has been terminated; its token no longer works`);
      }
      throw new AuthRefusal('unknown_agent', `no agent ${claims.sub} is registered in task ${claims.task_id ?? '?'}`);
    }
    if (agent.terminate_consumed) {
      throw new AuthRefusal(
        'agent_terminated',
        `agent ${agent.agent_id} has been terminated; its token no longer works`,
      );
    }
    if (revokedBy(claims.iat, agent.tokens_revoked_before)) {
      throw new AuthRefusal(
        'token_revoked',
        `this token of agent ${agent.agent_id} was revoked; its spawner gets a fresh one, or mint one (beidou token --agent)`,
      );
    }
    return { kind: 'agent', agentId: agent.agent_id, taskId: agent.task_id, issuedAt: claims.iat };
  }

  /** Express middleware admitting only the given principal kinds; refusals are 401 JSON. */
  require(...kinds: Principal['kind'][]) {
    return async (req: Request, res: Response, next: NextFunction): Promise<void> => {
      let principal: Principal;
      try {
        principal = await this.authenticate(req.headers.authorization);
      } catch (err) {
        if (err instanceof AuthRefusal) return refuse(res, err.code, err.message);
        return next(err);
      }
      if (!kinds.includes(principal.kind)) {
        return refuse(
          res,
          'wrong_token_kind',
          `this endpoint takes ${kinds.join(' or ')} tokens, not ${principal.kind} tokens`,
        );
      }
      req.principal = principal;
      next();
    };
  }
}

export function refuse(res: Response, code: AuthRefusalCode, message: string): void {
  // RFC 6750: a request without credentials gets no error attribute.
  const challenge =
    code === 'missing_token'
      ? 'Bearer realm="beidou"'
      : `Bearer realm="beidou", error="invalid_token", error_description="${code}"`;
  // Refused before its body is read: end the connection, whatever the client still claims to send.
  res.status(401).set({ 'WWW-Authenticate': challenge, Connection: 'close' });
  res.once('finish', () => res.req.socket.destroy());
  res.json({ error: code, message });
}
