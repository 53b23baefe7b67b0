import { Writable } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLogger, scrubTokens } from '../../src/util/logger.js';

/**
 * The token scrub (src/util/scrub.ts) on hostile inputs: what it cuts out, compared with a
 * regular expression of the same shapes (whose backtracking made `eyJeyJ…` quadratic in the
 * old scrub) and with the old pattern (all it cut is still cut), and that no finished log
 * line carries a token wherever it came from. Its speed is in `npm run bench` (section 10),
 * not here.
 */

/** The pattern the scrub used to be: every match is still cut. */
const OLD_PATTERN = /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}/g;
const oldScrub = (text: string) => text.replace(OLD_PATTERN, '[redacted-token]');

/**
 * What the scan cuts, as one regular expression (too slow to use: it backtracks): a JWT whose
 * dots may have a line break (escaped as in JSON too) before or after them; its first two parts
 * when the second is JSON too; an admin token; a line that is a dot and 43 token characters.
 */
const T = '[A-Za-z0-9_-]';
const LB = String.raw`(?:\r\n|\n|\r|\\r\\n|\\n|\\r)`;
const SEP = String.raw`(?:\.${LB}|${LB}\.|\.)`;
const JWT_SHAPE = `eyJ${T}{4,}${SEP}(?:${T}{4,}${SEP}${T}{4,}|eyJ${T}+)`;
const ADMIN_SHAPE = `bdu_admin_${T}{20,}`;
const SIGNATURE_LINE = String.raw`(?<=^|[\n\r"]|\\[nr])\.${T}{43,}`;
const SHAPES = new RegExp(`${JWT_SHAPE}|${ADMIN_SHAPE}|${SIGNATURE_LINE}`, 'g');
const shapeScrub = (text: string) => text.replace(SHAPES, '[redacted-token]');

const JWT = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ194In0.c2lnbmF0dXJlLXNpZ25hdHVyZQ';
/** The shape of ours: HS256, so a signature of 32 bytes, 43 characters. */
const HS256 = `eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhZ194In0.${Buffer.alloc(32, 7).toString('base64url')}`;

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

  it('cuts exactly what the shapes match, and everything the old pattern cut, on any text of token characters, dots, line breaks and a few others', () => {
    const alphabet = fc.constantFrom(
      ...['e', 'y', 'J', 'eyJ', 'a', 'Z', '0', '_', '-', '.', ' ', '"', '\n', '\r', '\\', 'n', 'r', 'é', 'eyJab'],
      ...['bdu_admin_', 'abcdefghij', 'ABCDEFGHIJKLMNOPQRSTU', '\\n', '\\r\\n'],
    );
    fc.assert(
      fc.property(fc.array(alphabet, { maxLength: 80 }), (parts) => {
        const text = parts.join('');
        const scrubbed = scrubTokens(text);
        expect(scrubbed).toBe(shapeScrub(text));
        expect(scrubbed).not.toMatch(OLD_PATTERN);
      }),
      { numRuns: 5000 },
    );
  });

  it('cuts a token printed across two lines, raw or escaped as in a JSON log line, and its first two parts alone', () => {
    const [header, payload, signature] = HS256.split('.') as [string, string, string];
    for (const lb of ['\n', '\r\n', '\r', '\\n', '\\r\\n'])
      for (const split of [`${header}.${payload}.${lb}${signature}`, `${header}.${payload}${lb}.${signature}`])
        expect(scrubTokens(`before ${split} after`)).toBe('before [redacted-token] after');
    // The signature on a line of its own, its first two parts on the line before: both gone.
    expect(scrubTokens(`token: ${header}.${payload}.\n`)).toBe('token: [redacted-token].\n');
    expect(scrubTokens(`.${signature}\nnext`)).toBe('[redacted-token]\nnext');
    expect(scrubTokens(JSON.stringify({ msg: `.${signature}` }))).toBe('{"msg":"[redacted-token]"}');
  });

  it('cuts the admin token, and leaves ordinary text alone: prose, paths, hashes, a dot in a sentence', () => {
    const admin = 'bdu_admin_AbCdEfGhIjKlMnOpQrStUvWxYz012345';
    expect(scrubTokens(`BEIDOU_ADMIN_TOKEN=${admin} beidou task list`)).toBe(
      'BEIDOU_ADMIN_TOKEN=[redacted-token] beidou task list',
    );
    const ordinary = [
      'the server listens on http://127.0.0.1:7777/mcp (see docs/api.md).',
      'sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d08c45d6c0a08  file.tar.gz',
      '.gitignore and .env.example are read; bdu_admin_ alone is a prefix',
      'eyJ is how base64 JSON starts; e.g. eyJhbGciOi is a header',
      'a.b.c, x.y, version 1.2.3-beta.4, ../../etc/passwd',
    ].join('\n');
    expect(scrubTokens(ordinary)).toBe(ordinary);
  });
});

describe('the logger: no token in a finished line, wherever it came from', () => {
  const [header, payload, signature] = HS256.split('.') as [string, string, string];
  const memory = (format: 'json' | 'pretty' = 'json') => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const logger = createLogger('trace', destination, format);
    return { lines, logger, text: () => lines.join('') };
  };
  const leaks = (text: string) =>
    [JWT, HS256, signature, JWT.split('.')[2]!, 'bdu_admin_AbCdEfGhIjKlMnOpQrStUvWx'].filter((s) => text.includes(s));
  const failure = () => {
    const err = new Error(`the server refused Bearer ${JWT}`);
    err.stack = `Error: refused ${JWT}\n    at post (file:///x.js:1:1)`;
    return err;
  };

  it('in a message and in a field, as before', () => {
    const log = memory();
    log.logger.error({ agent: 'ag_x', line: `{"event":"bogus","token_like":"${JWT}"}` }, `refused ${JWT}`);
    expect(log.lines).toHaveLength(1);
    const entry = JSON.parse(log.lines[0]!);
    expect(entry.line).toBe('{"event":"bogus","token_like":"[redacted-token]"}');
    expect(entry.msg).toBe('refused [redacted-token]');
  });

  it('in an Error, as a field or as the object logged: message and stack', () => {
    const log = memory();
    log.logger.error({ err: failure() }, 'could not post');
    log.logger.error(failure());
    log.logger.warn({ cause: { err: failure() } }, 'nested');
    expect(log.lines).toHaveLength(3);
    expect(leaks(log.text())).toEqual([]);
    const [first, second] = log.lines.map((l) => JSON.parse(l));
    expect(first.err).toMatchObject({ message: 'the server refused Bearer [redacted-token]' });
    expect(first.err.stack).toContain('refused [redacted-token]');
    expect(second.msg).toBe('the server refused Bearer [redacted-token]');
  });

  it("in a child logger's bindings, a field nested at any depth, and %o / %j / %s arguments", () => {
    const log = memory();
    log.logger.child({ launch: `curl -H "Authorization: Bearer ${JWT}"` }).info('launched');
    log.logger.info({ a: { b: { c: { d: { e: [{ f: JWT }] } } } } }, 'deep');
    log.logger.info('posted %o', { body: { token_like: JWT } });
    log.logger.info('posted %j', { body: { token_like: JWT } });
    log.logger.info('admin %s', 'bdu_admin_AbCdEfGhIjKlMnOpQrStUvWxYz012345');
    expect(log.lines).toHaveLength(5);
    expect(leaks(log.text())).toEqual([]);
    expect(JSON.parse(log.lines[1]!).a.b.c.d.e[0].f).toBe('[redacted-token]');
  });

  it('in a token printed across two lines of one message', () => {
    const log = memory();
    log.logger.info(`token ${header}.${payload}.\n${signature}`);
    log.logger.info(`token ${header}.${payload}`);
    log.logger.info(`.${signature}`);
    expect(leaks(log.text())).toEqual([]);
    expect(log.text()).not.toContain(payload);
  });

  it('in the pretty format, an Error included', () => {
    const log = memory('pretty');
    log.logger.error(failure());
    log.logger.error({ err: failure() }, `could not post ${JWT}`);
    log.logger.child({ launch: JWT }).info('launched');
    expect(log.lines.length).toBeGreaterThanOrEqual(3);
    expect(leaks(log.text())).toEqual([]);
    expect(log.text()).toContain('[redacted-token]');
  });

  it('logs a URL field as its text, its password hidden, instead of throwing', () => {
    const log = memory();
    log.logger.info({ target: new URL('http://beidou:hunter2@db.internal:5432/beidou') }, 'connecting');
    log.logger.info({ a: { target: new URL('http://localhost:7777/mcp') } }, 'nested');
    expect(log.lines).toHaveLength(2);
    expect(log.text()).not.toContain('hunter2');
    expect(JSON.parse(log.lines[0]!).target).toBe('http://beidou:redacted@db.internal:5432/beidou');
    expect(JSON.parse(log.lines[1]!).a.target).toBe('http://localhost:7777/mcp');
  });
});
