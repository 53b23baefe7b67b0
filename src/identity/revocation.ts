/**
 * When a token counts as revoked (docs/security.md, "Revocation"): by generation, not by
 * clock. Each revocation is an event, and the events reduce into a generation (per agent: its
 * `agent.tokens_revoked` events; for spawner tokens: the `spawner_tokens.revoked` events); a
 * token carries the generation it was minted in (its `gen` claim; absent on older tokens: 0)
 * and works only while that is the current one. The order is the log's, so no replica's clock,
 * ahead, behind or stepped back, can let a revoked token through.
 */

/** Whether a token of generation `gen` works now that the current one is `current`. */
export function currentGeneration(gen: number, current: number): boolean {
  // Equal, not "at least": a token of a later generation than the log knows (minted from
  // a revocation that a crash kept off the disk) would otherwise survive the next revocation.
  return gen === current;
}
