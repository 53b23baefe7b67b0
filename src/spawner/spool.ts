import { closeSync, existsSync, ftruncateSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { open, rename, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { lockSpoolDir, readSpoolIdentity, unlockSpoolDir, writeSpoolIdentity } from './spool-folder.js';

/**
 * The spawner's spool (docs/spawner-protocol.md, "The spool"): every post that reports
 * something (drained events, acknowledgements, starts) is appended here, fsynced, and only
 * then sent, in order, each with its spool sequence. The server keeps the highest sequence
 * it committed per spawner (`spawner.spooled`), so a replay after a crash or an outage is
 * acknowledged and ignored. Entries leave the file once the server acknowledged them.
 *
 * The file is `spool.jsonl` (one entry a line) in the spool dir; the dir's other files (its
 * lock, the instance id and sequences reserved, the token) are spool-folder.ts's.
 */

export interface SpoolEntry {
  seq: number;
  route: string;
  body: unknown;
}

interface Queued extends SpoolEntry {
  bytes: number;
  line: string;
}

/** What one send of the head of the spool came to. */
export type SendOutcome = 'ok' | 'refused' | 'retry';

/** Sequences are reserved in blocks: a restart starts past anything the last process may have used. */
const SEQ_BLOCK = 100_000;
/** Rewrite the file once this much of its head is acknowledged (when the queue never empties). */
const COMPACT_BYTES = 1 << 20;
/** At most this many events in one coalesced post (the server's batch limit). */
const MAX_BATCH_EVENTS = 1000;

export class Spool {
  private nextSeq = 1;
  private reservedUpTo = 0;
  /** Durable and not yet acknowledged, oldest first. */
  private readonly queue: Queued[] = [];
  /** Appended, not yet durable. */
  private pending: Array<{ entry: Queued; done: (err?: Error) => void }> = [];
  private io: Promise<void> = Promise.resolve();
  private flushQueued = false;
  private fh: FileHandle | null = null;
  private fileBytes = 0;
  private ackedBytes = 0;
  private queuedBytes = 0;
  private wake: (() => void) | null = null;
  /** Single entries only until this sequence was sent (a coalesced batch was refused). */
  private singleUntil = 0;
  /** Drained events dropped because the spool was full. */
  dropped = 0;

  private constructor(
    readonly dir: string,
    readonly instance: string,
    private readonly maxBytes: number,
    private readonly warn: (msg: string, fields: Record<string, unknown>) => void,
  ) {}

  private get file(): string {
    return path.join(this.dir, 'spool.jsonl');
  }

  /** Opens (or creates) the spool in `dir`; refuses one another live spawner uses. */
  static async open(
    dir: string,
    opts: {
      maxBytes: number;
      newInstance: () => string;
      warn?: (msg: string, fields: Record<string, unknown>) => void;
    },
  ): Promise<Spool> {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    lockSpoolDir(dir);
    const identity = readSpoolIdentity(dir);
    const spool = new Spool(
      dir,
      identity?.instance ?? opts.newInstance(),
      opts.maxBytes,
      opts.warn ?? (() => undefined),
    );
    const { entries, goodBytes, fileBytes } = readSpoolFile(spool.file);
    if (goodBytes < fileBytes) {
      // A torn last entry (the process died mid-write) was never durable: cut it off so the next append starts on a line of its own.
      const fd = openSync(spool.file, 'r+');
      ftruncateSync(fd, goodBytes);
      closeSync(fd);
    }
    for (const e of entries) spool.queue.push(e);
    spool.queuedBytes = goodBytes;
    spool.fileBytes = goodBytes;
    spool.nextSeq = Math.max(identity?.seq_reserved ?? 1, (entries.at(-1)?.seq ?? 0) + 1);
    spool.reserve();
    // The spool holds the agents' reports: the spawner user's alone, a file an older version made included.
    spool.fh = await open(spool.file, 'a', 0o600);
    await spool.fh.chmod(0o600);
    return spool;
  }

  private reserve(): void {
    this.reservedUpTo = this.nextSeq + SEQ_BLOCK;
    writeSpoolIdentity(this.dir, { instance: this.instance, seq_reserved: this.reservedUpTo });
  }

  /** Entries waiting for the server's acknowledgement. */
  get backlog(): number {
    return this.queue.length + this.pending.length;
  }

  /**
   * Appends one post; resolves once it is durable. A droppable post (drained observability
   * events) is dropped when the spool already holds `maxBytes`; the rest is always kept.
   */
  append(route: string, body: unknown, droppable = false): Promise<void> {
    if (droppable && this.queuedBytes >= this.maxBytes) {
      if (this.dropped++ === 0)
        this.warn('the spool is full; dropping drained events until the server takes some', {
          dir: this.dir,
          maxBytes: this.maxBytes,
        });
      return Promise.resolve();
    }
    const seq = this.nextSeq++;
    if (this.nextSeq >= this.reservedUpTo) this.reserve();
    const line = `${JSON.stringify({ seq, route, body })}\n`;
    const entry: Queued = { seq, route, body, line, bytes: Buffer.byteLength(line) };
    this.queuedBytes += entry.bytes;
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ entry, done: (err) => (err ? reject(err) : resolve()) });
      if (!this.flushQueued) {
        this.flushQueued = true;
        setImmediate(() => void this.serially(() => this.flush()));
      }
    });
  }

  /** One write and one fdatasync for everything appended in the same tick. */
  private async flush(): Promise<void> {
    this.flushQueued = false;
    const batch = this.pending.splice(0);
    if (!this.fh) {
      for (const b of batch) b.done(new Error('the spool is closed'));
      return;
    }
    if (batch.length === 0) return;
    try {
      await this.fh.write(batch.map((b) => b.entry.line).join(''));
      await this.fh.datasync();
    } catch (err) {
      // Not durable: none of it counts as taken, and the file goes back to its last whole line.
      await this.fh.truncate(this.fileBytes).catch(() => undefined);
      for (const b of batch) {
        this.queuedBytes -= b.entry.bytes;
        b.done(err as Error);
      }
      return;
    }
    for (const b of batch) {
      this.fileBytes += b.entry.bytes;
      this.queue.push(b.entry);
      b.done();
    }
    this.nudge();
  }

  private serially(fn: () => Promise<void>): Promise<void> {
    this.io = this.io.then(fn, fn);
    return this.io;
  }

  /** Wakes the sender (new entries, or the server is back). */
  nudge(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  /** The head of the spool as one post: consecutive events of one agent go together. */
  private head(): { route: string; body: unknown; seq: number; count: number } | null {
    const first = this.queue[0];
    if (!first) return null;
    if (!first.route.endsWith('/events') || first.seq <= this.singleUntil)
      return { route: first.route, body: first.body, seq: first.seq, count: 1 };
    const events: unknown[] = [];
    let count = 0;
    for (const e of this.queue) {
      if (e.route !== first.route) break;
      const more = (e.body as { events: unknown[] }).events;
      if (count > 0 && events.length + more.length > MAX_BATCH_EVENTS) break;
      events.push(...more);
      count++;
    }
    return { route: first.route, body: { events }, seq: this.queue[count - 1]!.seq, count };
  }

  /**
   * Sends the spool's entries, oldest first, until `signal` aborts. `send` says what came
   * of one post: `ok` (committed, or a replay the server ignored), `refused` (the server will
   * never take it: dropped), `retry` (unreachable or failing: waits, then tries again).
   */
  async deliver(
    send: (route: string, body: unknown, seq: number) => Promise<SendOutcome>,
    signal: AbortSignal,
    refused: (route: string, seq: number) => void,
  ): Promise<void> {
    let backoff = 250;
    const stop = () => this.nudge();
    signal.addEventListener('abort', stop, { once: true });
    while (!signal.aborted) {
      const head = this.head();
      if (!head) {
        await new Promise<void>((r) => (this.wake = r));
        continue;
      }
      const outcome = await send(head.route, head.body, head.seq);
      if (outcome === 'retry') {
        await new Promise<void>((r) => {
          const timer = setTimeout(r, backoff);
          this.wake = () => {
            clearTimeout(timer);
            r();
          };
        });
        backoff = Math.min(backoff * 2, 5_000);
        continue;
      }
      backoff = 250;
      if (outcome === 'refused' && head.count > 1) {
        this.singleUntil = head.seq; // one bad event must not take its neighbours with it
        continue;
      }
      if (outcome === 'refused') refused(head.route, head.seq);
      this.acknowledged(head.count);
    }
    signal.removeEventListener('abort', stop);
  }

  private acknowledged(count: number): void {
    for (const e of this.queue.splice(0, count)) {
      this.ackedBytes += e.bytes;
      this.queuedBytes -= e.bytes;
    }
    if (this.queue.length === 0 && this.pending.length === 0) void this.serially(() => this.truncate());
    else if (this.ackedBytes >= COMPACT_BYTES) void this.serially(() => this.compact());
  }

  /**
   * Everything was acknowledged: empty the file. No fsync: should the truncation be lost,
   * the old entries come back on the next start and the server ignores them (at or below
   * its high-water mark).
   */
  private async truncate(): Promise<void> {
    if (this.queue.length > 0 || this.pending.length > 0 || !this.fh) return;
    await this.fh.truncate(0);
    this.fileBytes = 0;
    this.ackedBytes = 0;
  }

  /** Rewrites the file with the entries not yet acknowledged. */
  private async compact(): Promise<void> {
    if (!this.fh || this.ackedBytes < COMPACT_BYTES) return;
    const tmp = `${this.file}.tmp`;
    const text = this.queue.map((e) => e.line).join('');
    const out = await open(tmp, 'w', 0o600);
    try {
      await out.writeFile(text);
      await out.sync();
    } finally {
      await out.close();
    }
    await this.fh.close();
    await rename(tmp, this.file);
    const folder = await open(this.dir, 'r');
    await folder.sync().finally(() => folder.close());
    this.fh = await open(this.file, 'a', 0o600);
    this.fileBytes = Buffer.byteLength(text);
    this.ackedBytes = 0;
  }

  /** Waits for what is being written, closes the file and frees the dir. */
  async close(): Promise<void> {
    await this.serially(() => this.flush());
    await this.fh?.close();
    this.fh = null;
    unlockSpoolDir(this.dir);
  }
}

/**
 * The entries of a spool file, up to the first line that is not a whole entry (a torn
 * write at a crash): that line and anything after it were never durable.
 */
export function readSpoolFile(file: string): { entries: Queued[]; goodBytes: number; fileBytes: number } {
  if (!existsSync(file)) return { entries: [], goodBytes: 0, fileBytes: 0 };
  const buf = readFileSync(file);
  const entries: Queued[] = [];
  let at = 0;
  while (at < buf.length) {
    const nl = buf.indexOf(0x0a, at);
    if (nl < 0) break;
    const line = buf.subarray(at, nl + 1).toString('utf8');
    let entry: SpoolEntry;
    try {
      entry = JSON.parse(line) as SpoolEntry;
    } catch {
      break;
    }
    const last = entries.at(-1)?.seq ?? 0;
    if (!Number.isSafeInteger(entry?.seq) || entry.seq <= last || typeof entry.route !== 'string') break;
    entries.push({ seq: entry.seq, route: entry.route, body: entry.body, line, bytes: nl + 1 - at });
    at = nl + 1;
  }
  return { entries, goodBytes: at, fileBytes: buf.length };
}
