import { readSync } from 'node:fs';
import { RecentWindow } from '../recent-window.js';

/**
 * Where the lines of one task file start, in bounded memory: the offsets of the newest
 * lines (at most BEIDOU_LIVE_EVENTS_IN_MEMORY of them), and of every STRIDE-th line before
 * those, so a long-lived task's index grows by one number per STRIDE events, not per event.
 * A line below the window is found from the mark before it, skipping forward on disk.
 */

/** One mark per this many lines: a line below the window is at most STRIDE - 1 lines past its mark. */
export const STRIDE = 64;

/** How much of the file one step of a forward skip reads. */
const SKIP_CHUNK = 64 * 1024;
const SKIP_BUFFER = Buffer.allocUnsafe(SKIP_CHUNK);

export class LineIndex {
  private readonly recent: RecentWindow<number>;
  /** marks[k]: where line k * STRIDE + 1 starts. */
  private readonly marks: number[] = [];

  constructor(window: number) {
    this.recent = new RecentWindow<number>(window);
  }

  static of(offsets: readonly number[], window: number): LineIndex {
    const index = new LineIndex(window);
    for (const offset of offsets) index.push(offset);
    return index;
  }

  /** Lines indexed: the last seq. */
  get count(): number {
    return this.recent.last;
  }

  /** Offsets held densely (the window). */
  get heldCount(): number {
    return this.recent.held.count;
  }

  /** Where line `seq` starts, if the window holds it. */
  held(seq: number): number | undefined {
    return this.recent.at(seq);
  }

  /** The next line (seq `count + 1`) starts at `offset`. */
  push(offset: number): void {
    if (this.recent.last % STRIDE === 0) this.marks.push(offset);
    this.recent.push(offset);
  }

  /**
   * Where line `seq` (1..count) starts: from the window, or found on disk from its mark
   * through `fd` (the lines before `seq` must be written).
   */
  startOf(seq: number, fd: number): number {
    const held = this.recent.at(seq);
    if (held !== undefined) return held;
    const k = Math.floor((seq - 1) / STRIDE);
    return skipLines(fd, this.marks[k]!, seq - (k * STRIDE + 1));
  }
}

/** The offset `lines` lines past the line starting at `from`, counting newlines on disk. */
export function skipLines(fd: number, from: number, lines: number): number {
  let at = from;
  let left = lines;
  while (left > 0) {
    const n = readSync(fd, SKIP_BUFFER, 0, SKIP_CHUNK, at);
    if (n === 0) throw new Error(`a task file ends before the line its index expects (${left} lines short)`);
    let i = 0;
    while (left > 0) {
      const nl = SKIP_BUFFER.indexOf(0x0a, i);
      if (nl === -1 || nl >= n) break;
      i = nl + 1;
      left--;
    }
    at += left > 0 ? n : i;
  }
  return at;
}
