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
});
