import { settingName } from '../config.js';
import { rateLimited } from '../domain/errors.js';
import type { EventDraft } from '../events/catalogue.js';
import type { WriteMeter } from '../registry/registry.js';
import type { Clock } from '../util/clock.js';
import { RateWindows } from '../util/rate-window.js';
import { serialiseDrafts, serialisedBytes } from '../store/codec.js';

/**
 * Each agent's write budget (BEIDOU_MAX_WRITE_BYTES_PER_MINUTE, docs/security.md): the
 * bytes its calls add to the log, over a minute that slides with time. Once an agent has
 * written its budget its calls are refused `rate_limited` before anything is written (the
 * tool wrapper asks `check` before a call does anything, the registry `admit` at its
 * commit), until enough of the last minute's writing has drained; the call that crosses
 * the budget is written whole. Kept in this replica's memory only: a restart or a
 * takeover starts every agent afresh, which costs at most one more minute's budget.
 */
export class WriteBudget implements WriteMeter {
  private readonly windows: RateWindows;

  constructor(clock: Clock, maxBytesPerMinute: number) {
    this.windows = new RateWindows(clock, maxBytesPerMinute, 60);
  }

  /** Agents with a record (those that wrote within the last minute, about): what the budget holds in memory. */
  get tracked(): number {
    return this.windows.size;
  }

  /** Refuses (`rate_limited`) an agent that has written its budget within the last minute. */
  check(agentId: string): void {
    const decision = this.windows.decide(agentId);
    if (decision.admitted) return;
    const max = this.windows.max;
    throw rateLimited(
      decision.retryAfterS,
      settingName('maxWriteBytesPerMinute'),
      `your calls have written their budget of ${max} bytes to the log within the last minute, so this one wrote nothing; ` +
        `wait ${decision.retryAfterS} s, and write less: a call repeated in a loop is the usual cause`,
    );
  }

  /** Whether the agent is still within its budget (what it writes next is taken whole). */
  within(agentId: string): boolean {
    return this.windows.decide(agentId).admitted;
  }

  admit(agentId: string, bytes: number): void {
    this.check(agentId);
    this.windows.charge(agentId, bytes);
  }

  charge(agentId: string, bytes: number): void {
    this.windows.charge(agentId, bytes);
  }

  /**
   * Decides and charges a commit's bytes now, in one synchronous step, for a call that must
   * do something else (a plan file) before it commits: refused here, it has done nothing;
   * admitted, it commits `drafts` without a writer (already paid), so no later refusal can
   * leave its side effect behind. Concurrent calls cannot all pass: the first one charges.
   */
  reserve(agentId: string, drafts: readonly EventDraft[]): void {
    this.admit(agentId, serialisedBytes(serialiseDrafts(drafts, () => undefined)));
  }
}
