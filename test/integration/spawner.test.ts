import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runDemo } from '../../src/demo/main.js';
import { eventsNamed, waitForEvent, waitUntil, type AnyEvent } from '../support/events.js';
import { spawnSpawner, type SpawnerProcess } from '../support/process.js';
import { removeHome, startTestServer, type TestServer } from '../support/server.js';
import { rollupRows } from '../support/store.js';

/** The spawner with real child processes: scripted agents through the command adapter. */
describe('spawner', () => {
  let ts: TestServer | undefined;
  const spawners: SpawnerProcess[] = [];
  beforeAll(() => {
    execFileSync('npx', ['tsc', '-b'], { cwd: path.resolve(import.meta.dirname, '../..'), stdio: 'inherit' });
  });
  afterEach(async () => {
    for (const s of spawners.splice(0)) {
      s.child.kill('SIGKILL');
      await s.exited;
    }
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
  });

  async function setup(script: Record<string, unknown[]>, env: Record<string, string> = {}) {
    ts = await startTestServer({ env });
    const scriptFile = path.join(ts.home, 'script.json');
    writeFileSync(scriptFile, JSON.stringify(script));
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const start = () => {
      const s = spawnSpawner(ts!.url, token, scriptFile, ['--workdir', path.join(ts!.home, 'agents')]);
      spawners.push(s);
      return s;
    };
    const task = (await ts.api('POST', '/tasks', { task: 'scripted' })).body as {
      task_id: string;
      root_agent_id: string;
    };
    return { ts, start, task, token, scriptFile };
  }

  it("runs the demo's three-agent task to completion, as its event log shows", async () => {
    const { events } = await runDemo({ quiet: true });
    const at = (pred: (e: AnyEvent) => boolean) => (events as AnyEvent[]).findIndex(pred);
    const byName = (name: string) => (events as AnyEvent[]).filter((e) => e.event === name);
    const spawned = byName('agent_spawned');
    expect(spawned.map((e) => e.role)).toEqual([null, 'researcher', 'writer']);
    for (const a of spawned) {
      // Every agent was launched by the spawner and ended by a consumed sentinel.
      expect(at((e) => e.event === 'agent_started' && e.agent_id === a.agent_id)).toBeGreaterThan(-1);
      expect(
        at((e) => e.event === 'terminate.consumed' && e.agent_id === a.agent_id && e.via === 'spawner'),
      ).toBeGreaterThan(-1);
    }
    expect(at((e) => e.event === 'plan_declared')).toBeLessThan(at((e) => e.event === 'team_created'));
    expect(at((e) => e.event === 'team_created')).toBeLessThan(
      at((e) => e.event === 'agent_spawned' && e.role === 'researcher'),
    );
    // The writer's question was answered by its leader, not the user.
    const asked = byName('question_asked').find((e) => e.origin === 'ask_user')!;
    expect(byName('question_answered').find((e) => e.qid === asked.qid)).toMatchObject({
      by: spawned[0]!.agent_id,
      answer_text: 'Tone: Formal',
    });
    // Reviews: the researcher approved, the writer reworked once then approved, readiness advanced.
    expect(byName('completion.approved')).toHaveLength(2);
    expect(byName('review.acknowledged')).toHaveLength(1);
    expect(at((e) => e.event === 'task_done' && e.plan_task_id === 'research')).toBeLessThan(
      at((e) => e.event === 'task_ready' && e.plan_task_id === 'write'),
    );
    // Messages reached agents through the spawner, each exactly once.
    const inputs = byName('agent_input');
    expect(inputs.length).toBeGreaterThan(0);
    expect(inputs.every((e) => e.via === 'spawner')).toBe(true);
    expect(new Set(inputs.map((e) => e.message_id)).size).toBe(inputs.length);
    // The user approved the root at the gateway; the cascade ended the task.
    expect(byName('completion.reported')).toEqual([
      expect.objectContaining({ via: 'user_gateway', decision: 'approve' }),
    ]);
    expect(byName('task_ended')).toEqual([expect.objectContaining({ status: 'done', reason: 'root_approved' })]);
  });

  it('appends drained events and rolls tokens, cost, tool and LLM calls up into the agents table', async () => {
    const usage = (id: string, input: number, output: number) => ({
      emit: {
        event: 'turn.usage',
        message_id: id,
        model: 'm',
        stop_reason: 'end_turn',
        input_tokens: input,
        output_tokens: output,
      },
    });
    const { start, task } = await setup({
      root: [
        usage('m1', 100, 10),
        { emit: { event: 'tool_called', message_id: 'm1', tool_use_id: 't1', name: 'Read', input: { path: 'x' } } },
        { emit: { event: 'tool_result', tool_use_id: 't1', duration_ms: 12, is_error: false, error_reason: null } },
        usage('m2', 50, 5),
        // Posted in order per agent: this refusal is settled before run.cost arrives.
        { emit: { event: 'no_such_event' } },
        {
          emit: {
            event: 'run.cost',
            total_cost_usd: 0.25,
            duration_ms: 900,
            duration_api_ms: 800,
            num_turns: 2,
            usage: {},
            model_usage: {},
          },
        },
      ],
    });
    start();
    await waitForEvent(ts!, task.task_id, (e) => e.event === 'run.cost', { what: 'the drained run.cost' });
    const events = await waitUntil(ts!, task.task_id, (ev) => ev);
    expect(eventsNamed(events, 'turn.usage').map((e) => [e.caller_id, e.message_id])).toEqual([
      [task.root_agent_id, 'm1'],
      [task.root_agent_id, 'm2'],
    ]);
    // An unknown event is refused whole and appends nothing.
    expect(events.some((e) => e.event === ('no_such_event' as string))).toBe(false);
    // Rollups are batched off the hot path; flush the batch rather than wait for its timer.
    await ts!.server.rollups.flush();
    const [agent] = await rollupRows(ts!.home, 'SELECT * FROM agents WHERE agent_id = ?', [task.root_agent_id]);
    expect(agent).toMatchObject({ input_tokens: 150, output_tokens: 15, cost_usd: 0.25, tool_calls: 1, llm_calls: 2 });
  });

  it('resumes an agent that exits on its own, and escalates on the third strike', async () => {
    const { start, task } = await setup({ root: [{ exit: 0 }], 'root@resume': [{ exit: 0 }] });
    start();
    const root = task.root_agent_id;
    const events = await waitUntil(
      ts!,
      task.task_id,
      (ev) => (eventsNamed(ev, 'question_asked', (e) => e.origin === 'agent_failure').length ? ev : undefined),
      {
        what: 'the escalation to the user',
        timeoutMs: 20_000,
      },
    );
    expect(eventsNamed(events, 'contract_violation').map((e) => [e.strike_count, e.action])).toEqual([
      [1, 'resumed'],
      [2, 'resumed'],
      [3, 'escalated_to_user'],
    ]);
    expect(eventsNamed(events, 'agent_started').map((e) => e.resumed)).toEqual([false, true, true]);
    expect(eventsNamed(events, 'agent_completed').at(-1)).toMatchObject({
      agent_id: root,
      stop_reason: 'contract_violation_escalated',
    });
    expect((await ts!.api('GET', `/agents/${root}`)).body.status).toBe('stopped');
    // A message brings it back: a spawner resumes it.
    await ts!.api('POST', `/agents/${root}/send`, { content: 'try again' });
    await waitUntil(ts!, task.task_id, (ev) => (eventsNamed(ev, 'agent_started').length === 4 ? true : undefined), {
      what: 'a relaunch',
      timeoutMs: 20_000,
    });
  });

  it('resumes a crashed agent, then restarts it afresh, then escalates', async () => {
    const { start, task } = await setup({ root: [{ crash: 'segfault in the scripted agent' }] });
    start();
    const events = await waitUntil(
      ts!,
      task.task_id,
      (ev) => (eventsNamed(ev, 'agent_completed', (e) => e.stop_reason === 'crash_escalated').length ? ev : undefined),
      {
        what: 'the crash escalation',
        timeoutMs: 20_000,
      },
    );
    const crashes = eventsNamed(events, 'agent_crashed');
    expect(crashes.map((e) => e.strike_count)).toEqual([1, 2, 3]);
    expect(crashes[0]!.stderr).toContain('segfault in the scripted agent');
    expect(crashes[0]!.msg).toBe('exited with code 1');
    const starts = eventsNamed(events, 'agent_started');
    // Strike 1 resumes the same session; strike 2 is a fresh restart with a new session.
    expect(starts.map((e) => e.resumed)).toEqual([false, true, false]);
    expect(starts[1]!.session_id).toBe(starts[0]!.session_id);
    expect(starts[2]!.session_id).not.toBe(starts[0]!.session_id);
    expect(eventsNamed(events, 'root_crash_escalation')).toEqual([
      expect.objectContaining({ agent_id: task.root_agent_id, crash_strikes: 3 }),
    ]);
    await waitForEvent(ts!, task.task_id, (e) => e.event === 'question_asked' && e.origin === 'agent_failure', {
      what: 'the gateway question',
    });
  });

  it('kills an agent that ignores termination after the grace time', async () => {
    const ready = {
      emit: { event: 'assistant_text', message_id: 'ready', text: 'ignoring termination now', stop_reason: 'end_turn' },
    };
    const { start, task } = await setup(
      { root: [{ ignore_terminate: true }, ready] },
      { BEIDOU_TERMINATE_GRACE_S: '0.5' },
    );
    start();
    // Terminate only once the agent is past its ignore_terminate step.
    await waitForEvent(ts!, task.task_id, (e) => e.event === 'assistant_text' && e.message_id === 'ready', {
      what: 'the agent ready',
    });
    expect((await ts!.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
    const consumed = await waitForEvent(ts!, task.task_id, (e) => e.event === 'terminate.consumed', {
      what: 'the consumed sentinel',
      timeoutMs: 15_000,
    });
    expect(consumed.via).toBe('spawner');
    const events = await waitUntil(ts!, task.task_id, (ev) => ev);
    expect(eventsNamed(events, 'terminate.forced')).toEqual([
      expect.objectContaining({ agent_id: task.root_agent_id, caller_id: 'watchdog', reason: 'watchdog_grace' }),
    ]);
    expect(eventsNamed(events, 'agent_completed')).toEqual([expect.objectContaining({ terminated: true })]);
  });

  it('hands the agents of a spawner that stops heartbeating to another, which resumes them', async () => {
    const { start, task } = await setup({ root: [{ say: 'working' }] }, { BEIDOU_SPAWNER_HEARTBEAT_S: '0.2' });
    const first = start();
    const started = await waitForEvent(ts!, task.task_id, (e) => e.event === 'agent_started', {
      what: 'the first start',
    });
    first.child.kill('SIGKILL');
    await first.exited;
    const lost = await waitForEvent(ts!, task.task_id, (e) => e.event === 'spawner.lost', {
      what: 'the lost spawner',
      timeoutMs: 15_000,
    });
    expect(lost).toMatchObject({ spawner_id: started.spawner_id, agent_ids: [task.root_agent_id] });
    expect((await ts!.api('GET', `/agents/${task.root_agent_id}`)).body.status).toBe('waiting_for_spawner');
    start();
    const resumed = await waitForEvent(ts!, task.task_id, (e) => e.event === 'agent_started' && e.seq > lost.seq, {
      what: 'the resume',
      timeoutMs: 15_000,
    });
    expect(resumed).toMatchObject({ resumed: true, session_id: started.session_id });
    expect(resumed.spawner_id).not.toBe(started.spawner_id);
    // Its inbox now flows through the new spawner.
    const sent = (await ts!.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'still there?' })).body;
    const input = await waitForEvent(
      ts!,
      task.task_id,
      (e) => e.event === 'agent_input' && e.message_id === sent.message_id,
      { what: 'the delivery' },
    );
    expect(input.via).toBe('spawner');
  });
});
