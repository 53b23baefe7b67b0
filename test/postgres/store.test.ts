import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { LOG_APPLICATION } from '../../src/store/postgres/connect.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import { createLogger, type Logger } from '../../src/util/logger.js';
import { until } from '../../src/testkit/poll.js';
import {
  agentToken,
  connectAgent,
  createTask,
  removeHome,
  senderTeam,
  startTestServer,
  tempHome,
  type TestAgent,
  type TestServer,
} from '../support/server.js';
import { databaseName, databaseUrlFor, rollupRows, storedEvents, withDatabase } from '../support/store.js';

/**
 * The server on the PostgreSQL store, against the test run's real PostgreSQL: the log's
 * connection cut mid-commit (nothing acknowledged is lost, the refusal is clear), a restart
 * that replays to the same state, a corrupted row quarantining its task only, and the
 * database URL's password kept out of every log line and error.
 */

const servers: TestServer[] = [];
const clients: TestAgent[] = [];
const homes: string[] = [];
afterEach(async () => {
  await Promise.allSettled(clients.splice(0).map((c) => c.close()));
  // A server whose log failed refuses to flush on close; it stops all the same.
  await Promise.allSettled(servers.splice(0).map((s) => s.close()));
  for (const home of homes.splice(0)) removeHome(home);
});

/** A logger as the server's own (redaction included), collecting its lines. */
function collectingLogger(level = 'info'): { logger: Logger; lines: () => string } {
  let text = '';
  const sink = new Writable({
    write(chunk, _enc, done) {
      text += String(chunk);
      done();
    },
  });
  return { logger: createLogger(level, sink as unknown as Parameters<typeof createLogger>[1]), lines: () => text };
}

async function start(home: string, opts: { logger?: Logger; env?: Record<string, string> } = {}): Promise<TestServer> {
  const ts = await startTestServer({ home, ...opts });
  servers.push(ts);
  return ts;
}

/** A root with a team of `n` workers, each on a real MCP client. */
async function team(ts: TestServer, n: number) {
  const task = await createTask(ts);
  const root = await connectAgent(ts.url, task.token);
  clients.push(root);
  const memberIds = await senderTeam(root, n);
  const workers = await Promise.all(memberIds.map(async (id) => connectAgent(ts.url, await agentToken(ts, id))));
  clients.push(...workers);
  return { task, root, workers, memberIds };
}

async function logBackend(
  home: string,
  where: (row: { wait_event_type: string | null }) => boolean = () => true,
): Promise<number> {
  const name = databaseName(home);
  return until('the log connection', () =>
    withDatabase(home, async (c) => {
      const { rows } = await c.query<{ pid: number; wait_event_type: string | null }>(
        'SELECT pid, wait_event_type FROM pg_stat_activity WHERE datname = $1 AND application_name = $2',
        [name, LOG_APPLICATION],
      );
      return rows.find(where)?.pid;
    }),
  );
}

const isGapless = (events: Array<{ seq: number }>) => events.every((e, i) => e.seq === i + 1);

describe('the PostgreSQL store', () => {
  it('the log connection cut mid-commit: the calls in flight are refused clearly, nothing acknowledged is lost, a restart serves again', async () => {
    const home = tempHome();
    homes.push(home);
    const { logger, lines } = collectingLogger();
    const ts = await start(home, { logger });
    const { task, workers } = await team(ts, 2);
    const acked: string[] = [];
    for (const [i, w] of workers.entries()) {
      const sent = await w.call('send_message', { to: task.root_agent_id, content: `before ${i}` });
      if (!sent.ok) throw new Error(JSON.stringify(sent.error));
      acked.push(sent.value.message_id);
    }

    // Hold the writer row so the next commit waits inside PostgreSQL, then cut its connection there.
    const cut = await withDatabase(home, async (hold) => {
      await hold.query('BEGIN');
      await hold.query('SELECT * FROM log_writer FOR UPDATE');
      const inFlight = workers.map((w, i) =>
        w.call('send_message', { to: task.root_agent_id, content: `in flight ${i}` }),
      );
      const pid = await logBackend(home, (r) => r.wait_event_type === 'Lock');
      await hold.query('SELECT pg_terminate_backend($1)', [pid]);
      await hold.query('ROLLBACK');
      return Promise.all(inFlight);
    });
    for (const outcome of cut) {
      expect(outcome).toMatchObject({
        ok: false,
        error: { error: 'internal_error', message: 'the server cannot write its event log; nothing was changed' },
      });
    }
    // Nothing more is acknowledged on top of a store that is behind memory.
    expect(await workers[0]!.call('send_message', { to: task.root_agent_id, content: 'after' })).toMatchObject({
      ok: false,
      error: { error: 'internal_error' },
    });
    // The operator's log says what happened, in words.
    expect(lines()).toMatch(
      /event log is unavailable after a write failure: a commit to PostgreSQL failed \(terminating connection due to administrator command\); whether it was stored is unknown, and nothing of it was acknowledged/,
    );

    await Promise.allSettled(clients.splice(0).map((c) => c.close()));
    await ts.close().catch(() => undefined);
    servers.splice(servers.indexOf(ts), 1);
    const again = await start(home);
    const events = (await again.api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).body.events as Array<{
      seq: number;
      event: string;
      message_id?: string;
      content?: string;
    }>;
    expect(isGapless(events)).toBe(true);
    const sent = events.filter((e) => e.event === 'send_message');
    expect(sent.map((e) => e.message_id)).toEqual(acked);
    expect(sent.some((e) => e.content?.startsWith('in flight'))).toBe(false);
    // And it serves: a new message is acknowledged and stored.
    expect((await again.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'back' })).status).toBe(200);
    expect((await storedEvents(home, task.task_id)).at(-1)).toMatchObject({ event: 'send_message', content: 'back' });
  });

  it('the log connection cut at an arbitrary moment under load: every acknowledged message is stored once, seq gapless', async () => {
    const home = tempHome();
    homes.push(home);
    const ts = await start(home);
    const { task, workers } = await team(ts, 3);
    const acked = new Set<string>();
    let stop = false;
    let enough!: () => void;
    const reached = new Promise<void>((resolve) => (enough = resolve));
    const streams = workers.map(async (w, s) => {
      for (let i = 0; !stop; i++) {
        const res = await w.call('send_message', { to: task.root_agent_id, content: `s${s}-${i}` });
        if (!res.ok) return;
        acked.add(res.value.message_id);
        if (acked.size >= 60) enough();
      }
    });
    await reached;
    const pid = await logBackend(home);
    await withDatabase(home, (c) => c.query('SELECT pg_terminate_backend($1)', [pid]));
    stop = true;
    await Promise.all(streams);
    const ackedAtCut = [...acked];

    await Promise.allSettled(clients.splice(0).map((c) => c.close()));
    await ts.close().catch(() => undefined);
    servers.splice(servers.indexOf(ts), 1);
    const again = await start(home);
    const events = (await again.api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).body.events as Array<{
      seq: number;
      event: string;
      message_id?: string;
    }>;
    expect(isGapless(events)).toBe(true);
    const stored = events.filter((e) => e.event === 'send_message').map((e) => e.message_id);
    expect(new Set(stored).size).toBe(stored.length);
    for (const id of ackedAtCut) expect(stored).toContain(id);
  });

  it('a restart replays the database to the same registry state', async () => {
    const home = tempHome();
    homes.push(home);
    const ts = await start(home);
    const { task, root, workers, memberIds } = await team(ts, 2);
    await workers[0]!.call('send_message', { to: task.root_agent_id, content: 'one' });
    await workers[1]!.call('send_message', { to: task.root_agent_id, content: 'two' });
    expect((await root.call('read_inbox')).ok).toBe(true);
    await workers[1]!.call('send_message', { to: task.root_agent_id, content: 'three, unread' });
    expect(
      (await root.call('declare_plan', { tasks: [{ id: 'a', role: 'a', skill: 'worker', task: 'do a' }] })).ok,
    ).toBe(true);
    await ts.api('POST', `/agents/${memberIds[0]}/send`, { content: 'from the user' });
    await ts.api('POST', '/tasks', { task: 'a second task', spawn: false });
    const before = structuredClone(ts.server.services.registry.state);

    await Promise.allSettled(clients.splice(0).map((c) => c.close()));
    await ts.close();
    servers.splice(servers.indexOf(ts), 1);
    const again = await start(home);
    expect(again.server.services.registry.state).toEqual(before);
  });

  it('a corrupted row quarantines its task only; the others run', async () => {
    const home = tempHome();
    homes.push(home);
    const ts = await start(home);
    const damaged = await createTask(ts, { task: 'to be damaged' });
    const healthy = await createTask(ts, { task: 'healthy' });
    for (const t of [damaged, healthy])
      expect((await ts.api('POST', `/agents/${t.root_agent_id}/send`, { content: 'hi' })).status).toBe(200);
    await ts.close();
    servers.splice(servers.indexOf(ts), 1);
    const seq = (await storedEvents(home, damaged.task_id)).length;
    await withDatabase(home, (c) =>
      c.query(
        `UPDATE events SET body = '{"seq":99,"ts":0,"event":"send_message","task_id":"x"}' WHERE task_id = $1 AND seq = $2`,
        [damaged.task_id, seq],
      ),
    );

    const again = await start(home);
    const view = (await again.api('GET', `/tasks/${damaged.task_id}`)).body;
    expect(view).toMatchObject({
      task: { status: 'quarantined' },
      quarantine: { file: `events table, task ${damaged.task_id}`, line: seq, reason: 'its body says seq 99' },
    });
    expect(
      (await again.api('POST', `/agents/${damaged.root_agent_id}/send`, { content: 'refused' })).body,
    ).toMatchObject({ error: 'task_quarantined' });
    expect((await again.api('POST', `/agents/${healthy.root_agent_id}/send`, { content: 'fine' })).status).toBe(200);
  });

  it('text PostgreSQL cannot hold as text (U+0000, a lone surrogate) is kept exactly in the log, and replaced in the rollups', async () => {
    const home = tempHome();
    homes.push(home);
    const ts = await start(home);
    const text = 'nul \u0000 and a lone \ud800 surrogate';
    const task = await createTask(ts, { task: text });
    expect((await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content: text })).status).toBe(200);
    await ts.server.rollups.flush();
    expect(await rollupRows(home, 'SELECT text FROM tasks WHERE task_id = ?', [task.task_id])).toEqual([
      { text: 'nul \ufffd and a lone \ufffd surrogate' },
    ]);
    await ts.close();
    servers.splice(servers.indexOf(ts), 1);
    const again = await start(home);
    const events = (await again.api('GET', `/tasks/${task.task_id}/events?since=0`)).body.events as Array<{
      event: string;
      content?: string;
    }>;
    expect(events.find((e) => e.event === 'send_message')?.content).toBe(text);
    expect((await again.api('GET', `/tasks/${task.task_id}`)).body.task.text).toBe(text);
  });

  it("never logs the database URL's password, nor shows it in a refusal", async () => {
    const home = tempHome();
    homes.push(home);
    const password = 'S3cret-pg-Passw0rd';
    const url = new URL(await databaseUrlFor(home));
    url.password = password; // the test server trusts loopback, so it is never asked for; it is still in the URL
    const { logger, lines } = collectingLogger('trace');
    const ts = await start(home, { logger, env: { BEIDOU_DATABASE_URL: url.toString() } });
    const task = await createTask(ts);
    expect((await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'hi' })).status).toBe(200);
    await ts.close();
    servers.splice(servers.indexOf(ts), 1);
    expect(lines()).toContain(`postgres://postgres@${url.host}${url.pathname}`);
    expect(lines()).not.toContain(password);

    // A bad URL, and an unreachable database, are refused without it.
    expect(() => loadConfig({ home, databaseUrl: `mysql://postgres:${password}@127.0.0.1/x` }, {})).toThrow(
      ConfigError,
    );
    try {
      loadConfig({ home, databaseUrl: `mysql://postgres:${password}@127.0.0.1/x` }, {});
    } catch (err) {
      expect((err as Error).message).toBe(
        'invalid --database-url / BEIDOU_DATABASE_URL: must be a postgres:// (or postgresql://) URL',
      );
    }
    const closed = new URL(url);
    closed.port = '1';
    const other = tempHome();
    homes.push(other);
    const refusal = await startTestServer({ home: other, env: { BEIDOU_DATABASE_URL: closed.toString() } }).catch(
      (err: unknown) => err as Error,
    );
    expect((refusal as Error).message).toMatch(
      new RegExp(`^cannot connect to the database postgres://postgres@127\\.0\\.0\\.1:1${url.pathname}: `),
    );
    expect((refusal as Error).message).not.toContain(password);
  });
});
