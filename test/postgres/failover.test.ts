import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import pg from 'pg';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startHaproxy, type TestHaproxy } from '../../src/testkit/haproxy.js';
import { beidou, buildCli } from '../support/cli.js';
import { until, within } from '../../src/testkit/poll.js';
import { ownProcessAlive } from '../../src/util/process.js';
import { spawnSpawner, type SpawnerProcess } from '../support/process.js';
import { adminCall, health, sharedSecrets, startReplica, untilActive, type Replica } from '../support/replicas.js';
import { connectAgent, removeHome, type TestAgent } from '../support/server.js';
import { freshDatabase } from '../support/store.js';

/**
 * What reconnects across a failover (docs/deploy.md, "What fails over"), beyond agents'
 * MCP clients (test/postgres/replicas.test.ts): real `beidou serve` replicas on the test run's
 * PostgreSQL, a real HAProxy in front, a real `beidou spawner` running scripted agents
 * (examples/scripted-agent.mjs) and real MCP SDK clients; the active replica is SIGKILLed.
 * A spawner reconnects to the new active by itself and keeps its agents (the same
 * processes, not relaunched), posts once what they said meanwhile (its spool), launches
 * what is asked after the failover and delivers to its agents; met with a standby's 503 or a refused connection it keeps retrying with
 * backoff and says why. A blocked `ask_user` ends with its connection, and its question,
 * answered on the new active, reaches the asker's inbox once.
 */

beforeAll(() => buildCli(false), 120_000);

const replicas: Replica[] = [];
const spawners: SpawnerProcess[] = [];
const closers: Array<() => Promise<unknown>> = [];
const dirs: string[] = [];
let balancer: TestHaproxy | null = null;
afterEach(async () => {
  await Promise.allSettled(closers.splice(0).map((c) => c()));
  for (const s of spawners.splice(0)) {
    if (s.child.exitCode === null) s.child.kill('SIGTERM');
    await s.exited;
  }
  await Promise.allSettled(replicas.map((r) => r.child.stop('SIGKILL')));
  for (const r of replicas.splice(0)) removeHome(r.home);
  await balancer?.stop();
  balancer = null;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function replica(db: string, port = 0): Promise<Replica> {
  const r = await startReplica(db, {}, port);
  replicas.push(r);
  return r;
}

function tmp(prefix: string): string {
  const d = mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(d);
  return d;
}

/** Two replicas (the first active) behind HAProxy, once it routes to the active one only. */
async function balanced(db: string) {
  const a = await replica(db);
  const b = await replica(db);
  balancer = await startHaproxy([a.url, b.url].map((u) => new URL(u).host));
  const lb = balancer;
  await routedTo(lb, 'UP,DOWN');
  return { a, b, lb: lb.url };
}

/** Waits until HAProxy sees the servers' states as given (`UP,DOWN`: the first one only). */
function routedTo(lb: TestHaproxy, states: string) {
  return until(
    `HAProxy seeing ${states}`,
    async () => ((await lb.servers()).map((s) => s.status).join() === states ? true : undefined),
    15_000,
  );
}

type Row = { seq: number; body: Record<string, any> };

/** The task's stored events, read from the database itself (whichever replica is active). */
async function eventReader(db: string) {
  const client = new pg.Client({ connectionString: db });
  await client.connect();
  closers.push(() => client.end());
  return async (taskId: string): Promise<Row[]> =>
    (await client.query('SELECT seq, body FROM events WHERE task_id = $1 ORDER BY seq', [taskId])).rows as Row[];
}

const named = (rows: Row[], event: string, where: (b: Record<string, any>) => boolean = () => true) =>
  rows.filter((r) => r.body.event === event && where(r.body)).map((r) => r.body);
const text = (id: string, value = id) => ({
  emit: { event: 'assistant_text', message_id: id, text: value, stop_reason: 'end_turn' },
});

/** The process a durable scripted agent runs as (it writes its pid into its working directory). */
const agentPid = (workdir: string, taskId: string, agentId: string) => {
  const file = path.join(workdir, taskId, agentId, '.scripted-agent.pid');
  return existsSync(file) ? Number(readFileSync(file, 'utf8')) : undefined;
};

interface SpawnerView {
  spawner_id: string;
  connected: boolean;
  agents: Array<{ agent_id: string; status: string; pid: number | null }>;
}

/** The admin API at whichever replica the URL reaches, retried while it answers 503 (a failover under way). */
function adminVia(url: () => string, db: string) {
  return async (method: string, route: string, body?: unknown) =>
    until(
      `${method} ${route} answered by an active replica`,
      async () => {
        const res = await adminCall(url(), db)(method, route, body).catch(() => null);
        return res && res.status !== 503 && res.status !== 502 ? res : undefined;
      },
      20_000,
    );
}

describe('a spawner across a failover', { timeout: 120_000 }, () => {
  it('SIGKILL of the active: the spawner reconnects through HAProxy by itself, keeps its agents (same processes, not relaunched), launches a spawn asked after the failover and delivers a message', async () => {
    const { url: db } = await freshDatabase();
    const { a, b, lb } = await balanced(db);
    const api = adminVia(() => lb, db);
    const events = await eventReader(db);
    const work = tmp('beidou-failover-');
    const workdir = path.join(work, 'agents');
    const scriptFile = path.join(work, 'script.json');
    const goDir = path.join(work, 'signals');
    mkdirSync(goDir);
    const goFile = path.join(goDir, 'go');
    writeFileSync(
      scriptFile,
      JSON.stringify({
        '@options': { durable: true },
        root: [
          {
            call: 'declare_plan',
            again: ['plan_already_declared'],
            args: {
              tasks: [
                { id: 'early', role: 'early', skill: 'worker', task: 'wait for a ping' },
                { id: 'late', role: 'late', skill: 'worker', task: 'start after the failover' },
              ],
            },
          },
          { call: 'spawn_agent', again: ['task_not_pending'], args: { task_id: 'early' } },
          { wait: 'spawn the late one' },
          { call: 'spawn_agent', again: ['task_not_pending'], args: { task_id: 'late' } },
        ],
        // What it says while no replica serves waits in the spawner's spool, posted once after.
        early: [
          { wait_file: goFile },
          text('during-1'),
          text('during-2'),
          { wait: 'ping after the failover', save: 'ping' },
          text('early-heard', '{{ping.content}}'),
        ],
        late: [text('late-up')],
      }),
    );
    const spawnerToken = (await api('POST', '/spawner-tokens', {})).body.token as string;
    const spawner = spawnSpawner(lb, spawnerToken, scriptFile, [
      '--workdir',
      workdir,
      '--spool-dir',
      path.join(work, 'spool'),
      // The early agent waits on a file of its own folder: the sandbox shows it (not `work`, which holds the spool).
      '--sandbox-bind',
      `${goDir}:ro`,
    ]);
    spawners.push(spawner);
    const task = (await api('POST', '/tasks', { task: 'carry on across a failover' })).body as {
      task_id: string;
      root_agent_id: string;
    };

    // Before the kill: the root ran its first two steps; the early worker runs and waits.
    const before = await until(
      'the root and the early worker running',
      async () => {
        const rows = await events(task.task_id);
        const early = named(rows, 'agent_spawned', (e) => e.name?.startsWith('early-'))[0];
        const started = new Set(named(rows, 'agent_started').map((e) => e.agent_id));
        const rootDone =
          named(rows, 'assistant_text', (e) => e.message_id === `${task.root_agent_id}:step-1`).length > 0;
        const up = early && rootDone && started.has(early.agent_id) && started.has(task.root_agent_id);
        return up && agentPid(workdir, task.task_id, early.agent_id)
          ? { rows, earlyId: early.agent_id as string }
          : undefined;
      },
      30_000,
    );
    const { earlyId } = before;
    // What the spawner reports running (its processes under their shells), at its next beat.
    const reportedPid = (view: SpawnerView[], agentId: string) =>
      view[0]?.agents.find((x) => x.agent_id === agentId)?.pid ?? undefined;
    const spawnerView = await until(
      'both agents reported by the spawner',
      async () => {
        const view = (await api('GET', '/spawners')).body.spawners as SpawnerView[];
        return reportedPid(view, task.root_agent_id) && reportedPid(view, earlyId) ? view : undefined;
      },
      15_000,
    );
    expect(spawnerView).toHaveLength(1);
    const spawnerId = spawnerView[0]!.spawner_id;
    const reported = { root: reportedPid(spawnerView, task.root_agent_id)!, early: reportedPid(spawnerView, earlyId)! };
    const pids = {
      root: agentPid(workdir, task.task_id, task.root_agent_id)!,
      early: agentPid(workdir, task.task_id, earlyId)!,
    };

    a.child.proc.kill('SIGKILL');
    writeFileSync(goFile, '');
    await untilActive(b.url, 15_000);
    // The spawner found the new active through the balancer by itself, with both agents still its own and their processes reported.
    let last: unknown = null;
    const after = await until(
      'the spawner connected to the new active with its agents',
      async () => {
        const res = await adminCall(b.url, db)('GET', '/spawners');
        const view = (res.body?.spawners ?? []) as SpawnerView[];
        last = view;
        const mine = view.find((s) => s.spawner_id === spawnerId);
        const pidOf = (id: string) => mine?.agents.find((x) => x.agent_id === id)?.pid;
        return mine?.connected && pidOf(task.root_agent_id) === reported.root && pidOf(earlyId) === reported.early
          ? view
          : undefined;
      },
      30_000,
    ).catch((err: Error) => {
      throw new Error(
        `${err.message}: ${JSON.stringify({ last, pids, spawnerId })}\nspawner:\n${spawner.stderr()}\nb:\n${b.child.stderr}`,
      );
    });
    expect(after).toHaveLength(1);
    expect(after[0]!.agents.map((x) => x.status)).toEqual(['active', 'active']);

    // After the failover: a message to the early worker is delivered, and a spawn the root asks for is launched by this spawner.
    const ping = await api('POST', `/agents/${earlyId}/send`, { content: 'ping after the failover' });
    expect(ping.status).toBe(200);
    const go = await api('POST', `/agents/${task.root_agent_id}/send`, { content: 'spawn the late one' });
    expect(go.status).toBe(200);
    const rows = await until(
      'the ping heard and the late worker up',
      async () => {
        const r = await events(task.task_id);
        const heard = named(r, 'assistant_text', (e) => e.message_id === 'early-heard').length > 0;
        const up = named(r, 'assistant_text', (e) => e.message_id === 'late-up').length > 0;
        return heard && up ? r : undefined;
      },
      30_000,
    );

    expect(named(rows, 'assistant_text', (e) => e.message_id === 'early-heard')[0]!.text).toContain(
      'ping after the failover',
    );
    for (const id of ['during-1', 'during-2'])
      expect(named(rows, 'assistant_text', (e) => e.message_id === id)).toHaveLength(1);
    for (const m of [ping.body.message_id, go.body.message_id])
      expect(named(rows, 'agent_input', (e) => e.message_id === m).map((e) => e.via)).toEqual(['spawner']);
    const late = named(rows, 'agent_spawned', (e) => e.name?.startsWith('late-'))[0]!;
    expect(named(rows, 'launch.assigned', (e) => e.agent_id === late.agent_id).map((e) => e.spawner_id)).toEqual([
      spawnerId,
    ]);
    // Each agent started once: nothing relaunched or doubled by the failover, no crash counted.
    const starts = named(rows, 'agent_started');
    expect(starts.map((e) => e.agent_id).sort()).toEqual([task.root_agent_id, earlyId, late.agent_id].sort());
    expect(starts.every((e) => e.spawner_id === spawnerId)).toBe(true);
    expect(named(rows, 'agent_crashed')).toEqual([]);
    expect(named(rows, 'agent_error')).toEqual([]);
    expect(agentPid(workdir, task.task_id, task.root_agent_id)).toBe(pids.root);
    expect(agentPid(workdir, task.task_id, earlyId)).toBe(pids.early);
    expect(ownProcessAlive(pids.root) && ownProcessAlive(pids.early)).toBe(true);
    expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));

    // One process all along, and it said what happened.
    expect(spawner.child.exitCode).toBe(null);
    expect(spawner.stderr()).toMatch(/the server is unreachable; agents keep running/);
    expect(spawner.stderr()).toMatch(/retrying in \d+(\.\d+)? s/);
  });

  it('pointed at a replica itself: a standby’s 503 (Retry-After honoured) and a refused connection are retried with backoff and logged, never an exit; it connects when that replica becomes active', async () => {
    const { url: db } = await freshDatabase();
    const a = await replica(db);
    const b = await replica(db);
    const events = await eventReader(db);
    const work = tmp('beidou-failover-');
    const workdir = path.join(work, 'agents');
    const scriptFile = path.join(work, 'script.json');
    writeFileSync(
      scriptFile,
      JSON.stringify({
        '@options': { durable: true },
        root: [{ wait: 'ping', save: 'ping' }, text('heard', '{{ping.content}}')],
      }),
    );
    const spawnerToken = (await adminCall(a.url, db)('POST', '/spawner-tokens', {})).body.token as string;
    const spawner = spawnSpawner(b.url, spawnerToken, scriptFile, [
      '--workdir',
      workdir,
      '--spool-dir',
      path.join(work, 'spool'),
    ]);
    spawners.push(spawner);

    // B is a standby: it answers 503 standby with Retry-After 3; the spawner says so and waits that long.
    await until(
      'two refusals by the standby',
      () => ((spawner.stderr().match(/is a standby replica/g) ?? []).length >= 2 ? true : undefined),
      20_000,
    );
    expect(spawner.stderr()).toMatch(
      new RegExp(`the server at ${b.url} is a standby replica \\(the active one is \\S+#${a.pid}\\); retrying in 3 s`),
    );
    expect(spawner.child.exitCode).toBe(null);

    const task = (await adminCall(a.url, db)('POST', '/tasks', { task: 'wait for a ping' })).body as {
      task_id: string;
      root_agent_id: string;
    };
    a.child.proc.kill('SIGKILL');
    await untilActive(b.url, 15_000);
    // B took over: the spawner connects to it and runs the root it queued.
    await until(
      'the root started by the spawner',
      async () => (named(await events(task.task_id), 'agent_started').length === 1 ? true : undefined),
      30_000,
    );
    const pid = await until(
      'the root pid reported to B',
      async () => {
        const view = ((await adminCall(b.url, db)('GET', '/spawners')).body?.spawners ?? []) as SpawnerView[];
        return view[0]?.agents.find((x) => x.agent_id === task.root_agent_id)?.pid ?? undefined;
      },
      15_000,
    );

    // B dies too: its port refuses connections until a replica starts there again.
    const port = Number(new URL(b.url).port);
    const logBefore = spawner.stderr().length;
    b.child.proc.kill('SIGKILL');
    await b.child.exited;
    await until(
      'three refused connections',
      () =>
        (
          spawner
            .stderr()
            .slice(logBefore)
            .match(/cannot reach the server at \S+ \(ECONNREFUSED\); retrying in/g) ?? []
        ).length >= 3
          ? true
          : undefined,
      20_000,
    );
    const delays = [
      ...spawner
        .stderr()
        .slice(logBefore)
        .matchAll(/\(ECONNREFUSED\); retrying in (\d+(?:\.\d+)?) s/g),
    ].map((m) => Number(m[1]));
    // Backoff: each wait at least the one before, doubling up to its cap.
    expect(delays.slice(0, 3)).toEqual([...delays.slice(0, 3)].sort((x, y) => x - y));
    expect(delays[2]!).toBeGreaterThan(delays[0]!);
    expect(spawner.child.exitCode).toBe(null);

    const c = await replica(db, port);
    expect(c.role).toMatch(/^role: active /);
    await until(
      'the spawner back on the replica at that port, the root still its own',
      async () => {
        const view = ((await adminCall(c.url, db)('GET', '/spawners')).body?.spawners ?? []) as SpawnerView[];
        return view[0]?.connected && view[0].agents.find((x) => x.agent_id === task.root_agent_id)?.pid === pid
          ? true
          : undefined;
      },
      30_000,
    );
    const ping = await adminCall(c.url, db)('POST', `/agents/${task.root_agent_id}/send`, {
      content: 'ping after two failovers',
    });
    expect(ping.status).toBe(200);
    const rows = await until(
      'the root heard the ping',
      async () => {
        const r = await events(task.task_id);
        return named(r, 'assistant_text', (e) => e.message_id === 'heard').length > 0 ? r : undefined;
      },
      30_000,
    );
    expect(named(rows, 'agent_started')).toHaveLength(1);
    expect(named(rows, 'agent_input', (e) => e.message_id === ping.body.message_id).map((e) => e.via)).toEqual([
      'spawner',
    ]);
    expect(ownProcessAlive(pid)).toBe(true);
    expect(spawner.child.exitCode).toBe(null);
  });
});

const SHIP = {
  question: 'Ship it?',
  header: 'Ship',
  multiSelect: false,
  options: [
    { label: 'Yes', description: 'ship' },
    { label: 'No', description: 'hold' },
  ],
};

/**
 * The root, through the balancer, blocked in `ask_user` as an agent's MCP client calls it
 * (a call that loses its connection ends: the SDK reports the cut stream as a transport
 * error); the active replica SIGKILLed; the call ended; a new session with the same token
 * once the new active serves, with the question still pending there exactly once.
 */
async function askedAcrossFailover() {
  const { url: db } = await freshDatabase();
  const { a, b, lb } = await balanced(db);
  const api = adminVia(() => lb, db);
  const events = await eventReader(db);
  const task = (await api('POST', '/tasks', { task: 'ask across a failover', spawn: false })).body as {
    task_id: string;
    root_agent_id: string;
    token: string;
  };
  const agent: TestAgent = await connectAgent(lb, task.token);
  closers.push(() => agent.close());
  const cut = new AbortController();
  agent.client.onerror = (err) => cut.abort(err);
  let qid = null as string | null;
  const asking = agent.client
    .callTool({ name: 'ask_user', arguments: { questions: [SHIP] } }, undefined, {
      signal: cut.signal,
      timeout: 600_000,
      resetTimeoutOnProgress: true,
      onprogress: (p) => (qid ??= /\b(q_[0-9a-f]+)\b/.exec(p.message ?? '')?.[1] ?? null),
    })
    .then(
      (r) => ({ returned: r as CallToolResult }),
      (err: unknown) => ({ failed: String(err) }),
    );
  // The progress names the question once it is stored.
  await until('the question stored', () => qid ?? undefined, 15_000);
  expect(((await api('GET', '/questions/pending')).body as Array<{ qid: string }>).map((q) => q.qid)).toEqual([qid]);

  a.child.proc.kill('SIGKILL');
  const ended = await within(asking, 20_000, 'the blocked ask_user ending with its connection');
  expect(ended).toHaveProperty('failed');

  await untilActive(b.url, 15_000);
  await routedTo(balancer!, 'DOWN,UP');
  const again = await until(
    'a new session on the new active',
    async () => connectAgent(lb, task.token).catch(() => undefined),
    15_000,
  );
  closers.push(() => again.close());
  // Still pending there, exactly once: not lost, not asked again.
  expect(((await api('GET', '/questions/pending')).body as Array<{ qid: string }>).map((q) => q.qid)).toEqual([qid]);
  return { db, b, lb, api, events, task, qid: qid as string, again };
}

describe('a blocked ask_user across a failover', { timeout: 120_000 }, () => {
  it('SIGKILL of the active: the blocked call ends, the agent reconnects with the same token, the user answers on the new active (beidou answer) and the answer reaches read_inbox once', async () => {
    const { db, b, lb, api, events, task, qid, again } = await askedAcrossFailover();
    const waiting = again.call('read_inbox', { wait_s: 30 });

    const answered = await beidou(['answer', qid, '--choose', 'Yes', '--server', lb], {
      BEIDOU_ADMIN_TOKEN: sharedSecrets(db).BEIDOU_ADMIN_TOKEN,
    });
    expect(answered).toMatchObject({ code: 0, stdout: `answered ${qid}\n` });
    const read = await within(waiting, 20_000, 'read_inbox returning the answer');
    expect(read.ok).toBe(true);
    const messages = (read as { value: { messages: Array<{ message_id: string; content: string; kind: string }> } })
      .value.messages;
    expect(messages).toHaveLength(1);
    expect(messages[0]!.content).toContain(`[ANSWER ${qid}] `);
    expect(messages[0]!.content).toContain('Yes');
    expect(messages[0]!.kind).toBe('answer');
    // Once: the inbox is empty after it, and nothing is waiting for the user.
    const next = await again.call('read_inbox');
    expect(next).toMatchObject({ ok: true, value: { messages: [] } });
    expect((await api('GET', '/questions/pending')).body).toEqual([]);

    const rows = await events(task.task_id);
    expect(named(rows, 'question_asked').map((e) => e.qid)).toEqual([qid]);
    expect(named(rows, 'question_answered').map((e) => [e.qid, e.by])).toEqual([[qid, 'user']]);
    const posted = named(
      rows,
      'inbox.posted',
      (e) => e.to === task.root_agent_id && e.content.startsWith(`[ANSWER ${qid}]`),
    );
    expect(posted.map((e) => e.message_id)).toEqual([messages[0]!.message_id]);
    expect(named(rows, 'agent_input', (e) => e.message_id === messages[0]!.message_id)).toHaveLength(1);
    expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));
    expect((await health(b.url)).body.role).toBe('active');
  });

  it('SIGKILL of the active: the agent, reconnected, asks the same question again; it waits for the pending one (the user sees it once) and returns its answer, with nothing in the inbox', async () => {
    const { api, events, task, qid, again } = await askedAcrossFailover();
    // The new call's first progress says which question it waits for: the one asked on the old active.
    let waitingFor = null as string | null;
    const reasked = again.client.callTool({ name: 'ask_user', arguments: { questions: [SHIP] } }, undefined, {
      timeout: 600_000,
      resetTimeoutOnProgress: true,
      onprogress: (p) => (waitingFor ??= /\b(q_[0-9a-f]+)\b/.exec(p.message ?? '')?.[1] ?? null),
    }) as Promise<CallToolResult>;
    expect(await until('the repeated call waiting', () => waitingFor ?? undefined, 10_000)).toBe(qid);
    expect(((await api('GET', '/questions/pending')).body as Array<{ qid: string }>).map((q) => q.qid)).toEqual([qid]);

    expect((await api('POST', `/questions/${qid}/answer`, { answers: [{ selected_labels: ['No'] }] })).status).toBe(
      200,
    );
    const out = await within(reasked, 20_000, 'the repeated ask_user returning the answer');
    expect(out.isError).toBeFalsy();
    expect(out.structuredContent).toMatchObject({ qid, answers: [{ selected_labels: ['No'] }] });
    expect(await again.call('read_inbox')).toMatchObject({ ok: true, value: { messages: [] } });
    const rows = await events(task.task_id);
    expect(named(rows, 'question_asked').map((e) => e.qid)).toEqual([qid]);
    expect(named(rows, 'question_answered').map((e) => e.qid)).toEqual([qid]);
    expect(named(rows, 'inbox.posted', (e) => e.to === task.root_agent_id)).toEqual([]);
    expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));
  });
});
