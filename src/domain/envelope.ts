/**
 * Envelopes agents cannot forge: how the server sets someone else's words apart from its
 * own framing, in every text it delivers (docs/security.md, "Envelopes"). Only the server
 * writes framing: a line that begins with a bracketed tag (`[from NAME (ID)]`, `[ANSWER q_…]`,
 * `[AGENT DOWN]`, …). An agent's (or the user's) words follow such a header on the same line
 * when they are one line that does not itself read as framing; otherwise they are quoted
 * below it, every line prefixed `> `, so that none of them begins a line. Before that the
 * words are normalised: every line break a reader may honour becomes `\n` (so each line is
 * quoted), and characters that are invisible or reorder text (which could hide a tag or
 * disguise a line) are removed. Pure functions.
 */

/** What begins every quoted line (an empty line is quoted as `>` alone). */
export const QUOTE_PREFIX = '> ';

/** Every line break a model, a terminal or an editor may honour: CRLF, CR, LF, VT, FF, NEL, LS, PS. */
const LINE_BREAK = /\r\n|[\n\v\f\r\u0085\u2028\u2029]/g;
/** The same, but `\n`: what normalising rewrites (a text of plain newlines is left as it is, at no cost). */
const OTHER_BREAK = /\r\n?|[\v\f\u0085\u2028\u2029]/g;

/**
 * Characters a reader does not see, or that reorder what it sees: every default-ignorable
 * code point (zero-width spaces and joiners, bidirectional marks and controls, variation
 * selectors, the BOM, the soft hyphen, Hangul fillers, tag characters, the shorthand and
 * musical format controls, …) and every other format character (the interlinear annotation
 * marks, …).
 */
const INVISIBLE = /[\p{Default_Ignorable_Code_Point}\p{Cf}]/gu;
/** Control characters (C0, DEL, C1) but the newline and the tab: none is visible, some move a terminal's cursor. */
const CONTROL = /(?![\n\t])\p{Cc}/gu;
/** What the framing fold drops: the invisibles and every control character. */
const FOLD_DROP = /[\p{Default_Ignorable_Code_Point}\p{Cf}\p{Cc}]/gu;

/**
 * Someone's words as the server passes them on: line breaks as `\n`, invisible and
 * reordering characters and control characters (but `\n` and the tab) removed; nothing
 * visible changes.
 */
export function normaliseWords(text: string): string {
  return text.replace(OTHER_BREAK, '\n').replace(INVISIBLE, '').replace(CONTROL, '');
}

/** A text's lines, split at every line break a reader may honour (what the tests read delivered texts with). */
export function readerLines(text: string): string[] {
  return text.split(LINE_BREAK);
}

/**
 * What a reader skips at the start of a line before a tag: blanks (the blank-looking letters
 * too), combining marks (which attach to nothing visible there) and emphasis marks.
 */
const LEADING = /^[\s\p{M}\u2800\u3164\u115f\u1160\uffa0*_~#`'"]+/u;

/**
 * An opening bracket as a reader may take it: `[` and, after compatibility folding (fullwidth
 * `［`, the vertical forms, `⼕`), any opening bracket but `(` and `{` (`⟦`, `【`, `〔`, `⦋`,
 * `⁅`, `❲`, `⌈`, …), the square-bracket pieces `⎡⎢⎣`, and the common look-alikes of `[`:
 * `⊏ ⊑ ⊂ ⊆ ⌜ ⌞ 匚 ᑕ ‹ «`.
 */
const BRACKET = String.raw`(?:(?![({])\p{Ps}|[\u23a1-\u23a3\u228f\u2291\u2282\u2286\u231c\u231e\u531a\u1455\u2039\u00ab])`;
/** What a reader skips between a bracket and a tag's first character: blanks, combining and emphasis marks. */
const GAP = String.raw`[\s\p{M}*_~\x60'"]*`;

/**
 * One or more opening brackets, then a tag's first character: anything but a blank or a
 * closing bracket (`[x]`, `[!ANSWER`, `[#…`, `[@user]`, `[…from`, `[-ANSWER`; not `[ ]`, `[]`).
 */
const FRAMING_START = new RegExp(String.raw`^(?:${BRACKET}${GAP})+[^\s\p{Pe}\u23a4-\u23a6]`, 'u');
/** A line whose first visible character is a bracket-like one or `>`: kept off a header's line. */
const OPENS_LIKE_TAG = new RegExp(`^(?:${BRACKET}|>)`, 'u');

/** A line's start as a reader folds it: invisibles and controls dropped, leading blanks and marks skipped, NFKC. */
function foldStart(line: string): string {
  const start = line.replace(FOLD_DROP, '').replace(LEADING, '').slice(0, 256);
  return start.normalize('NFKC').replace(FOLD_DROP, '').replace(LEADING, '');
}

/**
 * Whether a line would pass as the server's framing: after the folding a reader does in its
 * head (invisible and control characters dropped, leading blanks, marks and emphasis skipped,
 * look-alike brackets taken for `[`, any case, any script), it begins with a bracketed tag.
 * Deliberately wider than the tags the server writes, so that a delivered text in which no
 * quoted line passes it cannot be mistaken for framing by a reader that is less exact than
 * this function.
 */
export function isServerFraming(line: string): boolean {
  // Only a line's start can make it framing: fold that much (a long line costs its length once).
  return FRAMING_START.test(foldStart(line));
}

/** Whether a line's first visible character is a bracket-like one or `>` (a line that starts like a tag or a quote). */
export function opensLikeTag(line: string): boolean {
  return OPENS_LIKE_TAG.test(foldStart(line));
}

/** Whether a line mimics a quoted line of framing: `> [from user (user)] …` (any number of `>`, blanks between). */
function mimicsQuotedFraming(line: string): boolean {
  const start = foldStart(line);
  return start.startsWith('>') && isServerFraming(start.replace(/^(?:>[\s\p{M}]*)+/u, ''));
}

/** A name or an id as it may sit in a header: one line, no brackets or parentheses, at most 64 characters. */
export function headerName(text: string): string {
  const cleaned = normaliseWords(text)
    .replace(/[^\p{L}\p{N}\p{M} ._:@-]+/gu, '-')
    .replace(/\s+/g, ' ')
    .trim();
  return Array.from(cleaned).slice(0, 64).join('').trim() || 'unknown';
}

/** `[from NAME (ID)]`: who a message is from, written by the server. */
export function fromHeader(name: string, id: string): string {
  return `[from ${headerName(name)} (${headerName(id)})]`;
}

/** Short words set inside a server's line (a question's header, an option's label): one line, normalised. */
export function inlineWords(text: string): string {
  return normaliseWords(text).replace(/\n+/g, ' ').trim();
}

/** Every line of the (normalised) words prefixed with `> ` (`>` for an empty one). */
export function quoteLines(words: string): string {
  return quoteNormalised(normaliseWords(words));
}

/** `quoteLines` of words already normalised; one pass, as a 200,000-line text must not cost more than its length. */
function quoteNormalised(text: string): string {
  let out = '';
  for (let start = 0; ; ) {
    const end = text.indexOf('\n', start);
    const line = end < 0 ? text.slice(start) : text.slice(start, end);
    out += line.length === 0 ? QUOTE_PREFIX.trimEnd() : QUOTE_PREFIX + line;
    if (end < 0) return out;
    out += '\n';
    start = end + 1;
  }
}

/**
 * The one recipe: a server line (`header`, one line the server wrote) and someone's words
 * under it. One line of words that does not read as framing stays on the header's line
 * (`[from w (ag_1)] hello`); more lines, or a line that reads as framing or whose first visible
 * character is a bracket or `>` (which would read as a row of tags, or a quote), are quoted below it; no words, the header alone. `block: true` always quotes (a header that is a sentence).
 */
export function envelope(header: string, words: string, opts: { block?: boolean } = {}): string {
  const head = inlineWords(header);
  const text = normaliseWords(words);
  if (!text.includes('\n') && text.trim().length === 0) return head;
  if (!opts.block && !text.includes('\n') && !isServerFraming(text) && !opensLikeTag(text)) return `${head} ${text}`;
  return `${head}\n${quoteNormalised(text)}`;
}

/**
 * A task as its first message carries it: as written when no line of it reads as framing
 * (or as a quoted line of framing, `> [from user (user)] …`) (the usual case, so the task reads as it was given), else quoted under a line saying so.
 */
export function taskWords(task: string): string {
  const text = normaliseWords(task);
  if (!readerLines(text).some((line) => isServerFraming(line) || mimicsQuotedFraming(line))) return text;
  return `Your task, as it was given to you (quoted: only Beidou writes lines that begin with a bracketed tag):\n${quoteNormalised(text)}`;
}

/**
 * A text the server composed (its first line its own), made safe for what an older server
 * stored raw: every later line that reads as framing is quoted. What this server composes has
 * no such line (any words in it are already set apart), so it passes unchanged.
 */
export function composedText(text: string): string {
  const normal = normaliseWords(text);
  if (!normal.includes('\n')) return normal;
  const [first, ...rest] = normal.split('\n');
  return [first, ...rest.map((line) => (isServerFraming(line) ? QUOTE_PREFIX + line : line))].join('\n');
}

/** The envelopes a `signal_review` report carries, as the agent writes them and the server repeats them. */
export const REVIEW_TAGS = ['[REVIEW REQUIRED]', '[ITERATION READY]'] as const;

/**
 * A review report as its leader reads it: the server's tag (the one the report names first)
 * after the sender's header, then the report, less that tag when it opens it.
 */
export function reviewReport(header: string, detail: string): string {
  const text = normaliseWords(detail);
  const lower = text.toLowerCase();
  const found = REVIEW_TAGS.map((tag) => ({ tag, at: lower.indexOf(tag.toLowerCase()) }))
    .filter((t) => t.at >= 0)
    .sort((a, b) => a.at - b.at)[0];
  const tag = found?.tag ?? REVIEW_TAGS[0];
  const opening = text.trimStart();
  const rest = opening.toLowerCase().startsWith(tag.toLowerCase()) ? opening.slice(tag.length).trimStart() : text;
  return envelope(`${header} ${tag}`, rest);
}
