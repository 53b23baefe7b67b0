import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startHaproxy, type TestHaproxy } from '../../src/testkit/haproxy.js';
import { withClient } from '../../src/testkit/postgres.js';
import { buildCli } from '../support/cli.js';
import { until, within } from '../../src/testkit/poll.js';
import { adminCall, FollowingAgent, health, startReplica, untilActive, type Replica } from '../support/replicas.js';
import { connectAgent, removeHome, senderTeam, type TestAgent } from '../support/server.js';
import { freshDatabase } from '../support/store.js';

/**
 * Several replicas on one database, one active (docs/deploy.md, "Two replicas behind a load
 * balancer"): real `beidou serve` children on the test run's PostgreSQL, a real HAProxy in
 * front with `option httpchk GET /api/health`, real MCP SDK clients. What a standby
 * answers; SIGKILL of the active under load (the standby takes over within the bound,
 * nothing acknowledged lost or doubled); and a paused active (SIGSTOP until the standby
 * took over, then SIGCONT): the fence refuses its next append, it steps down and says so,
 * and nothing it was asked after the takeover exists.
 */

beforeAll(() => buildCli(false), 120_000);

const replicas: Replica[] = [];
const clients: Array<{ close(): Promise<void> } | FollowingAgent> = [];
let balancer: TestHaproxy | null = null;
afterEach(async () => {
  await Promise.allSettled(clients.splice(0).map((c) => (c instanceof FollowingAgent ? c.drop() : c.close())));
  for (const r of replicas) if (r.child.proc.exitCode === null) r.child.proc.kill('SIGCONT');
  await Promise.allSettled(replicas.map((r) => r.child.stop('SIGKILL')));
  for (const r of replicas.splice(0)) removeHome(r.home);
  await balancer?.stop();
  balancer = null;
});

async function replica(url: string): Promise<Replica> {
  const r = await startReplica(url);
  replicas.push(r);
  return r;
}

/** A task with a root and `n` workers, their tokens, created on the active replica. */
async function team(activeUrl: string, db: string, n: number) {
  const api = adminCall(activeUrl, db);
  const task = (await api('POST', '/tasks', { task: 'replicas', spawn: false })).body as {
    task_id: string;
    root_agent_id: string;
    token: string;
  };
  const root = await connectAgent(activeUrl, task.token);
  clients.push(root);
  const ids = await senderTeam(root, n);
  const tokens = await Promise.all(
    ids.map(async (id) => (await api('POST', `/agents/${id}/token`, {})).body.token as string),
  );
  await root.close();
  return { task, tokens };
}

async function storedRows(db: string, taskId: string): Promise<Array<{ seq: number; body: any }>> {
  return withClient(
    db,
    async (c) => (await c.query('SELECT seq, body FROM events WHERE task_id = $1 ORDER BY seq', [taskId])).rows,
  );
}

describe('replicas on one database', { timeout: 90_000 }, () => {
  it('a standby answers health 503 role standby, live 200, and 503 standby with Retry-After on /mcp and /api/*', async () => {
    const { url: db } = await freshDatabase();
    const a = await replica(db);
    expect(a.role).toMatch(/^role: active /);
    const b = await replica(db);
    expect(b.role).toMatch(/^role: standby \(the lease is held by \S+; taking over when it expires\)$/);

    expect(await health(a.url)).toMatchObject({ status: 200, body: { ok: true, role: 'active' } });
    const standby = await health(b.url);
    expect(standby).toMatchObject({ status: 503, body: { ok: false, role: 'standby' }, retryAfter: '3' });
    expect(standby.body.active).toMatch(/:\d+#\d+$/);
    // It follows the log to stay warm (docs/api.md, the standby's health).
    expect(standby.body.following).toMatchObject({
      position: 0,
      events: 0,
      replayed: 0,
      tasks: 0,
      archived: 0,
      diverged: null,
    });
    for (const r of [a, b]) {
      const live = await fetch(`${r.url}/api/health/live`);
      expect(live.status).toBe(200);
      expect(await live.json()).toMatchObject({ ok: true, role: r === a ? 'active' : 'standby' });
    }

    const { task } = await team(a.url, db, 1);
    const mcp = await fetch(`${b.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${task.token}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '0' } },
      }),
    });
    expect(mcp.status).toBe(503);
    expect(mcp.headers.get('retry-after')).toBe('3');
    expect(await mcp.json()).toMatchObject({ error: 'standby', details: { role: 'standby' } });
    const tasks = await adminCall(b.url, db)('GET', '/tasks');
    expect(tasks).toMatchObject({ status: 503, body: { error: 'standby' } });
    // The active one serves the same request.
    expect((await adminCall(a.url, db)('GET', '/tasks')).status).toBe(200);
  });

  it('failover: SIGKILL of the active under load; the standby takes over within 10 s through HAProxy, every acknowledged message is stored exactly once, seq gapless', async () => {
    const { url: db } = await freshDatabase();
    const a = await replica(db);
    const b = await replica(db);
    balancer = await startHaproxy([a.url, b.url].map((u) => new URL(u).host));
    const lb = balancer.url;
    // HAProxy counts a server up until its first check: wait until it routes to the active one only.
    await until('HAProxy routing to the active replica only', async () => {
      const states = (await balancer!.servers()).map((s) => s.status);
      return states.join() === 'UP,DOWN' ? true : undefined;
    });
    const { task, tokens } = await team(lb, db, 4);

    const senders = tokens.map((t) => new FollowingAgent(() => lb, t));
    clients.push(...senders);
    const acked: string[] = [];
    let killedAt = 0;
    let firstAfterKill = 0;
    let stop = false;
    const loops = senders.map(async (s, i) => {
      for (let n = 0; !stop; n++) {
        const started = performance.now();
        const out = await s.tryCall('send_message', { to: task.root_agent_id, content: `s${i}-${n}` });
        if (out?.ok) {
          acked.push(out.value.message_id as string);
          // Only a call sent after the kill can have been served by the new active.
          if (killedAt && started > killedAt && !firstAfterKill) firstAfterKill = performance.now();
        }
        // A failed call is retried on a new session; it waits on the balancer finding the active, not on a timer of ours.
        if (!out?.ok)
          await until(
            'a replica answering',
            async () => (await fetch(`${lb}/api/health`).catch(() => null))?.status === 200 || stop || undefined,
            20_000,
          );
      }
    });

    await until('100 acknowledged', () => (acked.length >= 100 ? true : undefined), 30_000);
    a.child.proc.kill('SIGKILL');
    killedAt = performance.now();
    const ackedBeforeKill = acked.length;
    await until('a send acknowledged by the new active', () => (firstAfterKill ? true : undefined), 20_000);
    const failoverMs = firstAfterKill - killedAt;
    expect(failoverMs).toBeLessThan(10_000);
    await until('100 more acknowledged', () => (acked.length >= ackedBeforeKill + 100 ? true : undefined), 30_000);
    stop = true;
    await within(Promise.all(loops), 30_000, 'the senders stop');
    console.log(
      `failover (SIGKILL of the active → first send_message acknowledged through HAProxy): ${Math.round(failoverMs)} ms`,
    );

    expect((await health(b.url)).body.role).toBe('active');
    // Warm: it had followed the load, and read only the last moments at the takeover.
    const took =
      /took over the lease from \S+ \(epoch \d+ → \d+; its connection was gone\): active; warm \(read (\d+) events at the takeover, (\d+) followed as a standby\)/.exec(
        b.child.stderr,
      );
    expect(took, b.child.stderr).not.toBeNull();
    expect(Number(took![2])).toBeGreaterThan(100);
    expect(Number(took![1])).toBeLessThan(Number(took![2]));
    const rows = await storedRows(db, task.task_id);
    expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));
    const sent = rows.filter((r) => r.body.event === 'send_message').map((r) => r.body.message_id as string);
    expect(new Set(sent).size).toBe(sent.length);
    for (const id of acked) expect(sent.filter((s) => s === id)).toHaveLength(1);
    // The senders reconnected (a new session each, the same token) through the balancer.
    expect(senders.filter((s) => s.reconnects >= 2).length).toBeGreaterThan(0);

    // The recipient, connecting anew, reads every stored message exactly once from the new active.
    const root = await connectAgent(lb, task.token);
    clients.push(root);
    const delivered: string[] = [];
    for (;;) {
      const read = await root.call('read_inbox');
      if (!read.ok) throw new Error(JSON.stringify(read.error));
      const ids = (read.value.messages as Array<{ message_id: string }>).map((m) => m.message_id);
      if (ids.length === 0) break;
      delivered.push(...ids);
    }
    expect(new Set(delivered).size).toBe(delivered.length);
    expect(new Set(delivered)).toEqual(new Set(sent));
  });

  it('split brain: the active SIGSTOPped until the standby took over, then SIGCONTed: its next append is refused by the fence, it steps down and says so; what it was asked after the takeover does not exist', async () => {
    const { url: db } = await freshDatabase();
    const a = await replica(db);
    const b = await replica(db);
    const { task, tokens } = await team(a.url, db, 1);
    const agent: TestAgent = await connectAgent(a.url, tokens[0]!);
    clients.push(agent);
    const before = await agent.call('send_message', { to: task.root_agent_id, content: 'before the pause' });
    expect(before.ok).toBe(true);
    const epochBefore = (await withClient(db, (c) => c.query('SELECT epoch FROM log_writer'))).rows[0].epoch;

    a.child.proc.kill('SIGSTOP');
    // Its connection stays open (a paused process): only the lease running out lets the standby in.
    await untilActive(b.url, 15_000);
    const epochAfter = (await withClient(db, (c) => c.query('SELECT epoch FROM log_writer'))).rows[0].epoch;
    expect(Number(epochAfter)).toBe(Number(epochBefore) + 1);

    // Asked while paused, answered after it resumes: it must fail, not succeed.
    const during = agent
      .call('send_message', { to: task.root_agent_id, content: 'asked of the old active' })
      .catch((err: unknown) => ({ ok: false as const, thrown: String(err) }));
    // A load balancer's check, waiting while it is paused: it must not be told 200 (the
    // lease is unconfirmed since the pause), or it would route new work to a fenced replica.
    const checked = health(a.url);
    a.child.proc.kill('SIGCONT');
    const outcome = await within(during, 15_000, 'the old active answers');
    expect(outcome.ok).toBe(false);
    const check = await within(checked, 15_000, 'the old active answers its health check');
    expect(check.status).toBe(503);
    expect(check.body.role === 'standby' || check.body.lease === 'unconfirmed').toBe(true);

    await until(
      'the old active says it stepped down',
      () =>
        /lost the lease to \S+ \(epoch \d+ → \d+\): stepping down to standby/.test(a.child.stderr) ? true : undefined,
      15_000,
    );
    const line = /lost the lease to (\S+) \(epoch (\d+) → (\d+)\): stepping down to standby/.exec(a.child.stderr)!;
    const holderNow = (await withClient(db, (c) => c.query('SELECT holder FROM log_writer'))).rows[0].holder as string;
    expect(line[1]).toBe(holderNow);
    expect(holderNow).toBe(`${holderNow.split(':')[0]}:${new URL(b.url).port}#${b.pid}`);
    expect([Number(line[2]), Number(line[3])]).toEqual([Number(epochBefore), Number(epochAfter)]);
    expect(await health(a.url)).toMatchObject({ status: 503, body: { role: 'standby' } });
    expect(a.child.proc.exitCode).toBe(null); // a standby in the same process

    const rows = await storedRows(db, task.task_id);
    const contents = rows.filter((r) => r.body.event === 'send_message').map((r) => r.body.content);
    expect(contents).toContain('before the pause');
    expect(contents).not.toContain('asked of the old active');
    expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));

    // The new active serves the agent on a new session with the same token.
    const again = await connectAgent(b.url, tokens[0]!);
    clients.push(again);
    expect((await again.call('send_message', { to: task.root_agent_id, content: 'after the takeover' })).ok).toBe(true);
  });
});
