import { describe, expect, it } from 'vitest';
import { DomainError } from '../../src/domain/errors.js';
import { WriteBudget } from '../../src/runtime/write-budget.js';
import { RecentWindow } from '../../src/store/recent-window.js';
import { rateDecision, RateWindows, spentAt } from '../../src/util/rate-window.js';

/**
 * The write budget's pieces on their own, on a clock moved by hand: the pure decision, the
 * per-key windows (what they admit, when they admit again, how little they keep), the
 * refusal an agent sees, and the window of a live task's newest events a log holds.
 */

class HandClock {
  t = 1_800_000_000;
  now(): number {
    return this.t;
  }
}

describe('the rate decision', () => {
  it('admits below the max, refuses at and past it, and says how many whole seconds until it is below again', () => {
    expect(rateDecision(0, 100, 1)).toEqual({ admitted: true });
    expect(rateDecision(99.5, 100, 1)).toEqual({ admitted: true });
    expect(rateDecision(100, 100, 1)).toEqual({ admitted: false, retryAfterS: 1 });
    expect(rateDecision(130, 100, 1)).toEqual({ admitted: false, retryAfterS: 31 });
    expect(rateDecision(130.5, 100, 2)).toEqual({ admitted: false, retryAfterS: 16 });
  });

  it('drains what was spent at the rate, never below nothing, and a clock that goes back drains nothing', () => {
    expect(spentAt(undefined, 10, 1)).toBe(0);
    expect(spentAt({ spent: 50, at: 10 }, 30, 1)).toBe(30);
    expect(spentAt({ spent: 50, at: 10 }, 100, 1)).toBe(0);
    expect(spentAt({ spent: 50, at: 10 }, 5, 1)).toBe(50);
  });
});

describe('RateWindows', () => {
  it('admits a key until it has spent its budget (the crossing call whole), refuses until it drained, and keeps keys apart', () => {
    const clock = new HandClock();
    const windows = new RateWindows(clock, 600, 60); // 10 a second
    for (let i = 0; i < 5; i++) {
      expect(windows.decide('a').admitted).toBe(true);
      windows.charge('a', 140);
    }
    // 700 spent: the fifth call crossed the budget and was counted whole.
    expect(windows.spentBy('a')).toBe(700);
    expect(windows.decide('a')).toEqual({ admitted: false, retryAfterS: 11 });
    expect(windows.decide('b')).toEqual({ admitted: true });
    // 10 s on it has drained to exactly its budget: still refused, for one more second.
    clock.t += 10;
    expect(windows.spentBy('a')).toBe(600);
    expect(windows.decide('a')).toEqual({ admitted: false, retryAfterS: 1 });
    clock.t += 1;
    expect(windows.decide('a')).toEqual({ admitted: true });
    // Over time a key writes at the rate: a minute later it has room for a minute's worth.
    clock.t += 60;
    expect(windows.spentBy('a')).toBe(0);
  });

  it('keeps memory for the keys that spent within a window only: drained keys are forgotten as it grows', () => {
    const clock = new HandClock();
    const windows = new RateWindows(clock, 60, 60);
    for (let i = 0; i < 5_000; i++) {
      windows.charge(`agent-${i}`, 1);
      clock.t += 1; // each key's one unit drains in a second
    }
    // Sweeps run as the map doubles: it never holds much more than the keys of the last window.
    expect(windows.size).toBeLessThanOrEqual(1_025);
    expect(windows.spentBy('agent-0')).toBe(0);
  });
});

describe('WriteBudget', () => {
  it('refuses an agent past its bytes a minute with rate_limited, retry_after_s and the setting, and admits it again after', () => {
    const clock = new HandClock();
    const budget = new WriteBudget(clock, 6_000);
    budget.admit('ag_loop', 4_000);
    budget.admit('ag_loop', 4_000);
    let refusal: unknown;
    try {
      budget.admit('ag_loop', 10);
    } catch (err) {
      refusal = err;
    }
    expect(refusal).toBeInstanceOf(DomainError);
    const json = (refusal as DomainError).toJSON();
    expect(json).toMatchObject({
      error: 'rate_limited',
      details: { retry_after_s: 21, setting: 'BEIDOU_MAX_WRITE_BYTES_PER_MINUTE' },
    });
    expect(json.message).toMatch(/wait 21 s/);
    // The refused call was not counted: after the wait named, the agent writes again.
    expect(() => budget.check('ag_other')).not.toThrow();
    clock.t += 21;
    expect(() => budget.admit('ag_loop', 10)).not.toThrow();
  });
});

describe('RecentWindow', () => {
  it('holds the newest entries within its count and weight, drops the oldest, and still numbers every seq', () => {
    const window = new RecentWindow<string>(4, 10, (s) => s.length);
    for (const s of ['a', 'bb', 'ccc', 'dd', 'e', 'ffff']) window.push(s);
    // 6 pushed; the count bound keeps 4 (ccc..ffff, weight 10), which the weight bound allows.
    expect(window.last).toBe(6);
    expect(window.first).toBe(3);
    expect(window.held).toEqual({ count: 4, weight: 10 });
    expect([window.at(2), window.at(3), window.at(6), window.at(7)]).toEqual([undefined, 'ccc', 'ffff', undefined]);
    // One entry heavier than the bound leaves nothing held, and the numbering goes on.
    window.push('0123456789AB');
    expect(window.held).toEqual({ count: 0, weight: 0 });
    expect([window.first, window.last]).toEqual([8, 7]);
    window.push('x');
    expect([window.first, window.at(8)]).toEqual([8, 'x']);
  });
});
