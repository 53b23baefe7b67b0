import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLogger, scrubFields, scrubTokens } from '../../src/util/logger.js';

/**
 * The token scrub (src/util/logger.ts) on hostile inputs: what it cuts out, compared with
 * the regular expression it replaced (whose backtracking made `eyJeyJ…` quadratic), and that
 * a log line's fields are scrubbed as well as its message. Its speed is in `npm run bench`
 * (section 10), not here.
 */

/** The pattern the scrub used to be; what it matches is still what the scan cuts. */
const OLD_PATTERN = /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}/g;
const oldScrub = (text: string) => text.replace(OLD_PATTERN, '[redacted-token]');

const JWT = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ194In0.c2lnbmF0dXJlLXNpZ25hdHVyZQ';

describe('scrubTokens', () => {
  it('cuts a JWT out wherever it sits, and leaves text without one as it is', () => {
    expect(scrubTokens(`Authorization: Bearer ${JWT}`)).toBe('Authorization: Bearer [redacted-token]');
    expect(scrubTokens(`${JWT}`)).toBe('[redacted-token]');
    expect(scrubTokens(`a${JWT}b c${JWT}.`)).toBe('a[redacted-token] c[redacted-token].');
    expect(scrubTokens(`"token":"${JWT}","next":"${JWT}"`)).toBe(
      '"token":"[redacted-token]","next":"[redacted-token]"',
    );
    const plain = 'nothing to hide here: eyJ alone, eyJabc.defg.hijk (a part too short)';
    expect(scrubTokens(plain)).toBe(plain);
  });

  it('on 200,000 characters of eyJ (one run, no dot) returns them unchanged', () => {
    const run = 'eyJ'.repeat(66_667);
    expect(scrubTokens(run)).toBe(run);
  });

  it('on a long dotted run of eyJ parts cuts the tokens the old pattern cut, and only those', () => {
    const dotted = Array.from({ length: 30_000 }, () => 'eyJabcd').join('.');
    const scrubbed = scrubTokens(dotted);
    // Three parts make a token, so the run becomes a token, then a dot, then a token…
    expect(scrubbed).toBe(oldScrub(dotted));
    expect(scrubbed.startsWith('[redacted-token].[redacted-token].')).toBe(true);
    expect(scrubbed).not.toMatch(/eyJabcd\.eyJabcd\.eyJabcd/);
    // Parts of one character: no token at all.
    const short = Array.from({ length: 30_000 }, () => 'eyJa').join('.');
    expect(scrubTokens(short)).toBe(short);
  });

  it('on a token buried in a megabyte of eyJ runs, dots and spaces still finds it', () => {
    const noise = `${'eyJ'.repeat(100_000)}.${'eyJeyJ.'.repeat(20_000)} `;
    const text = `${noise}${JWT} ${noise}`;
    const scrubbed = scrubTokens(text);
    expect(scrubbed).not.toContain(JWT);
    expect(scrubbed).toBe(oldScrub(text));
  });

  it('cuts exactly what the old pattern cut, on any text of token characters, dots and a few others', () => {
    const alphabet = fc.constantFrom('e', 'y', 'J', 'eyJ', 'a', 'Z', '0', '_', '-', '.', ' ', '"', '\n', 'é', 'eyJab');
    fc.assert(
      fc.property(fc.array(alphabet, { maxLength: 80 }), (parts) => {
        const text = parts.join('');
        expect(scrubTokens(text)).toBe(oldScrub(text));
      }),
      { numRuns: 5000 },
    );
  });
});

describe('scrubFields and the logger', () => {
  it("scrubs the strings of a log line's fields, nested too, without touching the caller's object", () => {
    const fields = { agent: 'ag_x', line: `{"event":"bogus","note":"${JWT}"}`, nested: { list: ['ok', JWT] } };
    const scrubbed = scrubFields(fields);
    expect(scrubbed).toEqual({
      agent: 'ag_x',
      line: '{"event":"bogus","note":"[redacted-token]"}',
      nested: { list: ['ok', '[redacted-token]'] },
    });
    expect(fields.line).toContain(JWT);
    const clean = { agent: 'ag_x', n: 3 };
    expect(scrubFields(clean)).toBe(clean);
  });

  it('writes no token of a field or a message to the log', () => {
    const lines: string[] = [];
    const logger = createLogger('info', { write: (line: string) => void lines.push(line) });
    logger.error({ agent: 'ag_x', line: `{"event":"bogus","token_like":"${JWT}"}` }, `refused ${JWT}`);
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain(JWT);
    const entry = JSON.parse(lines[0]!);
    expect(entry.line).toBe('{"event":"bogus","token_like":"[redacted-token]"}');
    expect(entry.msg).toBe('refused [redacted-token]');
  });
});
