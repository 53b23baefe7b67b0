/**
 * The newest entries of one task's sequence (seq from 1) that a log keeps in memory, within
 * a bound on their number and on their weight (BEIDOU_LIVE_EVENTS_IN_MEMORY,
 * BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY): pushing past either drops the oldest, which the store
 * still has. PostgreSQL keeps each durable event's JSON here; the JSONL log each line's offset.
 */
/** How much of a live task a log holds in memory: its newest events, at most this many and this many bytes. */
export interface LiveMemory {
  events: number;
  bytes: number;
  /** The bytes one page of a read (`read`, `readStored`) brings at most, past its first event (default READ_PAGE_BYTES). */
  pageBytes?: number;
}

/** What one page of events read brings into memory at most (a page holds at least one event, whatever its size). */
export const READ_PAGE_BYTES = 16 * 1024 * 1024;

/** No bound (a log opened by a tool or a test that reads what it replayed). */
export const UNBOUNDED: LiveMemory = { events: Number.POSITIVE_INFINITY, bytes: Number.POSITIVE_INFINITY };

export class RecentWindow<T> {
  private items: T[] = [];
  private weight = 0;
  /** Seqs 1..dropped are no longer held. */
  private dropped = 0;

  constructor(
    readonly maxItems: number,
    readonly maxWeight = Number.POSITIVE_INFINITY,
    private readonly weigh: (item: T) => number = () => 0,
  ) {}

  /** The last seq pushed (held or not). */
  get last(): number {
    return this.dropped + this.items.length;
  }

  /** The seq of the oldest entry held (`last + 1` when none is). */
  get first(): number {
    return this.dropped + 1;
  }

  /** Entries held, and their weight. */
  get held(): { count: number; weight: number } {
    return { count: this.items.length, weight: this.weight };
  }

  /** The entry of `seq`, if held. */
  at(seq: number): T | undefined {
    const i = seq - this.dropped - 1;
    return i >= 0 && i < this.items.length ? this.items[i] : undefined;
  }

  push(item: T): void {
    this.items.push(item);
    this.weight += this.weigh(item);
    let n = 0;
    while (n < this.items.length && (this.items.length - n > this.maxItems || this.weight > this.maxWeight)) {
      this.weight -= this.weigh(this.items[n]!);
      n++;
    }
    if (n === 0) return;
    // One past the bound at a time, in the steady state: shift() trims the array's front in place.
    if (n === 1) this.items.shift();
    else this.items.splice(0, n);
    this.dropped += n;
  }
}
