import { afterEach, describe, expect, it } from 'vitest';
import { connectClient } from '../../src/store/postgres/connect.js';
import { withClient } from '../../src/testkit/postgres.js';
import { until } from '../../src/testkit/poll.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import {
  connectAgent,
  createTask,
  FakeClock,
  removeHome,
  startTestServer,
  tempHome,
  type TestServer,
} from '../support/server.js';
import { freshDatabase, replicaSecrets } from '../support/store.js';

/**
 * Warm standbys (docs/architecture.md, "Replicas"): a standby replays the log once, then
 * follows the active's commits (NOTIFY beidou_events, rows read by `events.pos`), so a
 * takeover reads only what it had not followed. Two in-process servers on one fresh
 * database each; the active hands the lease on by a clean stop (its NOTIFY), so the
 * standby takes over at once. What a SIGKILLed active leaves is in test/postgres/replicas.test.ts.
 */

const servers: TestServer[] = [];
const proxies: TcpProxy[] = [];
afterEach(async () => {
  // First: a connection held silent would hold up a server's stop.
  for (const p of proxies.splice(0)) await p.close();
  for (const s of servers.splice(0)) {
    await s.close().catch(() => undefined);
    removeHome(s.home);
  }
});

async function replica(db: string, clock?: FakeClock, env: Record<string, string> = {}): Promise<TestServer> {
  const ts = await startTestServer({
    home: tempHome(),
    ...(clock ? { clock } : {}),
    env: { BEIDOU_DATABASE_URL: db, ...replicaSecrets(`warm:${db}`), BEIDOU_WATCHDOG_S: '3600', ...env },
  });
  servers.push(ts);
  return ts;
}

const lastPosition = (db: string) =>
  withClient(db, async (c) => Number((await c.query('SELECT coalesce(max(pos), 0) AS p FROM events')).rows[0].p));
const eventCount = (db: string) =>
  withClient(db, async (c) => Number((await c.query('SELECT count(*) AS n FROM events')).rows[0].n));

/** Waits until the standby has applied every committed row. */
async function caughtUp(standby: TestServer, db: string): Promise<void> {
  const last = await lastPosition(db);
  await until(
    `the standby following up to position ${last}`,
    () => ((standby.server.following()?.position ?? -1) >= last ? true : undefined),
    15_000,
  );
}

/** The active stops cleanly; the standby takes over at its NOTIFY. */
async function handOver(active: TestServer, standby: TestServer, wait = true): Promise<void> {
  await active.close();
  servers.splice(servers.indexOf(active), 1);
  removeHome(active.home);
  if (wait) await until('the standby active', () => (standby.server.role() === 'active' ? true : undefined), 15_000);
}

/** Writes a row around the server that leaves a gap in a task's seqs (and tells followers); returns the task's last seq before it. */
async function gapRow(db: string, taskId: string): Promise<number> {
  return withClient(db, async (c) => {
    const last = Number((await c.query('SELECT max(seq) AS s FROM events WHERE task_id = $1', [taskId])).rows[0].s);
    await c.query("INSERT INTO events (task_id, seq, ts, event, body) VALUES ($1, $2, 0, 'agent_output', $3::json)", [
      taskId,
      last + 2,
      JSON.stringify({ seq: last + 2, ts: 0, event: 'agent_output', task_id: taskId }),
    ]);
    await c.query("SELECT pg_notify('beidou_events', 'test')");
    return last;
  });
}

async function sendMessages(ts: TestServer, to: string, n: number, tag: string): Promise<void> {
  for (let i = 0; i < n; i++)
    expect((await ts.api('POST', `/agents/${to}/send`, { content: `${tag} ${i}` })).status).toBe(200);
}

describe('warm standbys', { timeout: 60_000 }, () => {
  it('a standby follows every commit of the active and takes over warm: it reads nothing more, and serves the same state', async () => {
    const { url: db } = await freshDatabase();
    const a = await replica(db);
    const b = await replica(db);
    expect([a.server.role(), b.server.role()]).toEqual(['active', 'standby']);
    expect(b.server.following()).toMatchObject({ events: 0, replayed: 0, diverged: null });

    const task = await createTask(a, { name: 'followed' });
    await sendMessages(a, task.root_agent_id, 20, 'note');
    const root = await connectAgent(a.url, task.token);
    expect((await root.call('read_inbox', { wait_s: 0 })).ok).toBe(true);
    await root.close();
    await caughtUp(b, db);
    const committed = await eventCount(db);
    expect(b.server.following()).toMatchObject({ events: committed, tasks: 1, diverged: null });
    const health = await fetch(`${b.url}/api/health`);
    expect(health.status).toBe(503);
    expect(((await health.json()) as any).following).toMatchObject({
      events: committed,
      replayed: 0,
      tasks: 1,
      archived: 0,
      diverged: null,
    });

    const before = {
      detail: (await a.api('GET', `/tasks/${task.task_id}`)).body,
      events: (await a.api('GET', `/tasks/${task.task_id}/events`)).body,
    };
    await handOver(a, b);
    expect(b.server.startup).toEqual({
      replayed_events: 0,
      archived_tasks: 0,
      warm: { followed_events: committed, caught_up_events: 0 },
    });
    expect(b.server.following()).toBeNull();
    expect((await b.api('GET', `/tasks/${task.task_id}`)).body).toEqual(before.detail);
    expect((await b.api('GET', `/tasks/${task.task_id}/events`)).body).toEqual(before.events);
    // It writes on from there: the next seq follows the last one.
    expect((await b.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'after the takeover' })).status).toBe(
      200,
    );
    const seqs = await withClient(db, async (c) =>
      (await c.query('SELECT seq FROM events WHERE task_id = $1 ORDER BY seq', [task.task_id])).rows.map((r) => r.seq),
    );
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    expect(seqs.length).toBe(committed + 1);
  });

  it('a standby started on a history replays it once, then follows; a cut follower connection reconnects at the next poll and reads what it missed', async () => {
    const { url: db } = await freshDatabase();
    const a = await replica(db);
    const task = await createTask(a);
    await sendMessages(a, task.root_agent_id, 10, 'early');
    const early = await eventCount(db);
    const b = await replica(db);
    expect(b.server.following()).toMatchObject({ replayed: early, events: 0 });

    // Cut the follower's connection (the log connection that is not the lease holder's).
    const cut = await withClient(
      db,
      async (c) =>
        (
          await c.query(
            `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
            WHERE application_name = 'beidou-log' AND pid <> (SELECT holder_pid FROM log_writer)`,
          )
        ).rows,
    );
    expect(cut).toEqual([{ ok: true }]);
    await sendMessages(a, task.root_agent_id, 10, 'missed');
    await caughtUp(b, db);
    const total = await eventCount(db);
    expect(b.server.following()).toMatchObject({ replayed: early, events: total - early, diverged: null });

    const before = (await a.api('GET', `/tasks/${task.task_id}/events`)).body;
    await handOver(a, b);
    expect(b.server.startup.warm).toEqual({ followed_events: total - early, caught_up_events: 0 });
    expect((await b.api('GET', `/tasks/${task.task_id}/events`)).body).toEqual(before);
  });

  it('a row the follower cannot apply as the next of its task stops the following; the takeover then replays from the log and quarantines that task', async () => {
    const { url: db } = await freshDatabase();
    const a = await replica(db);
    const b = await replica(db);
    const task = await createTask(a);
    const other = await createTask(a, { name: 'untouched' });
    await caughtUp(b, db);
    const last = await gapRow(db, task.task_id);
    await until('the follower stopped', () => b.server.following()?.diverged ?? undefined, 15_000);
    expect(b.server.following()!.diverged).toBe(
      `task ${task.task_id}, seq ${last + 2}: seq ${last + 2}, expected ${last + 1}`,
    );
    expect(((await (await fetch(`${b.url}/api/health`)).json()) as any).following.diverged).toContain(
      `seq ${last + 2}, expected ${last + 1}`,
    );

    await handOver(a, b);
    expect(b.server.startup.warm).toBeNull();
    expect(b.server.startup.replayed_events).toBeGreaterThan(0);
    const quarantined = (await b.api('GET', `/tasks/${task.task_id}`)).body;
    expect(quarantined.quarantine).toMatchObject({ line: last + 2, reason: `seq ${last + 2}, expected ${last + 1}` });
    expect((await b.api('GET', `/tasks/${other.task_id}`)).body.task.status).toBe('running');
  });

  it('a standby that replays cold (its follower stopped) while a new follower opens keeps no follower once active', async () => {
    const { url: db } = await freshDatabase();
    const a = await replica(db);
    const b = await replica(db);
    const task = await createTask(a);
    await caughtUp(b, db);
    // The follower stops at a row it cannot apply, so the takeover replays cold.
    await gapRow(db, task.task_id);
    await until('the follower stopped', () => b.server.following()?.diverged ?? undefined, 15_000);
    // An index entry the log does not match: the cold writer deletes it, and waits on this row lock
    // meanwhile (a follower only reads the index), so the cold takeover is held where it is slow.
    const locker = await connectClient(db, 'test-locker');
    try {
      await locker.query(
        'INSERT INTO archived_tasks VALUES (\'task_nowhere\', 7, NULL, \'done\', 0, 0, 0, 0, 0, 0, \'{"task_id":"task_nowhere","agent_ids":[],"question_ids":[]}\')',
      );
      await locker.query('BEGIN');
      await locker.query("SELECT 1 FROM archived_tasks WHERE task_id = 'task_nowhere' FOR UPDATE");
      await handOver(a, b, false);
      await until(
        'the cold takeover waiting on the index row',
        async () =>
          (await withClient(
            db,
            async (c) =>
              (
                await c.query(
                  "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM archived_tasks%'",
                )
              ).rows[0].n,
          )) > 0
            ? true
            : undefined,
        15_000,
      );
      // Meanwhile the standby's poll opens a new follower (it follows again, healthy).
      await until('a new follower', () => (b.server.following()?.diverged === null ? true : undefined), 15_000);
    } finally {
      await locker.query('COMMIT').catch(() => undefined);
      await locker.end();
    }
    await until('the standby active', () => (b.server.role() === 'active' ? true : undefined), 15_000);
    expect(b.server.startup.warm).toBeNull();
    // Active, it keeps no follower: one log connection (the writer's), not a second copy of the state following its own commits.
    await until(
      'one log connection',
      async () =>
        (await withClient(
          db,
          async (c) =>
            (
              await c.query(
                "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'beidou-log'",
              )
            ).rows[0].n,
        )) === 1
          ? true
          : undefined,
      5_000,
    );
  });

  it('a follower whose connection goes silent (no FIN, no RST) still takes over: its read gives up and it reads on a new connection', async () => {
    const { url: db } = await freshDatabase();
    const proxy = await startTcpProxy(db);
    proxies.push(proxy);
    const a = await replica(db);
    const b = await replica(proxy.url);
    const task = await createTask(a);
    await sendMessages(a, task.root_agent_id, 5, 'before');
    await caughtUp(b, db);
    // The follower's log connection forgotten on the way (its rollups pool and lease listener still pass).
    expect(proxy.freeze('beidou-log')).toBe(1);
    await sendMessages(a, task.root_agent_id, 5, 'unheard');
    const before = (await a.api('GET', `/tasks/${task.task_id}/events`)).body;
    await handOver(a, b);
    expect(b.server.startup.warm).toMatchObject({ caught_up_events: 5 });
    expect((await b.api('GET', `/tasks/${task.task_id}/events`)).body).toEqual(before);
  });

  it("a task the active archives leaves the standby's memory too, and is served from the archive after a takeover", async () => {
    const { url: db } = await freshDatabase();
    const clock = new FakeClock();
    const env = { BEIDOU_ARCHIVE_AFTER_S: '600' };
    const a = await replica(db, clock, env);
    const b = await replica(db, clock, env);
    const ended = await createTask(a, { name: 'will be archived' });
    const live = await createTask(a, { name: 'still running' });
    expect((await a.api('POST', `/tasks/${ended.task_id}/terminate`, {})).status).toBe(200);
    await caughtUp(b, db);
    expect(b.server.following()).toMatchObject({ tasks: 2, archived: 0 });
    const before = (await a.api('GET', `/tasks/${ended.task_id}`)).body;

    clock.advance(601);
    expect(await a.server.archiver.tick()).toEqual([ended.task_id]);
    await until(
      'the standby unloaded the archived task',
      () => (b.server.following()?.archived === 1 ? true : undefined),
      15_000,
    );
    expect(b.server.following()).toMatchObject({ tasks: 1, archived: 1 });

    await handOver(a, b);
    expect(b.server.startup).toMatchObject({ archived_tasks: 1, warm: { caught_up_events: 0 } });
    expect(b.server.services.registry.state.tasks.has(ended.task_id)).toBe(false);
    expect((await b.api('GET', `/tasks/${ended.task_id}`)).body).toEqual(before);
    expect((await b.api('GET', `/tasks/${live.task_id}`)).body.task.status).toBe('running');
  });
});
