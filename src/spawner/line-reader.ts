import type { Readable } from 'node:stream';

/**
 * An agent's stdout read by lines with a cap on a line's length: an agent (an LLM with a
 * shell, or a hostile command) may print a line of a gigabyte. readline would hold all of it
 * before the spawner saw any, and the spawner would scrub and log it in one go; here the bytes
 * past the cap are counted and dropped as they arrive, so a line costs at most the cap in
 * memory, and the line is handed on cut, with its real length.
 */

/**
 * The longest line the `command` adapter reads whole: its lines are log lines and small
 * event lines (docs/spawner-protocol.md).
 */
export const COMMAND_LINE_MAX_BYTES = 64 * 1024;

/**
 * The longest line any other adapter reads whole: Claude Code's stream-json puts a whole
 * tool call (a file written) or tool result on one line, and 4 MiB is also the largest
 * request the server takes, so a longer event could not be posted anyway.
 */
export const AGENT_LINE_MAX_BYTES = 4 * 1024 * 1024;

/** A line that was longer than the cap: its length, and how much of it was kept. */
export interface LineCut {
  bytes: number;
  kept: number;
}

const LF = 0x0a;
const CR = 0x0d;

/**
 * Splits bytes into lines at `\n`, `\r\n` or `\r` (as readline does), keeping at most
 * `maxBytes` of each (cut back to a whole UTF-8 character). Pure: `push` the chunks,
 * `end` at the end of the stream.
 */
export class LineSplitter {
  private parts: Buffer[] = [];
  /** Bytes of the current line held in `parts` (at most the cap). */
  private kept = 0;
  /** Bytes of the current line seen, dropped ones included. */
  private seen = 0;
  /** The last chunk ended with `\r`: a `\n` first in the next one ends no line. */
  private afterCR = false;

  constructor(
    private readonly maxBytes: number,
    private readonly onLine: (line: string, cut: LineCut | null) => void,
  ) {}

  /** Bytes of the current line held now: never more than the cap. */
  get held(): number {
    return this.kept;
  }

  push(chunk: Buffer): void {
    let start = 0;
    if (this.afterCR && chunk.length > 0 && chunk[0] === LF) start = 1;
    this.afterCR = false;
    for (let i = start; i < chunk.length; i++) {
      const byte = chunk[i];
      if (byte !== LF && byte !== CR) continue;
      this.take(chunk, start, i);
      this.emit();
      if (byte === CR) {
        if (i + 1 === chunk.length) this.afterCR = true;
        else if (chunk[i + 1] === LF) i++;
      }
      start = i + 1;
    }
    this.take(chunk, start, chunk.length);
  }

  /** The stream ended: a last line without its newline still counts. */
  end(): void {
    if (this.seen > 0) this.emit();
  }

  private take(chunk: Buffer, from: number, to: number): void {
    if (to <= from) return;
    const room = this.maxBytes - this.kept;
    if (room > 0) {
      const n = Math.min(room, to - from);
      // A copy: a view would keep the whole chunk alive for a few bytes of it.
      this.parts.push(Buffer.from(chunk.subarray(from, from + n)));
      this.kept += n;
    }
    this.seen += to - from;
  }

  private emit(): void {
    let bytes = Buffer.concat(this.parts, this.kept);
    const cut = this.seen > this.kept ? { bytes: this.seen, kept: 0 } : null;
    if (cut) {
      bytes = bytes.subarray(0, utf8Boundary(bytes));
      cut.kept = bytes.length;
    }
    this.parts = [];
    this.kept = 0;
    this.seen = 0;
    this.onLine(bytes.toString('utf8'), cut);
  }
}

/** The length of `bytes` less a UTF-8 character cut in the middle at its end. */
function utf8Boundary(bytes: Buffer): number {
  let i = bytes.length;
  // Back over continuation bytes (10xxxxxx) to the lead byte of the last character.
  let back = 0;
  while (i > 0 && back < 4 && (bytes[i - 1]! & 0xc0) === 0x80) {
    i--;
    back++;
  }
  if (i === 0) return bytes.length;
  const lead = bytes[i - 1]!;
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  // The last character is whole: keep everything; else drop its lead and what followed it.
  return back + 1 >= need ? bytes.length : i - 1;
}

/** Reads `stream` by lines through a LineSplitter; `onLine` gets each line, cut if it was longer than `maxBytes`. */
export function readLines(
  stream: Readable,
  maxBytes: number,
  onLine: (line: string, cut: LineCut | null) => void,
): void {
  const splitter = new LineSplitter(maxBytes, onLine);
  stream.on('data', (chunk: Buffer) => splitter.push(chunk));
  stream.once('end', () => splitter.end());
}
