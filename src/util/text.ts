/** Short renderings of values for people (the CLI's tables and the event sentences share them), and other people's words made safe to print. */

/**
 * A text on one line (whitespace runs become one space), without escape sequences, controls
 * or invisible characters (`printable`: it may be an agent's, and a terminal prints it), cut
 * at `max` characters with `…`.
 */
export function excerpt(text: string, max = 60): string {
  const flat = printable(text).replace(/\s+/g, ' ').trim();
  const chars = [...flat];
  return chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : flat;
}

/** `1 message`, `2 messages`. */
export function plural(n: number, word: string, many = `${word}s`): string {
  return `${n} ${n === 1 ? word : many}`;
}

export function usd(n: number): string {
  return `$${n.toFixed(4)}`;
}

/*
 * Other people's words as a terminal may print them (docs/security.md, "Envelopes"): an
 * agent's question, labels, reports and errors reach the user through the CLI (and the
 * dashboard, through excerpt), and a terminal obeys what a text carries: escape sequences (CSI
 * moves the cursor and erases lines, OSC 52 writes the clipboard, OSC 8 makes links), C0/C1
 * controls, line breaks that start what looks like a new entry, characters that reorder what
 * is shown. These functions remove all of that, and mark every continuation line so that
 * none can pass as a line the CLI wrote.
 */

/** CSI (cursor moves, erasing, colours), OSC/DCS/SOS/PM/APC strings (clipboard, links, titles), to their end; other escapes. */
const SEQUENCE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: escape sequences are what this removes
  /(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[\s\S]*?(?:\x07|\x1b\\|\x9c|$)|\x1b[ -/]*[0-~]?/g;
/** Every line break a terminal or an editor may honour. */
const BREAK = /\r\n|[\r\v\f\u0085\u2028\u2029]/g;
/** Controls left once the sequences are gone (but the newline and the tab), and invisible or reordering characters. */
const UNPRINTABLE = /(?![\n\t])\p{Cc}|[\p{Default_Ignorable_Code_Point}\p{Cf}]/gu;

/** The words alone: escape sequences, controls (but newline and tab) and invisible characters removed, line breaks as `\n`. */
export function printable(text: string): string {
  return text.replace(SEQUENCE, '').replace(BREAK, '\n').replace(UNPRINTABLE, '');
}

/** The words on one line (every run of blanks, line breaks included, one space). */
export function printableLine(text: string): string {
  return printable(text).replace(/\s+/g, ' ').trim();
}

/**
 * The words as a block under a line the CLI wrote: the first line as it is, every further
 * line after `continuation` (an indent and a mark, `    > `), so that no line of them starts
 * where the CLI's own lines do.
 */
export function printableBlock(text: string, continuation: string): string {
  return printable(text).split('\n').join(`\n${continuation}`);
}
