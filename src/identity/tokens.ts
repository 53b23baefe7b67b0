import { randomUUID } from 'node:crypto';
// The two JWT modules and the errors, not jose's index (which loads JWE, JWKS and key
// generation too: some 40 modules a start does not need).
import * as joseErrors from 'jose/errors';
import { jwtVerify } from 'jose/jwt/verify';
import { SignJWT } from 'jose/jwt/sign';
import { systemClock, type Clock } from '../util/clock.js';

/**
 * Agent and spawner tokens: JWTs signed HS256. Claims (docs/api.md, Authentication): `sub` (the agent id,
 * or the spawner's id), `task_id` (agents), `task_ids` (a spawner limited to those tasks), `kind`,
 * `gen` (the revocation generation it was minted in: identity/revocation.ts), `iss` = `aud` =
 * "beidou", `iat`, `exp`, `jti`. Verified tokens are cached by their string until `exp`, since
 * verification is on the hot path of every tool call; revocation is checked after the cache, by
 * the caller (server/http/auth.ts), against the state.
 */

export const ISSUER = 'beidou';
export const AUDIENCE = 'beidou';

export type TokenKind = 'agent' | 'spawner';

export interface TokenClaims {
  sub: string;
  kind: TokenKind;
  task_id?: string;
  /** A spawner token limited to these tasks' launches (absent: any task). */
  task_ids?: string[];
  jti: string;
  /** The revocation generation it was minted in (0 for tokens minted before generations). */
  gen: number;
  iat: number;
  exp: number;
}

/** What a mint is told: the revocation generation of what the token is for (its agent's, or the spawner tokens'). */
export interface MintOptions {
  gen?: number;
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

  async mintAgent(agentId: string, taskId: string, opts: MintOptions = {}): Promise<string> {
    return this.mint({ kind: 'agent', task_id: taskId }, agentId, opts);
  }

  /** `taskIds`: the tasks whose launches it may take (null: any). */
  async mintSpawner(
    spawnerId: string,
    taskIds: readonly string[] | null = null,
    opts: MintOptions = {},
  ): Promise<string> {
    return this.mint({ kind: 'spawner', ...(taskIds ? { task_ids: [...taskIds] } : {}) }, spawnerId, opts);
  }

  private async mint(claims: Record<string, unknown>, subject: string, opts: MintOptions): Promise<string> {
    // The clock dates it for people and expiry only: revocation goes by `gen`.
    const iat = Math.floor(this.clock.now());
    return new SignJWT({ ...claims, gen: opts.gen ?? 0 })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(subject)
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt(iat)
      .setExpirationTime(Math.floor(iat) + Math.floor(this.ttlSeconds))
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
    const { sub, kind, task_id, task_ids, jti, iat, exp, gen } = payload as Record<string, unknown>;
    if (typeof sub !== 'string' || typeof jti !== 'string' || typeof exp !== 'number' || typeof iat !== 'number') {
      throw new TokenError('invalid_claims', 'the token lacks sub, jti, iat or exp');
    }
    if (gen !== undefined && !(Number.isSafeInteger(gen) && (gen as number) >= 0)) {
      throw new TokenError('invalid_claims', 'the token\'s "gen" claim must be a whole number, 0 or more');
    }
    if (kind !== 'agent' && kind !== 'spawner') {
      throw new TokenError('invalid_claims', 'the token\'s "kind" claim must be "agent" or "spawner"');
    }
    if (kind === 'agent' && typeof task_id !== 'string') {
      throw new TokenError('invalid_claims', 'an agent token must carry task_id');
    }
    if (
      task_ids !== undefined &&
      (kind !== 'spawner' || !Array.isArray(task_ids) || !task_ids.every((t) => typeof t === 'string'))
    ) {
      throw new TokenError(
        'invalid_claims',
        'the token\'s "task_ids" claim must be a list of task ids, on a spawner token',
      );
    }
    const claims: TokenClaims = {
      sub,
      kind,
      jti,
      gen: (gen as number | undefined) ?? 0,
      iat,
      exp,
      ...(typeof task_id === 'string' ? { task_id } : {}),
      ...(task_ids !== undefined ? { task_ids: task_ids as string[] } : {}),
    };
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
    this.cache.set(token, claims);
    return claims;
  }
}
