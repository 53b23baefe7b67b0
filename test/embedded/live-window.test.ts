import { afterEach, describe, expect, it } from 'vitest';
import type { EventDraft, StoredEvent } from '../../src/events/catalogue.js';
import { JsonlEventLog } from '../../src/store/embedded/jsonl-log.js';
import { STRIDE } from '../../src/store/embedded/line-index.js';
import { removeHome, tempHome } from '../support/server.js';

// The JSONL log's bound on what it holds of a live task (BEIDOU_LIVE_EVENTS_IN_MEMORY): the
// offsets of the newest lines and a mark every STRIDE lines before them. Every range read
// below the window must equal the same read from a log that holds every offset. The
// server-level cases (both stores) are in test/integration/write-budget.test.ts.

const clock = { now: () => 1_800_000_000.25 };
/** Lines of varied length: multi-byte text, and some longer than one read of a forward skip (64 KiB). */
const text = (i: number) => (i % 37 === 5 ? `long ${i} ${'é'.repeat(50_000)}` : `message ${i} ✓ ${'x'.repeat(i % 11)}`);
const draft = (i: number): EventDraft => ({
  event: 'send_message',
  task_id: 'tsk_long',
  caller_id: 'ag_a',
  to: 'ag_b',
  content: text(i),
  message_id: `msg_${i}`,
});

describe('JsonlEventLog with a bounded window', () => {
  let dir = '';
  afterEach(() => {
    removeHome(dir);
    dir = '';
  });

  async function open(window: number): Promise<JsonlEventLog> {
    const log = new JsonlEventLog(dir, clock, { events: window, bytes: Number.POSITIVE_INFINITY });
    await log.open(() => undefined);
    return log;
  }

  const contents = (events: StoredEvent[]) => events.map((e) => `${e.seq}:${(e as { content: string }).content}`);

  it('reads every range, below the window too, as a log that holds every offset does; before and after a restart', async () => {
    dir = tempHome();
    const total = 5 * STRIDE + 17;
    const small = await open(10);
    // Commits of several events and of one, so lines carry commit markers and not.
    for (let i = 0; i < total; ) {
      const n = Math.min(i % 3 === 0 ? 4 : 1, total - i);
      await small.append(Array.from({ length: n }, (_, k) => draft(i + k))).durable;
      i += n;
    }
    expect(small.inMemory('tsk_long').events).toBe(10);
    expect(small.readFloor('tsk_long')).toBe(0);
    const full = await open(Number.POSITIVE_INFINITY);
    expect(full.inMemory('tsk_long').events).toBe(total);
    const ranges: Array<[number, number]> = [
      [0, total],
      [0, 1],
      [STRIDE - 1, 2],
      [STRIDE, 1],
      [STRIDE + 3, 3 * STRIDE],
      [total - 12, 5],
      [total - 11, 100],
      [total - 1, 10],
      [total, 10],
    ];
    for (const [since, limit] of ranges) {
      expect(contents(small.read('tsk_long', since, limit)), `since ${since}, limit ${limit}`).toEqual(
        contents(full.read('tsk_long', since, limit)),
      );
    }
    expect(small.read('tsk_long', 0, total).map((e) => e.seq)).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    await small.close();
    await full.close();

    // A restart builds the same bounded index from the file, and appends go on after it.
    const again = await open(10);
    expect(again.inMemory('tsk_long').events).toBe(10);
    expect(contents(again.read('tsk_long', STRIDE + 1, 2))).toEqual([
      `${STRIDE + 2}:${text(STRIDE + 1)}`,
      `${STRIDE + 3}:${text(STRIDE + 2)}`,
    ]);
    const next = again.append([draft(total)]);
    await next.durable;
    expect(next.events[0]!.seq).toBe(total + 1);
    expect(again.read('tsk_long', 0, total + 1)).toHaveLength(total + 1);
    expect(await again.readStored('tsk_long', 2, 3)).toEqual(again.read('tsk_long', 2, 3));
    await again.close();
  });

  it('a page of read and of readStored stops at pageBytes past its first line, and paging on reads every event once', async () => {
    dir = tempHome();
    const big = (i: number): EventDraft => ({ ...draft(i), content: `big ${i} ${'z'.repeat(3_000)}` }) as EventDraft;
    const log = new JsonlEventLog(dir, clock, { events: 5, bytes: Number.POSITIVE_INFINITY, pageBytes: 10_000 });
    await log.open(() => undefined);
    for (let i = 0; i < 30; i += 2) await log.append([big(i), big(i + 1)]).durable;
    expect(log.read('tsk_long', 0, 1_000).map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(log.read('tsk_long', 27, 1_000).map((e) => e.seq)).toEqual([28, 29, 30]);
    const tiny = new JsonlEventLog(dir, clock, { events: 5, bytes: Number.POSITIVE_INFINITY, pageBytes: 10 });
    await tiny.open(() => undefined);
    expect(tiny.read('tsk_long', 4, 1_000).map((e) => e.seq)).toEqual([5]);
    const all: StoredEvent[] = [];
    for (;;) {
      const page = await log.readStored('tsk_long', all.at(-1)?.seq ?? 0, 1_000);
      if (page.length === 0) break;
      all.push(...page);
    }
    expect(all.map((e) => e.seq)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect((all[0] as { content: string }).content).toBe((big(0) as { content: string }).content);
    await tiny.close();
    await log.close();
  });
});
