import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { handSpawner } from '../support/spawner-stream.js';
import { durableEvents, eventsNamed, waitForEvent, waitUntil } from '../support/events.js';
import { until } from '../../src/testkit/poll.js';
import { ownProcessAlive } from '../../src/util/process.js';
import { spawnSpawner, type SpawnerProcess } from '../support/process.js';
import {
  connectAgent,
  FakeClock,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';

/**
 * Reconciliation (docs/spawner-protocol.md#reconciliation): a spawner's heartbeat reports
 * the agent processes it really runs, the server counts an agent believed running but not
 * reported as a crash, stops what is not the spawner's, and strike counts live in events;
 * agents die with their spawner. First with a hand-driven spawner, then with real ones.
 */

describe('reconciliation, hand-driven spawner', () => {
  let ts: TestServer;
  const streams: AbortController[] = [];
  const agents: TestAgent[] = [];
  afterEach(async () => {
    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    for (const s of streams.splice(0)) s.abort();
    await ts.close();
    removeHome(ts.home);
  });

  async function spawner(instance: string) {
    const { next, post } = await handSpawner(ts, instance, streams);
    /** A heartbeat reporting these agents as running (with made-up pids). */
    const beat = (ids: string[]) =>
      post('/heartbeat', { agents: ids.map((agent_id, i) => ({ agent_id, pid: 1000 + i, session_id: null })) });
    return { next, post, beat };
  }

  it('counts an agent its spawner does not run as a crash: resumed, then afresh, then [AGENT DOWN]; its inbox follows it', async () => {
    const clock = new FakeClock();
    ts = await startTestServer({ clock, env: { BEIDOU_SPAWNER_HEARTBEAT_S: '1' } });
    const s = await spawner('box-1');
    await s.next('hello');
    const task = (await ts.api('POST', '/tasks', { task: 'reconcile' })).body;
    const rootLaunch = await s.next('launch', task.root_agent_id);
    expect((await s.post(`/agents/${task.root_agent_id}/started`, { session_id: 'r-1', resumed: false })).status).toBe(
      200,
    );
    const root = await connectAgent(ts.url, rootLaunch.token);
    agents.push(root);
    const team = await root.call('create_team', {
      name: 'crew',
      task: 'work',
      roles: [{ role: 'worker', skill: 'worker', description: 'works' }],
    });
    expect(team.ok).toBe(true);
    if (!team.ok) throw new Error(JSON.stringify(team.error));
    const worker = team.value.members[0].agent_id as string;
    expect(await s.next('launch', worker)).toMatchObject({ resume: false, crash_strikes: 0, contract_strikes: 0 });
    expect((await s.post(`/agents/${worker}/started`, { session_id: 'w-1', resumed: false })).status).toBe(200);

    // A report sent before the worker's launch arrived may land after its start: not absent yet.
    expect((await s.beat([task.root_agent_id])).status).toBe(200);
    expect(eventsNamed(durableEvents(ts, task.task_id), 'agent_crashed')).toEqual([]);

    // A message waits in flight for the worker's process, which is gone.
    const sent = (await ts.api('POST', `/agents/${worker}/send`, { content: 'are you there?' })).body;
    await s.next('deliver', worker);

    // One heartbeat later it is absent: strike 1, resumed with its session, on this spawner.
    clock.advance(1);
    await s.beat([task.root_agent_id]);
    const crash1 = await waitForEvent(ts, task.task_id, (e) => e.event === 'agent_crashed', {
      what: 'the first strike',
    });
    expect(crash1).toMatchObject({ caller_id: worker, exception: 'ProcessMissing', strike_count: 1 });
    expect(await s.next('launch', worker)).toMatchObject({ resume: true, session_id: 'w-1', crash_strikes: 1 });
    expect((await ts.api('GET', `/agents/${worker}`)).body.status).toBe('launching');
    // Launched, not started yet: reports without it change nothing.
    await s.beat([task.root_agent_id]);
    expect(eventsNamed(durableEvents(ts, task.task_id), 'agent_crashed')).toHaveLength(1);
    // The undelivered message goes to the process that runs the worker now.
    await s.post(`/agents/${worker}/started`, { session_id: 'w-1', resumed: true });
    expect(await s.next('deliver', worker)).toMatchObject({ message_id: sent.message_id });

    // Strike 2 restarts it afresh.
    clock.advance(1);
    await s.beat([task.root_agent_id]);
    expect(await s.next('launch', worker)).toMatchObject({ resume: false, session_id: null, crash_strikes: 2 });
    await s.post(`/agents/${worker}/started`, { session_id: 'w-2', resumed: false });
    await s.next('deliver', worker);
    // This time it reaches the agent (an inbox with a message would relaunch a parked agent).
    await s.post('/ack', { type: 'deliver', agent_id: worker, message_id: sent.message_id });
    await waitForEvent(ts, task.task_id, (e) => e.event === 'agent_input' && e.message_id === sent.message_id, {
      what: 'the delivery',
    });

    // Strike 3: parked, and its leader hears of it.
    clock.advance(1);
    await s.beat([task.root_agent_id]);
    const down = await waitForEvent(
      ts,
      task.task_id,
      (e) => e.event === 'inbox.posted' && e.to === task.root_agent_id && e.content.startsWith('[AGENT DOWN]'),
      {
        what: '[AGENT DOWN] to the leader',
      },
    );
    expect(down.content).toContain(worker);
    const events = durableEvents(ts, task.task_id);
    expect(eventsNamed(events, 'agent_crashed').map((e) => e.strike_count)).toEqual([1, 2, 3]);
    expect(eventsNamed(events, 'agent_completed', (e) => e.agent_id === worker).map((e) => e.stop_reason)).toEqual([
      'crashed',
      'crashed',
      'crash_escalated',
    ]);
    expect((await ts.api('GET', `/agents/${worker}`)).body.status).toBe('stopped');

    // A process for an agent that is not this spawner's any more, or that does not exist, is stopped.
    await s.beat([task.root_agent_id, worker, 'ag_nobody']);
    expect(await s.next('stop', worker)).toEqual({ type: 'stop', agent_id: worker, reason: 'reassigned' });
    expect(await s.next('stop', 'ag_nobody')).toEqual({ type: 'stop', agent_id: 'ag_nobody', reason: 'unknown_agent' });
    // An older spawner's empty beat still only beats.
    expect((await s.post('/heartbeat', {})).status).toBe(200);
    expect((await s.post('/heartbeat', { agents: [{ agent_id: worker }] })).status).toBe(400);
  });
});

describe('reconciliation, real spawners', () => {
  let ts: TestServer | undefined;
  const spawners: SpawnerProcess[] = [];
  const orphans: number[] = [];
  beforeAll(() => {
    execFileSync('npx', ['tsc', '-b'], { cwd: path.resolve(import.meta.dirname, '../..'), stdio: 'inherit' });
  });
  afterEach(async () => {
    for (const s of spawners.splice(0)) {
      s.child.kill('SIGKILL');
      await s.exited;
    }
    for (const pid of orphans.splice(0)) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone, as it should be
      }
    }
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
  });

  const ENV = { BEIDOU_SPAWNER_HEARTBEAT_S: '1' };

  async function setup(env: Record<string, string> = ENV) {
    ts = await startTestServer({ env });
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const start = (script: Record<string, unknown[]>, name = 'script') => {
      const file = path.join(ts!.home, `${name}.json`);
      writeFileSync(file, JSON.stringify(script));
      const s = spawnSpawner(ts!.url, token, file, ['--workdir', path.join(ts!.home, 'agents')]);
      spawners.push(s);
      return s;
    };
    const task = (await ts.api('POST', '/tasks', { task: 'reconcile' })).body as {
      task_id: string;
      root_agent_id: string;
    };
    return { start, task };
  }

  /** The pid the agent's spawner reports running it (GET /api/spawners). */
  const reportedPid = (agentId: string) =>
    until(`a pid reported for ${agentId}`, async () => {
      const spawnersView = (await ts!.api('GET', '/spawners')).body.spawners as Array<{
        agents: Array<{ agent_id: string; pid: number | null }>;
      }>;
      return spawnersView.flatMap((s) => s.agents).find((a) => a.agent_id === agentId && a.pid)?.pid ?? undefined;
    });

  it('a spawner killed with SIGKILL takes its agents with it, even one that ignores its input closing', async () => {
    const { start, task } = await setup();
    const ready = {
      emit: { event: 'assistant_text', message_id: 'ready', text: 'deaf to stdin now', stop_reason: 'end_turn' },
    };
    const spawner = start({ root: [{ ignore_terminate: true }, ready] });
    await waitForEvent(ts!, task.task_id, (e) => e.event === 'assistant_text' && e.message_id === 'ready', {
      what: 'the agent ready',
    });
    const pid = await reportedPid(task.root_agent_id);
    orphans.push(pid);
    expect(ownProcessAlive(pid)).toBe(true);
    spawner.child.kill('SIGKILL');
    await spawner.exited;
    await until('the agent process gone', () => (ownProcessAlive(pid) ? undefined : true), 10_000);
  });

  it("a second spawner continues the first one's crash strikes", async () => {
    const { start, task } = await setup();
    // On the first spawner: a crash, then a resumed session that runs (no event line: not a clean turn).
    const first = start({ root: [{ crash: 'first crash' }], 'root@resume': [{ say: 'resumed' }] }, 'first');
    const resumed = await waitUntil(ts!, task.task_id, (ev) => eventsNamed(ev, 'agent_started')[1], {
      what: 'the resume after strike 1',
      timeoutMs: 15_000,
    });
    expect(resumed.resumed).toBe(true);
    first.child.kill('SIGKILL');
    await first.exited;
    // On the second: every session crashes. It continues at strike 2 (afresh), then escalates at 3.
    start({ root: [{ crash: 'second crash' }], 'root@resume': [{ crash: 'second crash, resumed' }] }, 'second');
    const events = await waitUntil(
      ts!,
      task.task_id,
      (ev) => (eventsNamed(ev, 'agent_completed', (e) => e.stop_reason === 'crash_escalated').length ? ev : undefined),
      {
        what: 'the escalation',
        timeoutMs: 25_000,
      },
    );
    expect(eventsNamed(events, 'agent_crashed').map((e) => e.strike_count)).toEqual([1, 2, 3]);
    const starts = eventsNamed(events, 'agent_started');
    expect(starts.map((e) => e.resumed)).toEqual([false, true, true, false]);
    expect(starts[2]!.spawner_id).not.toBe(starts[0]!.spawner_id);
  });

  it('after a server restart, an agent whose process died in the outage runs again within three heartbeats and gets its answer', async () => {
    const { start, task } = await setup();
    const ask = {
      call: 'ask_user',
      args: {
        questions: [
          {
            question: 'Go on?',
            header: 'Go',
            multiSelect: false,
            options: [
              { label: 'Yes', description: 'go on' },
              { label: 'No', description: 'stop' },
            ],
          },
        ],
      },
    };
    const got = {
      emit: { event: 'assistant_text', message_id: 'got', text: '{{answer.content}}', stop_reason: 'end_turn' },
    };
    const spawner = start({ root: [ask], 'root@resume': [{ wait: 'ANSWER', save: 'answer' }, got] });
    const asked = await waitForEvent(ts!, task.task_id, (e) => e.event === 'question_asked', { what: 'the question' });
    const { home, url } = ts!;
    const port = Number(new URL(url).port);
    await ts!.close();
    const t0 = Date.now();
    // The blocked ask_user fails with the server, and so does every restart while it is away.
    await until(
      'the spawner giving up on it, or five seconds',
      () => (/"strike":3/.test(spawner.stderr()) || Date.now() - t0 > 5_000 ? true : undefined),
      10_000,
    );
    ts = await startTestServer({ home, port, env: ENV });
    expect(ts.server.services.registry.agent(task.root_agent_id)!.running).toBe(true);
    // Once the spawner is back, the registry agrees with it within three heartbeats.
    await until(
      'the spawner reconnected',
      async () =>
        (await ts!.api('GET', '/spawners')).body.spawners.some((s: { connected: boolean }) => s.connected)
          ? true
          : undefined,
      15_000,
    );
    const back = Date.now();
    await until(
      'the agent running with a live process, or not running',
      async () => {
        const agent = ts!.server.services.registry.agent(task.root_agent_id)!;
        if (!agent.running) return true;
        const view = (await ts!.api('GET', '/spawners')).body.spawners as Array<{
          agents: Array<{ agent_id: string; pid: number | null }>;
        }>;
        const reported = view.flatMap((s) => s.agents).find((a) => a.agent_id === task.root_agent_id)?.pid;
        return reported && ownProcessAlive(reported) ? true : undefined;
      },
      3_000 + 500,
    );
    expect(Date.now() - back).toBeLessThanOrEqual(3_500);
    // The answer, given after the restart, reaches whichever process now runs the root.
    const answered = await ts.api('POST', `/questions/${asked.qid}/answer`, {
      answers: [{ selected_labels: ['Yes'] }],
    });
    expect(answered.status).toBe(200);
    const heard = await waitForEvent(ts, task.task_id, (e) => e.event === 'assistant_text' && e.message_id === 'got', {
      what: 'the agent hearing its answer',
      timeoutMs: 20_000,
    });
    expect(heard.text).toContain(`[ANSWER ${asked.qid}]`);
    const events = durableEvents(ts, task.task_id);
    const posted = eventsNamed(
      events,
      'inbox.posted',
      (e) => e.to === task.root_agent_id && e.content.startsWith(`[ANSWER ${asked.qid}]`),
    );
    expect(posted).toHaveLength(1);
    expect(eventsNamed(events, 'agent_input', (e) => e.message_id === posted[0]!.message_id)).toEqual([
      expect.objectContaining({ via: 'spawner' }),
    ]);
  });
});
