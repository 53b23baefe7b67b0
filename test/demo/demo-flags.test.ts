import { describe, expect, it } from 'vitest';
import { parseDemoFlags } from '../../src/demo/main.js';

/**
 * `npm run demo -- ...`: one parser for the plain and the chaos demo; each flag on its own,
 * together, and a refusal naming the usage. test/demo/demo.test.ts runs the demo with them.
 */
describe('demo flags', () => {
  it('parses --keep and --slow without --chaos, and all of them together', () => {
    expect(parseDemoFlags([])).toEqual({ chaos: false, keep: false, slow: false, seed: undefined });
    expect(parseDemoFlags(['--keep'])).toEqual({ chaos: false, keep: true, slow: false, seed: undefined });
    expect(parseDemoFlags(['--slow'])).toEqual({ chaos: false, keep: false, slow: true, seed: undefined });
    expect(parseDemoFlags(['--chaos', '--keep', '--slow', '--seed', '42'])).toEqual({
      chaos: true,
      keep: true,
      slow: true,
      seed: 42,
    });
    expect(parseDemoFlags(['--seed=7', '--chaos'])).toEqual({ chaos: true, keep: false, slow: false, seed: 7 });
  });

  it('refuses an unknown flag or a bad seed', () => {
    expect(() => parseDemoFlags(['--fast'])).toThrow(/unknown flag --fast; usage: npm run demo -- \[--chaos\]/);
    expect(() => parseDemoFlags(['--seed', 'x'])).toThrow(/--seed needs a whole number/);
    expect(() => parseDemoFlags(['--seed'])).toThrow(/--seed needs a whole number \(got nothing\)/);
    expect(() => parseDemoFlags(['--seed', '42', '--keep'])).toThrow(/--seed replays a chaos run: give --chaos too/);
  });
});
