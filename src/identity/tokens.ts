import { randomUUID } from 'node:crypto';
// The two JWT modules and the errors, not jose's index (which loads JWE, JWKS and key
// generation too: some 40 modules a start does not need).
import * as joseErrors from 'jose/errors';
import { jwtVerify } from 'jose/jwt/verify';
import { SignJWT } from 'jose/jwt/sign';
import { systemClock, type Clock } from '../util/clock.js';

/**
 * Agent and spawner tokens: JWTs signed HS256. Claims (docs/api.md, Authentication): `sub` (the agent id,
 * or the spawner's id), `task_id` (agents), `kind`, `iss` = `aud` = "beidou", `iat`, `exp`,
 * `jti`. Verified tokens are cached by their string until `exp`, since verification is on
 * the hot path of every tool call.
 */

export const ISSUER = 'beidou';
export const AUDIENCE = 'beidou';

export type TokenKind = 'agent' | 'spawner';

export interface TokenClaims {
  sub: string;
  kind: TokenKind;
  task_id?: string;
  jti: string;
  exp: number;
}

export type TokenRefusal = 'invalid_token' | 'token_expired' | 'invalid_claims';

export class TokenError extends Error {
  constructor(
    readonly code: TokenRefusal,
    message: string,
  ) {
    super(message);
  }
}

const CACHE_LIMIT = 50_000;

export class TokenService {
  private readonly key: Uint8Array;
  private readonly cache = new Map<string, TokenClaims>();

  constructor(
    secret: string,
    private readonly ttlSeconds: number,
    private readonly clock: Clock = systemClock,
  ) {
    this.key = new TextEncoder().encode(secret);
  }

  async mintAgent(agentId: string, taskId: string): Promise<string> {
    return this.mint({ kind: 'agent', task_id: taskId }, agentId);
  }

  async mintSpawner(spawnerId: string): Promise<string> {
    return this.mint({ kind: 'spawner' }, spawnerId);
  }

  private async mint(claims: Record<string, string>, subject: string): Promise<string> {
    const iat = Math.floor(this.clock.now());
    return new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(subject)
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt(iat)
      .setExpirationTime(iat + Math.floor(this.ttlSeconds))
      .setJti(randomUUID())
      .sign(this.key);
  }

  /** Verifies signature (HS256 only, so `alg: none` fails), `iss`, `aud`, `exp` and shape. */
  async verify(token: string): Promise<TokenClaims> {
    const cached = this.cache.get(token);
    if (cached) {
      if (cached.exp > this.clock.now()) return cached;
      this.cache.delete(token);
      throw new TokenError('token_expired', 'the token has expired; ask for a fresh one');
    }
    let payload: Awaited<ReturnType<typeof jwtVerify>>['payload'];
    try {
      ({ payload } = await jwtVerify(token, this.key, {
        algorithms: ['HS256'],
        issuer: ISSUER,
        audience: AUDIENCE,
        currentDate: new Date(this.clock.now() * 1000),
      }));
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) {
        throw new TokenError('token_expired', 'the token has expired; ask for a fresh one');
      }
      if (err instanceof joseErrors.JWTClaimValidationFailed) {
        throw new TokenError('invalid_claims', `the token's "${err.claim}" claim is not accepted here`);
      }
      throw new TokenError('invalid_token', 'the token is malformed or its signature does not verify');
    }
    const { sub, kind, task_id, jti, exp } = payload as Record<string, unknown>;
    if (typeof sub !== 'string' || typeof jti !== 'string' || typeof exp !== 'number') {
      throw new TokenError('invalid_claims', 'the token lacks sub, jti or exp');
    }
    if (kind !== 'agent' && kind !== 'spawner') {
      throw new TokenError('invalid_claims', 'the token\'s "kind" claim must be "agent" or "spawner"');
    }
    if (kind === 'agent' && typeof task_id !== 'string') {
      throw new TokenError('invalid_claims', 'an agent token must carry task_id');
    }
    const claims: TokenClaims = { sub, kind, jti, exp, ...(typeof task_id === 'string' ? { task_id } : {}) };
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
    this.cache.set(token, claims);
    return claims;
  }
}
