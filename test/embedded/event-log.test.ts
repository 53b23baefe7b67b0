import { appendFileSync, existsSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { EventDraft, StoredEvent } from '../../src/events/catalogue.js';
import { JsonlEventLog } from '../../src/store/embedded/jsonl-log.js';
import { removeHome, tempHome } from '../support/server.js';

// The JSONL log and its files, directly: embedded store only (vitest.config.ts). The
// PostgreSQL log's own tests are test/postgres/log.test.ts.

const clock = { now: () => 1_800_000_000.5 };
const draft = (taskId: string, i: number): EventDraft => ({
  event: 'send_message',
  task_id: taskId,
  caller_id: 'ag_a',
  to: 'ag_b',
  content: `message ${i} ✓`,
  message_id: `msg_${i}`,
});

describe('JsonlEventLog', () => {
  let dir = '';
  afterEach(() => {
    removeHome(dir);
    dir = '';
  });

  async function reopen(): Promise<{ log: JsonlEventLog; replayed: StoredEvent[] }> {
    const log = new JsonlEventLog(dir, clock);
    const replayed: StoredEvent[] = [];
    await log.open((e) => replayed.push(e));
    return { log, replayed };
  }

  it('gives concurrent appends gapless seqs per task and makes them durable together', async () => {
    dir = tempHome();
    const { log } = await reopen();
    const results = Array.from({ length: 50 }, (_, i) => log.append([draft(i % 2 ? 'tsk_odd' : 'tsk_even', i)]));
    await Promise.all(results.map((r) => r.durable));
    expect(results.filter((_, i) => i % 2 === 0).map((r) => r.events[0]!.seq)).toEqual(
      Array.from({ length: 25 }, (_, i) => i + 1),
    );
    expect(log.durableSeq('tsk_odd')).toBe(25);
    const lines = readFileSync(path.join(dir, 'tsk_even.jsonl'), 'utf8').trim().split('\n');
    expect(lines).toHaveLength(25);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      seq: 1,
      ts: 1_800_000_000.5,
      event: 'send_message',
      task_id: 'tsk_even',
      content: 'message 0 ✓',
    });
    // The envelope comes first on every line.
    expect(Object.keys(JSON.parse(lines[0]!)).slice(0, 4)).toEqual(['seq', 'ts', 'event', 'task_id']);
    await log.close();
  });

  it('reads ranges by seq (multi-byte content included) and replays them in order', async () => {
    dir = tempHome();
    const first = await reopen();
    await first.log.append(Array.from({ length: 10 }, (_, i) => draft('tsk_a', i))).durable;
    expect(first.log.read('tsk_a', 3, 4).map((e) => e.seq)).toEqual([4, 5, 6, 7]);
    expect(first.log.read('tsk_a', 8, 100).map((e) => e.seq)).toEqual([9, 10]);
    expect(first.log.read('tsk_a', 10, 100)).toEqual([]);
    expect(first.log.read('tsk_missing', 0, 100)).toEqual([]);
    await first.log.close();
    const second = await reopen();
    expect(second.replayed.map((e) => e.seq)).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));
    expect(second.log.read('tsk_a', 0, 2).map((e) => (e as { content: string }).content)).toEqual([
      'message 0 ✓',
      'message 1 ✓',
    ]);
    // Appends continue the sequence after a restart.
    const next = second.log.append([draft('tsk_a', 10)]);
    await next.durable;
    expect(next.events[0]!.seq).toBe(11);
    await second.log.close();
  });

  it('cuts a torn last line (a crash mid-write) and continues after the last whole event', async () => {
    dir = tempHome();
    const first = await reopen();
    await first.log.append([draft('tsk_t', 0), draft('tsk_t', 1)]).durable;
    await first.log.close();
    appendFileSync(path.join(dir, 'tsk_t.jsonl'), '{"seq":3,"ts":1,"event":"send_mes');
    const second = await reopen();
    expect(second.replayed.map((e) => e.seq)).toEqual([1, 2]);
    await second.log.append([draft('tsk_t', 2)]).durable;
    const lines = readFileSync(path.join(dir, 'tsk_t.jsonl'), 'utf8').trim().split('\n');
    expect(lines.map((l) => JSON.parse(l).seq)).toEqual([1, 2, 3]);
    await second.log.close();
  });

  it('quarantines a file with a corrupt line in the middle or a gap in seq, and replays the others', async () => {
    dir = tempHome();
    const good = await reopen();
    await good.log.append([draft('tsk_good', 0)]).durable;
    await good.log.close();
    writeFileSync(
      path.join(dir, 'tsk_c.jsonl'),
      '{"seq":1,"ts":1,"event":"x","task_id":"tsk_c"}\nnot json\n{"seq":3,"ts":1,"event":"x","task_id":"tsk_c"}\n',
    );
    let opened = new JsonlEventLog(dir, clock);
    let replayed: StoredEvent[] = [];
    let report = await opened.open((e) => replayed.push(e));
    expect(report.quarantined).toEqual([
      { taskId: 'tsk_c', file: path.join(dir, 'tsk_c.jsonl'), line: 2, reason: 'not valid JSON' },
    ]);
    expect(replayed.map((e) => `${e.task_id}:${e.seq}`)).toEqual(['tsk_c:1', 'tsk_good:1']);
    // The trusted prefix stays readable; nothing may be appended; the file is left for doctor.
    expect(opened.read('tsk_c', 0, 10).map((e) => e.seq)).toEqual([1]);
    expect(() => opened.append([draft('tsk_c', 1)])).toThrow(/tsk_c is quarantined/);
    await opened.append([draft('tsk_good', 1)]).durable;
    await opened.close();
    expect(readFileSync(path.join(dir, 'tsk_c.jsonl'), 'utf8')).toContain('not json');

    writeFileSync(
      path.join(dir, 'tsk_c.jsonl'),
      '{"seq":1,"ts":1,"event":"x","task_id":"tsk_c"}\n{"seq":3,"ts":1,"event":"x","task_id":"tsk_c"}\n',
    );
    opened = new JsonlEventLog(dir, clock);
    replayed = [];
    report = await opened.open((e) => replayed.push(e));
    expect(report.quarantined).toMatchObject([{ taskId: 'tsk_c', line: 2, reason: 'seq 3, expected 2' }]);
    await opened.close();
  });

  it.runIf(existsSync('/dev/full'))(
    'after a failed write acknowledges nothing more: the batch and every later append are refused',
    async () => {
      dir = tempHome();
      const { log } = await reopen();
      // A task file that is /dev/full: every write fails with ENOSPC, as on a full disk.
      // (Linked after the replay, which would read the device's endless zeros.)
      symlinkSync('/dev/full', path.join(dir, 'tsk_full.jsonl'));
      const ok = log.append([draft('tsk_ok', 0)]);
      await ok.durable;
      const failed = log.append([draft('tsk_full', 0)]);
      const alongside = log.append([draft('tsk_ok', 1)]);
      await expect(failed.durable).rejects.toThrow(/event log is unavailable/);
      await expect(alongside.durable).rejects.toThrow(/event log is unavailable/);
      expect(() => log.append([draft('tsk_ok', 2)])).toThrow(/event log is unavailable/);
      await expect(log.flush()).rejects.toThrow(/event log is unavailable/);
      expect(log.durableSeq('tsk_ok')).toBe(1);
    },
  );

  it('calls subscribers with each durable batch', async () => {
    dir = tempHome();
    const { log } = await reopen();
    const seen: number[][] = [];
    const off = log.subscribe('tsk_s', (events) => seen.push(events.map((e) => e.seq)));
    await log.append([draft('tsk_s', 0), draft('tsk_s', 1)]).durable;
    await log.append([draft('tsk_s', 2)]).durable;
    off();
    await log.append([draft('tsk_s', 3)]).durable;
    expect(seen.flat()).toEqual([1, 2, 3]);
    await log.close();
  });
});
