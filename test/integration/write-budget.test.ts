import { afterEach, describe, expect, it } from 'vitest';
import { apiEvents, type AnyEvent } from '../support/events.js';
import { handSpawner } from '../support/spawner-stream.js';
import { storedPlans } from '../support/store.js';
import {
  agentToken,
  connectAgent,
  createTask,
  FakeClock,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
  type ToolOutcome,
} from '../support/server.js';

/**
 * An agent's write budget (BEIDOU_MAX_WRITE_BYTES_PER_MINUTE) and the bound on a live task's
 * events in memory (BEIDOU_LIVE_EVENTS_IN_MEMORY), over the real server and real MCP
 * clients, on both stores. The budget is read on the server's one clock, moved here by
 * hand: nothing waits on real time. What memory holds is measured by `npm run bench`
 * (section "write budget"); the PostgreSQL log and standby cases are in test/postgres/live-window.test.ts.
 */

const BUDGET = 300_000;
const big = (n: number, tag: string) => `${tag} ${'w'.repeat(n)}`;

function value<T = any>(outcome: ToolOutcome<T>): T {
  if (!outcome.ok) throw new Error(`expected success, got ${JSON.stringify(outcome.error)}`);
  return outcome.value;
}

describe('the write budget and the live window', () => {
  let ts: TestServer | null = null;
  const agents: TestAgent[] = [];
  const streams: AbortController[] = [];

  async function connect(s: TestServer, token: string) {
    const agent = await connectAgent(s.url, token);
    agents.push(agent);
    return agent;
  }
  /** A task whose root leads one worker: the ids and both clients. */
  async function taskWithWorker(s: TestServer, name: string) {
    const task = await createTask(s, { name });
    const root = await connect(s, task.token);
    const made = value(
      await root.call('create_team', {
        name: 'crew',
        task: 'work',
        roles: [{ role: 'looper', skill: 'worker', description: 'loops' }],
      }),
    );
    const workerId = (made.members as Array<{ agent_id: string }>)[0]!.agent_id;
    return { task, root, workerId, worker: await connect(s, await agentToken(s, workerId)) };
  }
  const seqOf = async (s: TestServer, taskId: string) => (await apiEvents(s, taskId)).length;

  afterEach(async () => {
    for (const stream of streams.splice(0)) stream.abort();
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = null;
    }
  });

  it('a looping agent is refused rate_limited past its budget, the refusal writes nothing, and other agents and the server write on', async () => {
    const clock = new FakeClock();
    ts = await startTestServer({
      clock,
      env: { BEIDOU_MAX_WRITE_BYTES_PER_MINUTE: String(BUDGET), BEIDOU_WATCHDOG_S: '3600' },
    });
    const a = await taskWithWorker(ts, 'looping');
    const b = await taskWithWorker(ts, 'bystander');

    // The worker replans in a loop with large plans: declare_plan, remove_plan, again.
    const plan = (i: number) => ({
      tasks: [0, 1].map((k) => ({ id: `t${k}`, role: `r${k}`, skill: 'worker', task: big(30_000, `plan ${i}.${k}`) })),
    });
    let refused: ToolOutcome | null = null;
    let declared = 0;
    for (let i = 0; i < 40 && !refused; i++) {
      const outcome = await a.worker.call('declare_plan', plan(i));
      if (!outcome.ok) refused = outcome;
      else {
        declared++;
        const removed = await a.worker.call('remove_plan');
        if (!removed.ok) refused = removed;
      }
    }
    // About a budget's worth of 60 KB plans: the one that crossed it was written whole, none after.
    expect(declared).toBeGreaterThan(3);
    expect(declared).toBeLessThanOrEqual(Math.ceil(BUDGET / 60_000) + 1);
    expect(refused).toMatchObject({
      ok: false,
      error: { error: 'rate_limited', details: { setting: 'BEIDOU_MAX_WRITE_BYTES_PER_MINUTE' } },
    });
    const retryAfter = (refused as Extract<ToolOutcome, { ok: false }>).error.details.retry_after_s as number;
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);

    // Refused, it changes nothing: no event, no plan file, whichever writing tool it calls.
    const events = await apiEvents(ts, a.task.task_id);
    const plans = await storedPlans(ts.home, a.task.task_id);
    for (const [tool, args] of [
      ['declare_plan', plan(99)],
      ['signal_review', { detail: big(40_000, '[REVIEW REQUIRED]') }],
      ['send_message', { to: a.task.root_agent_id, content: 'one more' }],
      ['ask_user', { questions: [{ question: 'go on?', header: '', multiSelect: false, options: [] }] }],
    ] as const) {
      const outcome = await a.worker.call(tool, args);
      expect(outcome, tool).toMatchObject({ ok: false, error: { error: 'rate_limited' } });
    }
    // Claude Code's hook still denies a shadow tool, without recording the denial.
    const hook = await fetch(`${ts.url}/api/hook/pre-tool-use`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await agentToken(ts, a.workerId)}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tool_name: 'SendMessage' }),
    });
    expect(hook.status).toBe(200);
    expect(await hook.json()).toMatchObject({ decision: 'deny' });
    expect(await apiEvents(ts, a.task.task_id)).toEqual(events);
    expect(await storedPlans(ts.home, a.task.task_id)).toEqual(plans);

    // It can still read (what it reads is what others wrote), and be told to stop: its
    // leader and the user write to it, the server's own messages are never metered.
    expect((await a.worker.call('list_peers')).ok).toBe(true);
    value(await a.root.call('send_message', { to: a.workerId, content: 'stop looping' }));
    expect((await ts.api('POST', `/agents/${a.workerId}/send`, { content: 'from the user' })).status).toBe(200);
    const inbox = value(await a.worker.call('read_inbox', { wait_s: 0 }));
    expect((inbox.messages as Array<{ content: string }>).map((m) => m.content)).toEqual([
      'stop looping',
      'from the user',
    ]);
    // Another task's agents are unaffected.
    value(await b.worker.call('send_message', { to: b.task.root_agent_id, content: 'still here' }));
    value(await b.worker.call('declare_plan', plan(0)));

    // Once the time it named has passed, it writes again.
    const before = await seqOf(ts, a.task.task_id);
    clock.advance(retryAfter);
    value(await a.worker.call('send_message', { to: a.task.root_agent_id, content: 'back, within budget' }));
    expect(await seqOf(ts, a.task.task_id)).toBe(before + 1);
  });

  it('concurrent plan calls near the budget are decided before any file is touched: the agent can always replan', async () => {
    const clock = new FakeClock();
    ts = await startTestServer({
      clock,
      env: { BEIDOU_MAX_WRITE_BYTES_PER_MINUTE: String(BUDGET), BEIDOU_WATCHDOG_S: '3600' },
    });
    const a = await taskWithWorker(ts, 'racing');
    // Spend most of the budget, then race a large declare_plan, a remove_plan and a question:
    // all pass the early check, only what the budget admits at once may touch anything.
    for (let i = 0; i < 5; i++)
      value(await a.worker.call('send_message', { to: a.task.root_agent_id, content: big(50_000, `m${i}`) }));
    const planOf = (tag: string, n: number) => ({
      tasks: [{ id: 'a', role: 'r', skill: 'worker', task: big(n, tag) }],
    });
    const [declared, removed] = await Promise.all([
      a.worker.call('declare_plan', planOf('first', 150_000)),
      a.worker.call('remove_plan'),
    ]);
    // In either order, the one plan is declared whole and the removal changed nothing.
    expect(declared.ok).toBe(true);
    expect(removed.ok).toBe(false);
    expect(['rate_limited', 'no_active_plan']).toContain((removed as Extract<ToolOutcome, { ok: false }>).error.error);
    const planId = value(declared).plan_id as string;
    expect(await storedPlans(ts.home, a.task.task_id)).toEqual([`${planId}.json`]);

    // Drained, it removes and declares again, as often as it likes.
    clock.advance(120);
    const state = ts.server.services.registry.state;
    const before = ts.server.services.questions.size;
    expect(value(await a.worker.call('remove_plan')).removed_plan_id).toBe(planId);
    const again = value(await a.worker.call('declare_plan', planOf('second', 10)));
    expect(await storedPlans(ts.home, a.task.task_id)).toEqual(
      [`${planId}.removed.json`, `${again.plan_id as string}.json`].sort(),
    );
    value(await a.worker.call('remove_plan'));

    // Two questions race near the budget: the one refused at its commit leaves no waiter behind.
    clock.advance(120);
    for (let i = 0; i < 5; i++)
      value(await a.worker.call('send_message', { to: a.task.root_agent_id, content: big(50_000, `n${i}`) }));
    const ask = (tag: string) =>
      a.worker.call('ask_user', {
        questions: [{ question: big(60_000, tag), header: '', multiSelect: false, options: [] }],
      });
    const asks = [ask('one'), ask('two')];
    const first = await Promise.race(asks);
    expect(first).toMatchObject({ ok: false, error: { error: 'rate_limited' } });
    const pending = [...state.questions.values()].filter((q) => q.asker === a.workerId && q.status === 'pending');
    expect(pending).toHaveLength(1);
    expect(ts.server.services.questions.size).toBe(before + 1);
    const qid = pending[0]!.qid;
    expect((await ts.api('POST', `/questions/${qid}/answer`, { answers: [{ text: 'done' }] })).status).toBe(200);
    const answered = await Promise.all(asks);
    expect(answered.filter((o) => o.ok)).toHaveLength(1);
    expect(ts.server.services.questions.size).toBe(before);
  });

  it("what a spawner posts for an agent is charged to the agent's budget, never refused: past it, the bulky fields are cut", async () => {
    const clock = new FakeClock();
    ts = await startTestServer({
      clock,
      env: { BEIDOU_MAX_WRITE_BYTES_PER_MINUTE: String(BUDGET), BEIDOU_WATCHDOG_S: '3600' },
    });
    const spawner = await handSpawner(ts, 'box', streams);
    await spawner.next('hello');
    const task = (await ts.api('POST', '/tasks', { task: 'prints a lot' })).body;
    const launch = await spawner.next('launch');
    const agentId = task.root_agent_id as string;
    expect((await spawner.post(`/agents/${agentId}/started`, { session_id: 's', resumed: false })).status).toBe(200);
    const agent = await connect(ts, launch.token);
    const post = (events: unknown[]) => spawner.post(`/agents/${agentId}/events`, { events });
    const text = (t: string) => ({ event: 'assistant_text', message_id: 'm', text: t, stop_reason: null });
    const called = (id: string, input: unknown) => ({
      event: 'tool_called',
      message_id: 'm',
      tool_use_id: id,
      name: 'Bash',
      input,
    });

    // Within the budget a batch is taken whole, the one that crosses it too: then the agent's own calls are refused.
    expect(await post([text(big(BUDGET, 'first'))])).toMatchObject({ status: 200, body: { accepted: 1 } });
    expect(await agent.call('send_message', { to: agentId, content: 'x' })).toMatchObject({
      ok: false,
      error: { error: 'rate_limited' },
    });
    // Past it, the batch is still taken (supervision lands), its bulky fields cut.
    const cost = {
      event: 'run.cost',
      total_cost_usd: 0.5,
      duration_ms: 1,
      duration_api_ms: 1,
      num_turns: 1,
      usage: {},
      model_usage: {},
    };
    const after = await post([
      text(big(100_000, 'second')),
      called('tu_1', { command: big(100_000, 'input') }),
      { event: 'tool_result', tool_use_id: 'tu_1', duration_ms: 1, is_error: true, error_reason: big(50_000, 'why') },
      cost,
    ]);
    expect(after).toMatchObject({ status: 200, body: { accepted: 4 } });
    const events = (await apiEvents(ts, task.task_id)).slice(-4);
    expect(events.map((e) => e.event)).toEqual(['assistant_text', 'tool_called', 'tool_result', 'run.cost']);
    expect(events[0]!.text).toBe('[cut: the agent was past its write budget]');
    expect(events[1]).toMatchObject({ tool_use_id: 'tu_1', name: 'Bash', input: null });
    expect(events[2]!.error_reason).toBe('[cut: the agent was past its write budget]');
    expect(events[3]).toMatchObject({ total_cost_usd: 0.5 });
    expect(JSON.stringify(events).length).toBeLessThan(2_000);

    // Ids and names are bounded, and so are the tool uses an agent keeps open.
    expect(await post([called('u'.repeat(300), null)])).toMatchObject({
      status: 400,
      body: { error: 'invalid_input' },
    });
    for (let b = 0; b < 3; b++)
      expect((await post(Array.from({ length: 500 }, (_, k) => called(`tu_${b}_${k}`, null)))).status).toBe(200);
    const open = ts.server.services.registry.state.agents.get(agentId)!.open_tool_uses;
    expect(open.size).toBe(1000);
    expect(open.has('tu_2_499')).toBe(true);
    expect(open.has('tu_0_0')).toBe(false);
  });

  it('a task with more events than BEIDOU_LIVE_EVENTS_IN_MEMORY is read from seq 1, streamed from seq 1 and followed live, before and after a restart', async () => {
    const env = { BEIDOU_LIVE_EVENTS_IN_MEMORY: '20', BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY: '5000' };
    ts = await startTestServer({ env });
    const task = await createTask(ts, { name: 'long' });
    const sent = Array.from({ length: 90 }, (_, i) => `note ${i} ${'n'.repeat(i)}`);
    for (const content of sent)
      expect((await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content })).status).toBe(200);

    const check = async (s: TestServer, extra: string[] = []) => {
      const events = await apiEvents(s, task.task_id);
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
      const notes = events.filter((e) => e.event === 'send_message').map((e) => e.content);
      expect(notes).toEqual([...sent, ...extra]);
      const held = s.server.services.registry.log.inMemory(task.task_id);
      expect(held.events).toBeLessThanOrEqual(20);
      expect(held.bytes).toBeLessThanOrEqual(5000);
      // The stream replays from seq 1 and then follows: a message sent once it caught up arrives.
      const stream = await openStream(s, task.task_id);
      try {
        expect((await stream.next(events.length)).map((e) => e.seq)).toEqual(events.map((e) => e.seq));
        const live = `live ${extra.length}`;
        expect((await s.api('POST', `/agents/${task.root_agent_id}/send`, { content: live })).status).toBe(200);
        expect((await stream.next(1))[0]).toMatchObject({ seq: events.length + 1, content: live });
        return live;
      } finally {
        stream.close();
      }
    };
    const first = await check(ts);
    await ts.close();
    ts = await startTestServer({ home: ts.home, env });
    await check(ts, [first]);
  });
});

/** A task's SSE event stream from seq 1, read event by event. */
async function openStream(ts: TestServer, taskId: string) {
  const abort = new AbortController();
  const res = await fetch(`${ts.url}/api/tasks/${taskId}/events/stream`, {
    headers: { authorization: `Bearer ${ts.adminToken}` },
    signal: abort.signal,
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const queued: AnyEvent[] = [];
  let text = '';
  return {
    /** The next `n` events, waiting for them as they come. */
    async next(n: number): Promise<AnyEvent[]> {
      while (queued.length < n) {
        const { value: chunk, done } = await reader.read();
        if (done) throw new Error(`the stream ended after ${queued.length} of ${n} events`);
        text += Buffer.from(chunk).toString('utf8');
        const blocks = text.split('\n\n');
        text = blocks.pop()!;
        for (const block of blocks) {
          const data = block
            .split('\n')
            .filter((l) => l.startsWith('data:'))
            .map((l) => l.slice(5))
            .join('\n');
          if (data.trim()) queued.push(JSON.parse(data));
        }
      }
      return queued.splice(0, n);
    },
    close: () => abort.abort(),
  };
}
