import { afterEach, describe, expect, it } from 'vitest';
import type { EventDraft, StoredEvent } from '../../src/events/catalogue.js';
import { PgEventLog } from '../../src/store/postgres/log.js';
import { migrate } from '../../src/store/postgres/schema.js';
import { until } from '../../src/testkit/poll.js';
import { withClient } from '../../src/testkit/postgres.js';
import { apiEvents } from '../support/events.js';
import { createTask, FakeClock, removeHome, startTestServer, tempHome, type TestServer } from '../support/server.js';
import { freshDatabase, replicaSecrets } from '../support/store.js';

/**
 * The PostgreSQL log holds of each live task only its newest events (BEIDOU_LIVE_EVENTS_IN_MEMORY,
 * BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY); older ones are read from the table. On the log itself,
 * and on a standby that follows the active with the same bound and takes over. The server
 * cases both stores share are in test/integration/write-budget.test.ts.
 */

const clock = new FakeClock();
const logs: PgEventLog[] = [];
const servers: TestServer[] = [];
afterEach(async () => {
  await Promise.allSettled(logs.splice(0).map((l) => l.close()));
  for (const s of servers.splice(0)) {
    await s.close().catch(() => undefined);
    removeHome(s.home);
  }
});

const message = (n: number): EventDraft =>
  ({
    event: 'send_message',
    task_id: 'tsk_long',
    message_id: `msg_${n}`,
    caller_id: 'ag_a',
    to: 'ag_b',
    content: `hello ${n} ${'y'.repeat(n % 40)}`,
  }) as EventDraft;

const contents = (events: StoredEvent[]) => events.map((e) => `${e.seq}:${(e as { content: string }).content}`);

async function allStored(log: PgEventLog, taskId: string, page: number): Promise<StoredEvent[]> {
  const out: StoredEvent[] = [];
  for (;;) {
    const batch = await log.readStored(taskId, out.at(-1)?.seq ?? 0, page);
    if (batch.length === 0) return out;
    out.push(...batch);
  }
}

describe('PgEventLog with a bounded window', () => {
  it('holds the newest events within both bounds, refuses a synchronous read below them, and reads them from the table', async () => {
    const { url } = await freshDatabase();
    await withClient(url, (c) => migrate(c));
    const log = new PgEventLog(url, clock, {}, { events: 20, bytes: 2_000 });
    logs.push(log);
    await log.open(() => undefined);
    for (let i = 0; i < 120; i += 3) await log.append([message(i), message(i + 1), message(i + 2)]).durable;
    const held = log.inMemory('tsk_long');
    expect(held.events).toBeGreaterThan(0);
    expect(held.events).toBeLessThanOrEqual(20);
    expect(held.bytes).toBeLessThanOrEqual(2_000);
    const floor = log.readFloor('tsk_long');
    expect(floor).toBe(120 - held.events);
    expect(log.durableSeq('tsk_long')).toBe(120);
    expect(() => log.read('tsk_long', 0, 10)).toThrow(/no longer in memory/);
    expect(log.read('tsk_long', floor, 5).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5].map((k) => floor + k));
    // Pages of any size, across the floor: every event once, in order, as written.
    for (const page of [1, 7, 1_000]) {
      expect(contents(await allStored(log, 'tsk_long', page))).toEqual(
        contents(Array.from({ length: 120 }, (_, i) => ({ ...message(i), seq: i + 1 }) as unknown as StoredEvent)),
      );
    }

    // A replay fills memory within the same bounds.
    await log.close();
    const again = new PgEventLog(url, clock, {}, { events: 20, bytes: 2_000 });
    logs.push(again);
    const replayed: StoredEvent[] = [];
    await again.open((e) => replayed.push(e));
    expect(replayed).toHaveLength(120);
    expect(again.inMemory('tsk_long')).toEqual(held);
    const next = again.append([message(120)]);
    await next.durable;
    expect(next.events[0]!.seq).toBe(121);
    expect((await allStored(again, 'tsk_long', 50)).map((e) => e.seq)).toEqual(
      Array.from({ length: 121 }, (_, i) => i + 1),
    );
  });

  it("older events are read on connections of their own, never the lease's, a page at most pageBytes past its first event", async () => {
    const { url } = await freshDatabase();
    await withClient(url, (c) => migrate(c));
    const big = (n: number) => ({ ...message(n), content: `big ${n} ${'z'.repeat(3_000)}` }) as EventDraft;
    const log = new PgEventLog(url, clock, {}, { events: 5, bytes: Number.POSITIVE_INFINITY, pageBytes: 10_000 });
    logs.push(log);
    await log.open(() => undefined);
    for (let i = 0; i < 30; i += 2) await log.append([big(i), big(i + 1)]).durable;
    const floor = log.readFloor('tsk_long');
    expect(floor).toBe(25);
    // From the table: three events of ~3 KB fit under 10,000 bytes, whatever the limit.
    const page = await log.readStored('tsk_long', 0, 1_000);
    expect(page.map((e) => e.seq)).toEqual([1, 2, 3]);
    // From memory too.
    expect(log.read('tsk_long', floor, 1_000).map((e) => e.seq)).toEqual([26, 27, 28]);
    // Paged on, every event once and in order.
    expect((await allStored(log, 'tsk_long', 1_000)).map((e) => e.seq)).toEqual(
      Array.from({ length: 30 }, (_, i) => i + 1),
    );
    // The reads ran on the log's read connections, not on the one holding the lease.
    const readers = await withClient(url, async (c) => {
      const { rows } = await c.query<{ application_name: string; query: string }>(
        "SELECT application_name, query FROM pg_stat_activity WHERE query LIKE '%octet_length%' AND pid <> pg_backend_pid()",
      );
      return rows.map((r) => r.application_name);
    });
    expect(readers.length).toBeGreaterThan(0);
    expect(new Set(readers)).toEqual(new Set(['beidou-log-read']));
    // A page holds its first event whatever its size (a log opened afresh: this one hands over its lease).
    await log.close();
    const tiny = new PgEventLog(url, clock, {}, { events: 5, bytes: Number.POSITIVE_INFINITY, pageBytes: 10 });
    logs.push(tiny);
    await tiny.open(() => undefined);
    expect((await tiny.readStored('tsk_long', 0, 1_000)).map((e) => e.seq)).toEqual([1]);
  });

  it('a standby follows the active within the bound, takes over, and serves the task from seq 1', async () => {
    const { url: db } = await freshDatabase();
    const env = {
      BEIDOU_DATABASE_URL: db,
      ...replicaSecrets(`window:${db}`),
      BEIDOU_WATCHDOG_S: '3600',
      BEIDOU_LIVE_EVENTS_IN_MEMORY: '15',
    };
    const a = await startTestServer({ home: tempHome(), env });
    servers.push(a);
    const b = await startTestServer({ home: tempHome(), env });
    servers.push(b);
    expect([a.server.role(), b.server.role()]).toEqual(['active', 'standby']);
    const task = await createTask(a, { name: 'long' });
    for (let i = 0; i < 60; i++)
      expect((await a.api('POST', `/agents/${task.root_agent_id}/send`, { content: `note ${i}` })).status).toBe(200);
    const before = await apiEvents(a, task.task_id);
    expect(before.map((e) => e.seq)).toEqual(before.map((_, i) => i + 1));
    expect(a.server.services.registry.log.inMemory(task.task_id).events).toBe(15);
    const last = await withClient(db, async (c) =>
      Number((await c.query('SELECT max(pos) AS p FROM events')).rows[0].p),
    );
    await until('the standby caught up', () => ((b.server.following()?.position ?? -1) >= last ? true : undefined));

    await a.close();
    servers.splice(servers.indexOf(a), 1);
    removeHome(a.home);
    await until('the standby active', () => (b.server.role() === 'active' ? true : undefined), 15_000);
    expect(b.server.startup.warm).toMatchObject({ caught_up_events: 0 });
    // What it followed, it holds within the bound; the rest it reads from the table.
    const log = b.server.services.registry.log;
    expect(log.inMemory(task.task_id).events).toBe(15);
    expect(await apiEvents(b, task.task_id)).toEqual(before);
    expect((await b.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'after' })).status).toBe(200);
    expect((await apiEvents(b, task.task_id)).map((e) => e.seq)).toEqual([
      ...before.map((e) => e.seq),
      before.length + 1,
    ]);
  });
});
