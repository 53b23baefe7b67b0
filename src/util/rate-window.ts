import type { Clock } from './clock.js';

/**
 * A rate limit per key (an agent's bytes written for BEIDOU_MAX_WRITE_BYTES_PER_MINUTE; the
 * same shape serves a count of messages): each key may spend `max` units per window, and
 * what it spent drains away continuously at `max` per window (a token bucket), so the
 * window slides with time instead of resetting at fixed instants. A key is refused once it
 * has spent its budget; the call that crosses it is admitted whole (it cannot be cut), so
 * a key spends at most the budget and one call in any window, and the budget over time.
 *
 * The decision is pure (`spentAt`, `rateDecision`); `RateWindows` keeps one record of two
 * numbers per key that has spent anything within a window, and forgets keys that are back
 * to nothing, so its memory is bounded by the keys active within one window.
 */

/** What a key had spent at `at` (Unix seconds). */
export interface Spent {
  spent: number;
  at: number;
}

/** What `before` has drained to by `now`, at `perS` units a second. */
export function spentAt(before: Spent | undefined, now: number, perS: number): number {
  if (!before) return 0;
  return Math.max(0, before.spent - Math.max(0, now - before.at) * perS);
}

export type RateDecision = { admitted: true } | { admitted: false; retryAfterS: number };

/** Refused while `spent` is at or past `max`, with the whole seconds until it is below it again (at least 1). */
export function rateDecision(spent: number, max: number, perS: number): RateDecision {
  if (spent < max) return { admitted: true };
  return { admitted: false, retryAfterS: Math.max(1, Math.ceil((spent - max) / perS + 1e-9)) };
}

/** A sweep of drained keys runs once the map has grown past this many (and past twice its last size). */
const SWEEP_FROM = 1024;

export class RateWindows {
  private readonly spent = new Map<string, Spent>();
  private sweepAt = SWEEP_FROM;
  private readonly perS: number;

  constructor(
    private readonly clock: Clock,
    /** Units a key may spend per window. */
    readonly max: number,
    readonly windowS = 60,
  ) {
    this.perS = max / windowS;
  }

  /** How many keys have a record (for the bench and the tests: the bound on memory). */
  get size(): number {
    return this.spent.size;
  }

  /** What `key` has spent within the window, as of now. */
  spentBy(key: string): number {
    return spentAt(this.spent.get(key), this.clock.now(), this.perS);
  }

  /** Whether `key` may spend now: refused (and how long to wait) once it has spent its budget. */
  decide(key: string): RateDecision {
    return rateDecision(this.spentBy(key), this.max, this.perS);
  }

  /** Counts `amount` against `key` (after `decide` admitted it). */
  charge(key: string, amount: number): void {
    if (amount <= 0) return;
    const now = this.clock.now();
    this.spent.set(key, { spent: spentAt(this.spent.get(key), now, this.perS) + amount, at: now });
    if (this.spent.size > this.sweepAt) this.sweep(now);
  }

  /** Forgets every key whose spending has drained to nothing. */
  private sweep(now: number): void {
    for (const [key, record] of this.spent) if (spentAt(record, now, this.perS) === 0) this.spent.delete(key);
    this.sweepAt = Math.max(SWEEP_FROM, 2 * this.spent.size);
  }
}
