/**
 * When a token counts as revoked: pure arithmetic on times (clock seconds), to the
 * millisecond. A revocation refuses every token minted at or before its `before`; a token
 * minted after it is dated strictly later, even within the same millisecond (or under a clock
 * that has not moved), so "before now" never refuses the token handed out right after it.
 */

/** Milliseconds, the precision of a token's `iat` and of a revocation's `before`. */
const ms = (seconds: number) => Math.round(seconds * 1000);

/** Whether a token minted at `iat` is refused by a revocation at `before` (null: none). Inclusive. */
export function revokedBy(iat: number, before: number | null | undefined): boolean {
  return before !== null && before !== undefined && ms(iat) <= ms(before);
}

/**
 * The `iat` of a token minted at `now` after the revocation `after` (null: none): `now`, or a
 * millisecond past `after` when the clock has not moved past it.
 */
export function issuedAt(now: number, after: number | null | undefined): number {
  const floor = after === null || after === undefined ? -Infinity : ms(after) + 1;
  return Math.max(ms(now), floor) / 1000;
}

/**
 * The `before` of a revocation at `now` following `previous` (null: the first): every token
 * minted so far has `iat` at or below it, those minted after `previous` at `previous` + 1 ms included.
 */
export function revocationCutoff(now: number, previous: number | null | undefined): number {
  return issuedAt(now, previous);
}
