import type { Readable } from 'node:stream';

/**
 * An agent's stdout read by lines with a cap on a line's length: an agent (an LLM with a
 * shell, or a hostile command) may print a line of a gigabyte. readline would hold all of it
 * before the spawner saw any, and the spawner would scrub and log it in one go; here the bytes
 * past the cap are counted and dropped as they arrive, so a line costs at most the cap in
 * memory, and the line is handed on cut, with its real length.
 */

/**
 * The longest copy of a line the `command` adapter logs (its lines are read whole up to
 * AGENT_LINE_MAX_BYTES, so an event line of a long text is posted whole).
 */
export const COMMAND_LINE_MAX_BYTES = 64 * 1024;

/**
 * The longest line an adapter reads whole: Claude Code's stream-json puts a whole tool call
 * (a file written) or tool result on one line, a command agent's event line may carry a text of
 * 200,000 characters, and 4 MiB is also the largest request the server takes, so a longer
 * event could not be posted anyway.
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
  /**
   * The current line's bytes: one buffer, grown by doubling up to the cap, so a line costs at
   * most the cap however it is chunked (a buffer per chunk cost an object per byte when the
   * chunks were single bytes). Dropped after a line longer than REUSED_BYTES.
   */
  private buf: Buffer = Buffer.alloc(0);
  /** Bytes of the current line held in `buf` (at most the cap). */
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

  /** Bytes this splitter keeps allocated for the current line: never more than the cap. */
  get allocated(): number {
    return this.buf.length;
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

  /** The line read so far and not yet ended (null: none), as it would be handed on now. */
  current(): { line: string; cut: LineCut | null } | null {
    return this.seen > 0 ? this.finished() : null;
  }

  private take(chunk: Buffer, from: number, to: number): void {
    if (to <= from) return;
    const room = this.maxBytes - this.kept;
    if (room > 0) {
      const n = Math.min(room, to - from);
      if (this.kept + n > this.buf.length) {
        // A copy into our own buffer: a view would keep the whole chunk alive for a few bytes of it.
        const grown = Buffer.allocUnsafe(Math.min(this.maxBytes, Math.max(this.kept + n, 2 * this.buf.length, 256)));
        this.buf.copy(grown, 0, 0, this.kept);
        this.buf = grown;
      }
      chunk.copy(this.buf, this.kept, from, from + n);
      this.kept += n;
    }
    this.seen += to - from;
  }

  private finished(): { line: string; cut: LineCut | null } {
    let bytes = this.buf.subarray(0, this.kept);
    const cut = this.seen > this.kept ? { bytes: this.seen, kept: 0 } : null;
    if (cut) {
      bytes = bytes.subarray(0, utf8Boundary(bytes));
      cut.kept = bytes.length;
    }
    return { line: bytes.toString('utf8'), cut };
  }

  private emit(): void {
    const { line, cut } = this.finished();
    if (this.buf.length > REUSED_BYTES) this.buf = Buffer.alloc(0);
    this.kept = 0;
    this.seen = 0;
    this.onLine(line, cut);
  }
}

/** A line buffer up to this size is kept for the next line; a larger one (a long line's) is freed. */
const REUSED_BYTES = 64 * 1024;

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

/**
 * `text` cut to its first `maxBytes` bytes of UTF-8 (back to a whole character), with its real
 * length, or null when it fits: what a log keeps of a line read whole for parsing.
 */
export function cutToBytes(text: string, maxBytes: number): { text: string; cut: LineCut } | null {
  // A UTF-16 unit is at most 3 bytes of UTF-8: a short text fits without counting.
  if (text.length * 3 <= maxBytes) return null;
  const bytes = Buffer.byteLength(text);
  if (bytes <= maxBytes) return null;
  // The first maxBytes units hold at least maxBytes bytes: only they are encoded.
  const head = Buffer.from(text.slice(0, maxBytes)).subarray(0, maxBytes);
  const kept = head.subarray(0, utf8Boundary(head));
  return { text: kept.toString('utf8'), cut: { bytes, kept: kept.length } };
}
