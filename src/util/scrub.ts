/**
 * The token scrub: credentials cut out of text that may quote one (an agent's own output, an
 * error's message or stack, a finished log line). A scan, not a regular expression: the
 * pattern it replaced backtracked, so a run of `eyJeyJ…` (an agent's hostile output) took
 * seconds for a few hundred kilobytes; the scan reads each character a bounded number of times.
 */

/** What a credential is replaced with. */
export const REDACTED_TOKEN = '[redacted-token]';

/** The characters of a JWT's three parts and of our other tokens (base64url): `[A-Za-z0-9_-]`. */
function isTokenChar(c: number): boolean {
  return (
    (c >= 97 && c <= 122) || // a-z
    (c >= 65 && c <= 90) || // A-Z
    (c >= 48 && c <= 57) || // 0-9
    c === 95 || // _
    c === 45 // -
  );
}

/** Where the run of token characters starting at `from` ends. */
function runEnd(text: string, from: number): number {
  let i = from;
  while (i < text.length && isTokenChar(text.charCodeAt(i))) i++;
  return i;
}

const DOT = 46;
const LF = 10;
const CR = 13;
const BACKSLASH = 92;
const QUOTE = 34;
const N = 110;
const R = 114;

/**
 * Where a line break starting at `i` ends, or -1: `\n`, `\r\n`, `\r`, or the same escaped as
 * in a JSON string (`\\n`, `\\r\\n`, `\\r`: a finished log line holds its texts so).
 */
function lineBreakEnd(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === LF) return i + 1;
  if (c === CR) return text.charCodeAt(i + 1) === LF ? i + 2 : i + 1;
  if (c !== BACKSLASH) return -1;
  const next = text.charCodeAt(i + 1);
  if (next === N) return i + 2;
  if (next !== R) return -1;
  return text.charCodeAt(i + 2) === BACKSLASH && text.charCodeAt(i + 3) === N ? i + 4 : i + 2;
}

/**
 * Where the separator of two JWT parts starting at `i` ends, or -1: a dot, or a dot with a
 * line break before or after it (a token printed across two lines).
 */
function separatorEnd(text: string, i: number): number {
  if (text.charCodeAt(i) === DOT) {
    const broken = lineBreakEnd(text, i + 1);
    return broken === -1 ? i + 1 : broken;
  }
  const broken = lineBreakEnd(text, i);
  return broken !== -1 && text.charCodeAt(broken) === DOT ? broken + 1 : -1;
}

/** Each of a JWT's parts has at least this many characters (the header's after its `eyJ`). */
const MIN_PART = 4;

/**
 * Where the JWT at `at` (an `eyJ`) ends, or -1 with `resume`, where the next one may start.
 * A JWT is three runs of token characters (the header after its `eyJ`, each of at least
 * MIN_PART) joined by separators. Its first two parts alone are cut too when the second is
 * JSON (`eyJ…`) as well: a token whose signature is on the next line of a log, or lost.
 * Greedy: each part is a whole run, the header from its leftmost `eyJ` (a later `eyJ` in the
 * same run has fewer characters after it and the same fate), so a failure resumes past the
 * header, and no character is read more than three times (header, payload, signature).
 */
function jwtEnd(text: string, at: number): { end: number; resume: number } {
  const headerEnd = runEnd(text, at + 3);
  const fail = { end: -1, resume: headerEnd };
  if (headerEnd - at - 3 < MIN_PART) return fail;
  const payload = separatorEnd(text, headerEnd);
  if (payload === -1) return fail;
  const payloadEnd = runEnd(text, payload);
  if (payloadEnd - payload < MIN_PART) return fail;
  const signature = separatorEnd(text, payloadEnd);
  if (signature !== -1) {
    const signatureEnd = runEnd(text, signature);
    if (signatureEnd - signature >= MIN_PART) return { end: signatureEnd, resume: signatureEnd };
  }
  const payloadIsJson =
    text.charCodeAt(payload) === E && text.charCodeAt(payload + 1) === Y && text.charCodeAt(payload + 2) === J;
  return payloadIsJson ? { end: payloadEnd, resume: payloadEnd } : fail;
}

/** The admin token (src/identity/secrets.ts: `bdu_admin_` and 32 characters), with room for shorter ones. */
const ADMIN_PREFIX = 'bdu_admin_';
const ADMIN_MIN_RUN = 20;

/** An HS256 signature is 43 characters: a line that starts with a dot and at least that many is one on its own line. */
const SIGNATURE_RUN = 43;

/** A line starts at `i`: the text's start, after a line break (escaped too), or a JSON string's opening quote. */
function atLineStart(text: string, i: number): boolean {
  if (i === 0) return true;
  const before = text.charCodeAt(i - 1);
  if (before === LF || before === CR || before === QUOTE) return true;
  return (before === N || before === R) && i >= 2 && text.charCodeAt(i - 2) === BACKSLASH;
}

type Kind = 'jwt' | 'admin' | 'dot';

const E = 101;
const Y = 121;
const J = 74;
const B = 98;

/**
 * The next place at or after `from` that may start a credential of `kind` (-1: none). A loop
 * of our own, not `indexOf(…, from)`: under some JIT states V8's took time in proportion to
 * the rest of the text at each call, seconds for a few hundred kilobytes.
 */
function nextCandidate(text: string, kind: Kind, from: number): number {
  const n = text.length;
  if (kind === 'jwt') {
    for (let i = from; i + 2 < n; i++)
      if (text.charCodeAt(i) === E && text.charCodeAt(i + 1) === Y && text.charCodeAt(i + 2) === J) return i;
    return -1;
  }
  if (kind === 'admin') {
    for (let i = from; i + ADMIN_PREFIX.length <= n; i++)
      if (text.charCodeAt(i) === B && isAdminPrefix(text, i)) return i;
    return -1;
  }
  for (let i = from; i < n; i++) if (text.charCodeAt(i) === DOT) return i;
  return -1;
}

/** `bdu_admin_` starts at `i`. */
function isAdminPrefix(text: string, i: number): boolean {
  for (let j = 0; j < ADMIN_PREFIX.length; j++) if (text.charCodeAt(i + j) !== ADMIN_PREFIX.charCodeAt(j)) return false;
  return true;
}

/** Where the credential of `kind` at `at` ends (-1: none), and where to look for the next of its kind. */
function candidateEnd(text: string, kind: Kind, at: number): { end: number; resume: number } {
  if (kind === 'jwt') return jwtEnd(text, at);
  if (kind === 'admin') {
    const end = runEnd(text, at + ADMIN_PREFIX.length);
    return end - at - ADMIN_PREFIX.length >= ADMIN_MIN_RUN ? { end, resume: end } : { end: -1, resume: at + 1 };
  }
  if (!atLineStart(text, at)) return { end: -1, resume: at + 1 };
  const end = runEnd(text, at + 1);
  return end - at - 1 >= SIGNATURE_RUN ? { end, resume: end } : { end: -1, resume: at + 1 };
}

const KINDS: readonly Kind[] = ['jwt', 'admin', 'dot'];

/**
 * `text` with every credential replaced by `[redacted-token]`: our JWTs (agent, launch and
 * spawner tokens; what `eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}` matches,
 * and the same with a line break next to a dot), a JWT's first two parts without the third,
 * an admin token of ours (`bdu_admin_…`), and a line that is a dot and an HS256 signature.
 * Linear: each kind is looked for from where its last look ended, leftmost first.
 */
export function scrubTokens(text: string): string {
  const next = KINDS.map((kind) => nextCandidate(text, kind, 0));
  if (next.every((at) => at === -1)) return text;
  const out: string[] = [];
  let copied = 0;
  for (;;) {
    let k = -1;
    for (let i = 0; i < KINDS.length; i++) if (next[i]! !== -1 && (k === -1 || next[i]! < next[k]!)) k = i;
    if (k === -1) break;
    const at = next[k]!;
    const { end, resume } = candidateEnd(text, KINDS[k]!, at);
    if (end === -1) {
      next[k] = nextCandidate(text, KINDS[k]!, resume);
      continue;
    }
    out.push(text.slice(copied, at), REDACTED_TOKEN);
    copied = end;
    for (let i = 0; i < KINDS.length; i++)
      if (next[i]! !== -1 && next[i]! < end) next[i] = nextCandidate(text, KINDS[i]!, end);
  }
  out.push(text.slice(copied));
  return out.join('');
}
