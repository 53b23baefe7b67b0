import type { StoredEvent } from '../../events/catalogue.js';

/**
 * The format of one task file, `events/{task_id}.jsonl`, and its verification: shared by
 * the log's replay at start and by `beidou doctor`, so both judge a file the same way.
 *
 * One event per line, as store/codec.ts writes it: `{"seq":N,"ts":T,"event":…,"task_id":…,…fields}`.
 * The lines of a commit of several events for one file also carry, after `ts`,
 * `"commit":C,"of":K`: C is the seq of the commit's first line, K how many lines it has.
 * A line without them is a commit of one (and every line of a log written before the
 * markers existed replays as one, as it always did).
 */

/** Where a file stops being trustworthy: its 1-based line and why. */
export interface LogProblem {
  line: number;
  reason: string;
}

/** A commit whose last lines never reached the disk (a write cut short, a power loss). */
export interface IncompleteCommit {
  /** 1-based line of its first line. */
  line: number;
  firstSeq: number;
  /** The last seq of it that is on disk (firstSeq - 1 when only a torn line was). */
  lastSeq: number;
  of: number;
}

export interface LogScan {
  /** Byte offset of each kept line: offsets[seq - 1]. */
  offsets: number[];
  /** Bytes of the consistent prefix: it ends with the last whole commit before any fault. */
  end: number;
  /** The file ended in a line without its newline. */
  torn: boolean;
  /** The trailing commit that is incomplete, dropped from the kept prefix. */
  incomplete: IncompleteCommit | null;
  /** The first line that fails verification; nothing from it on is kept. */
  problem: LogProblem | null;
}

interface OpenCommit {
  line: number;
  start: number;
  first: number;
  of: number;
  events: Array<{ event: StoredEvent; line: number; start: number }>;
}

/**
 * Verifies a task file and hands each event of each whole commit to `apply`, in order.
 * `apply` may throw (the reducer refusing an event): that line becomes the problem.
 */
export function scanLog(data: Buffer, taskId: string, apply: (event: StoredEvent) => void): LogScan {
  const offsets: number[] = [];
  let end = 0;
  let open: OpenCommit | null = null;
  let start = 0;
  let lineNo = 0;
  const fail = (line: number, reason: string): LogScan => ({
    offsets,
    end: open ? open.start : end,
    torn: false,
    incomplete: null,
    problem: { line, reason },
  });

  while (start < data.length) {
    const nl = data.indexOf(0x0a, start);
    if (nl === -1) break;
    lineNo++;
    let event: StoredEvent & { commit?: unknown; of?: unknown };
    try {
      event = JSON.parse(data.toString('utf8', start, nl));
    } catch {
      return fail(lineNo, 'not valid JSON');
    }
    if (typeof event !== 'object' || event === null || Array.isArray(event) || typeof event.event !== 'string') {
      return fail(lineNo, 'not an event object');
    }
    const expected: number = offsets.length + (open ? open.events.length : 0) + 1;
    if (event.seq !== expected) return fail(lineNo, `seq ${String(event.seq)}, expected ${expected}`);
    if (event.task_id !== taskId)
      return fail(lineNo, `names task ${String(event.task_id)} in the file of task ${taskId}`);

    if (event.commit === undefined && event.of === undefined) {
      if (open) return fail(lineNo, `commit ${open.first} (${open.of} lines) is cut by a line of another commit`);
      try {
        apply(event);
      } catch (err) {
        return fail(lineNo, `cannot be applied: ${(err as Error).message}`);
      }
      offsets.push(start);
      start = end = nl + 1;
      continue;
    }
    const { commit, of } = event;
    if (!Number.isInteger(commit) || !Number.isInteger(of) || (of as number) < 1)
      return fail(lineNo, 'bad commit marker');
    delete event.commit;
    delete event.of;
    if (!open) {
      if (commit !== event.seq) return fail(lineNo, `commit ${String(commit)} starts at seq ${event.seq}`);
      open = { line: lineNo, start, first: commit as number, of: of as number, events: [] };
    } else if (commit !== open.first || of !== open.of) {
      return fail(lineNo, `commit ${open.first} (${open.of} lines) is cut by a line of commit ${String(commit)}`);
    }
    open.events.push({ event, line: lineNo, start });
    start = nl + 1;
    if (open.events.length < open.of) continue;
    // The commit is whole: only now do its events count.
    const whole: OpenCommit = open;
    open = null;
    for (const e of whole.events) {
      offsets.push(e.start);
      try {
        apply(e.event);
      } catch (err) {
        offsets.length = whole.first - 1;
        end = whole.start;
        return {
          offsets,
          end,
          torn: false,
          incomplete: null,
          problem: { line: e.line, reason: `cannot be applied: ${(err as Error).message}` },
        };
      }
    }
    end = start;
  }

  const torn = start < data.length;
  const incomplete: IncompleteCommit | null = open
    ? { line: open.line, firstSeq: open.first, lastSeq: open.first + open.events.length - 1, of: open.of }
    : null;
  return { offsets, end, torn, incomplete, problem: null };
}
