import { afterEach, describe, expect, it } from 'vitest';
import { AGENT_STDERR_MAX_CHARS } from '../../src/events/catalogue.js';
import { handSpawner } from '../support/spawner-stream.js';
import { durableEvents, eventsNamed, waitForEvent } from '../support/events.js';
import { connectAgent, FakeClock, removeHome, startTestServer, type TestServer } from '../support/server.js';

/**
 * The spawner protocol over plain HTTP, with a hand-driven spawner: every command and post
 * of docs/spawner-protocol.md, and the refusals that keep it safe.
 */
describe('spawner protocol', () => {
  let ts: TestServer;
  const streams: AbortController[] = [];
  afterEach(async () => {
    for (const s of streams.splice(0)) s.abort();
    await ts.close();
    removeHome(ts.home);
  });

  /** A spawner identity (token + instance) with its command stream open. */
  async function spawner(instance: string, maxAgents = 4) {
    const s = await handSpawner(ts, instance, streams, maxAgents);
    expect(s.status).toBe(200);
    return s;
  }

  it('hello, launch, started, deliver and ack, drained events, terminate and ack', async () => {
    ts = await startTestServer();
    const s = await spawner('box-1');
    const hello = await s.next('hello');
    expect(hello).toMatchObject({ type: 'hello', heartbeat_s: 5, terminate_grace_s: 60, agents: [] });
    expect(hello.spawner_id).toMatch(/\.box-1$/);
    const task = (await ts.api('POST', '/tasks', { task: 'protocol' })).body;
    const launch = await s.next('launch');
    expect(launch).toMatchObject({
      agent_id: task.root_agent_id,
      task_id: task.task_id,
      resume: false,
      is_root: true,
      first_message: 'protocol',
    });
    expect(launch.prompt).toContain('## Persistent-agent contract');
    // The launch carries the agent's own working token, never written to the event log.
    const agent = await connectAgent(ts.url, launch.token);
    expect((await agent.call('list_peers')).ok).toBe(true);
    await agent.close();

    expect(
      await s.post(`/agents/${task.root_agent_id}/started`, { session_id: 'sess-1', resumed: false }),
    ).toMatchObject({ status: 200 });
    const started = await waitForEvent(ts, task.task_id, (e) => e.event === 'agent_started');
    expect(started).toMatchObject({ session_id: 'sess-1', spawner_id: hello.spawner_id, template: 'leader' });

    const sent = (await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'hello agent' })).body;
    const deliver = await s.next('deliver');
    expect(deliver).toMatchObject({
      message_id: sent.message_id,
      from: 'user',
      content: '[from user (user)] hello agent',
    });
    // Reserved for the spawner: no other path may take it meanwhile.
    const other = await connectAgent(ts.url, launch.token);
    expect((await other.call('read_inbox')).raw.structuredContent).toEqual({ messages: [] });
    await other.close();
    expect(
      (await s.post('/ack', { type: 'deliver', agent_id: task.root_agent_id, message_id: sent.message_id })).status,
    ).toBe(200);
    const input = await waitForEvent(
      ts,
      task.task_id,
      (e) => e.event === 'agent_input' && e.message_id === sent.message_id,
    );
    expect(input.via).toBe('spawner');

    // Drained events: validated, identity from the route.
    const events = await s.post(`/agents/${task.root_agent_id}/events`, {
      events: [
        { event: 'assistant_text', message_id: 'm1', text: 'hi', stop_reason: 'end_turn', caller_id: 'ag_forged' },
      ],
    });
    expect(events).toMatchObject({ status: 200, body: { accepted: 1 } });
    const text = await waitForEvent(ts, task.task_id, (e) => e.event === 'assistant_text');
    expect(text.caller_id).toBe(task.root_agent_id);
    const bad = await s.post(`/agents/${task.root_agent_id}/events`, {
      events: [
        { event: 'assistant_text', message_id: 'm2', text: 'fine', stop_reason: null },
        { event: 'turn.usage', message_id: 'm2', input_tokens: -1 },
      ],
    });
    expect(bad).toMatchObject({ status: 400, body: { error: 'invalid_input' } });
    expect(bad.body.details.field).toMatch(/^events\[1\]\./);
    const notAllowed = await s.post(`/agents/${task.root_agent_id}/events`, {
      events: [{ event: 'task_ended', status: 'done', reason: 'x' }],
    });
    expect(notAllowed).toMatchObject({ status: 400, body: { details: { field: 'events[0].event' } } });
    // An agent's stderr tail is bounded by what a spawner's ring holds: megabytes are refused.
    const flood = await s.post(`/agents/${task.root_agent_id}/events`, {
      events: [
        { event: 'agent_error', exception: 'ProcessExit', msg: 'x', stderr: 'e'.repeat(AGENT_STDERR_MAX_CHARS + 1) },
      ],
    });
    expect(flood).toMatchObject({
      status: 400,
      body: { error: 'invalid_input', details: { field: 'events[0].stderr' } },
    });

    expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
    expect(await s.next('terminate')).toEqual({ type: 'terminate', agent_id: task.root_agent_id });
    // Until the spawner acknowledges, the agent exists but may not act.
    const dying = await connectAgent(ts.url, launch.token);
    expect(await dying.call('list_peers')).toMatchObject({ ok: false, error: { error: 'agent_terminated' } });
    await dying.close();
    expect((await s.post('/ack', { type: 'terminate', agent_id: task.root_agent_id })).status).toBe(200);
    const consumed = await waitForEvent(ts, task.task_id, (e) => e.event === 'terminate.consumed');
    expect(consumed.via).toBe('spawner');
    // A repeated ack is harmless; the slot is free; the token is dead.
    expect((await s.post('/ack', { type: 'terminate', agent_id: task.root_agent_id })).status).toBe(200);
    expect((await ts.api('GET', '/spawners')).body.spawners[0].agents).toEqual([]);
    const refused = await fetch(`${ts.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${launch.token}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(refused.status).toBe(401);
  });

  it('refuses what a spawner may not do: other agents, starting a terminated agent, a missing instance, agent tokens', async () => {
    ts = await startTestServer();
    const a = await spawner('a', 1);
    await a.next('hello');
    const first = (await ts.api('POST', '/tasks', { task: 'one' })).body;
    await a.next('launch');
    // max_agents 1: the second task waits for room.
    const second = (await ts.api('POST', '/tasks', { task: 'two' })).body;
    const b = await spawner('b', 1);
    await b.next('hello');
    const launchB = await b.next('launch');
    expect(launchB.agent_id).toBe(second.root_agent_id);
    expect(await b.post(`/agents/${first.root_agent_id}/started`, {})).toMatchObject({
      status: 409,
      body: { error: 'not_your_agent' },
    });
    expect(await b.post('/ack', { type: 'deliver', agent_id: first.root_agent_id, message_id: 'msg_x' })).toMatchObject(
      { status: 409 },
    );

    // Terminated before its process reported a start: the start is refused (end the process).
    expect((await ts.api('POST', `/tasks/${first.task_id}/terminate`, {})).status).toBe(200);
    expect(await a.next('terminate')).toMatchObject({ agent_id: first.root_agent_id });
    expect(await a.post(`/agents/${first.root_agent_id}/started`, {})).toMatchObject({
      status: 409,
      body: { error: 'not_your_agent' },
    });
    // Its acknowledgement frees the slot: a third task lands on spawner a.
    await a.post('/ack', { type: 'terminate', agent_id: first.root_agent_id });
    const third = (await ts.api('POST', '/tasks', { task: 'three' })).body;
    expect((await a.next('launch')).agent_id).toBe(third.root_agent_id);

    const noInstance = await fetch(`${ts.url}/api/spawner/heartbeat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.token}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(noInstance.status).toBe(400);
    const agentToken = await fetch(`${ts.url}/api/spawner/heartbeat`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${launchB.token}`,
        'beidou-spawner-instance': 'x',
        'content-type': 'application/json',
      },
      body: '{}',
    });
    expect(agentToken.status).toBe(401);
    expect(((await agentToken.json()) as { error: string }).error).toBe('wrong_token_kind');
  });

  // The one "a message from the leader is rework" rule serves both senders: an agent (or the
  // user) through send_message, and the user's Rework at the gateway. An agent already on its
  // way out keeps its hand-off: the rework message is recorded, the review is not acknowledged.
  it('a Rework for a root that is being terminated does not acknowledge its review', async () => {
    ts = await startTestServer();
    const s = await spawner('box-1');
    await s.next('hello');
    const task = (await ts.api('POST', '/tasks', { task: 'rework guard' })).body;
    const launch = await s.next('launch');
    expect(
      await s.post(`/agents/${task.root_agent_id}/started`, { session_id: 'sess-1', resumed: false }),
    ).toMatchObject({ status: 200 });
    const root = await connectAgent(ts.url, launch.token);
    expect((await root.call('signal_review', { detail: '[REVIEW REQUIRED] all done' })).ok).toBe(true);
    await root.close();
    const question = await waitForEvent(
      ts,
      task.task_id,
      (e) => e.event === 'question_asked' && e.origin === 'root_review',
    );

    // The task is terminated; the spawner has the terminate command but has not acknowledged it.
    expect(await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).toMatchObject({ status: 200 });
    await s.next('terminate');
    expect(ts.server.services.registry.agent(task.root_agent_id)).toMatchObject({
      terminate_posted: true,
      terminate_consumed: false,
    });

    const answered = await ts.api('POST', `/questions/${question.qid}/answer`, {
      answers: [{ selected_labels: ['Rework'], text: 'one more pass' }],
    });
    expect(answered).toMatchObject({ status: 200 });
    const all = durableEvents(ts, task.task_id);
    const answer = eventsNamed(all, 'question_answered')[0]!;
    expect(eventsNamed(all, 'completion.reported')).toEqual([
      expect.objectContaining({ decision: 'rework', seq: answer.seq + 1 }),
    ]);
    expect(eventsNamed(all, 'send_message', (e) => e.caller_id === 'user')).toEqual([
      expect.objectContaining({ to: task.root_agent_id, content: 'one more pass' }),
    ]);
    expect(eventsNamed(all, 'review.acknowledged')).toEqual([]);
    expect(ts.server.services.registry.agent(task.root_agent_id)!.review).not.toBeNull();
  });

  // Lost spawners are released one at a time: a spawner that beats while another one's
  // loss is being committed keeps its agents (and takes over the lost one's).
  it('a heartbeat that lands while another spawner is being released counts', async () => {
    const clock = new FakeClock();
    ts = await startTestServer({ clock, env: { BEIDOU_SPAWNER_HEARTBEAT_S: '0.05' } });
    const a = await spawner('box-a', 2);
    const helloA = await a.next('hello');
    const b = await spawner('box-b', 2);
    const helloB = await b.next('hello');
    const t1 = (await ts.api('POST', '/tasks', { task: 'one' })).body;
    const t2 = (await ts.api('POST', '/tasks', { task: 'two' })).body;
    await waitForEvent(ts, t1.task_id, (e) => e.event === 'launch.assigned');
    await waitForEvent(ts, t2.task_id, (e) => e.event === 'launch.assigned');
    const { registry } = ts.server.services;
    const onA = [t1, t2].find((t) => registry.agent(t.root_agent_id)!.spawner_id === helloA.spawner_id)!;
    const onB = [t1, t2].find((t) => registry.agent(t.root_agent_id)!.spawner_id === helloB.spawner_id)!;
    expect(onA).toBeDefined();
    expect(onB).toBeDefined();

    // Both fall silent past three beats; B's beat arrives while A's loss is being committed.
    const unsubscribe = registry.observe((events) => {
      if (
        events.some(
          (e) => e.event === 'spawner.lost' && (e as { spawner_id?: string }).spawner_id === helloA.spawner_id,
        )
      ) {
        ts.server.services.spawners.heartbeat(helloB.spawner_id);
      }
    });
    clock.advance(1);
    const outcome = await Promise.race([
      waitForEvent(ts, onA.task_id, (e) => e.event === 'launch.assigned' && e.spawner_id === helloB.spawner_id, {
        what: "A's agent taken over by B",
      }),
      waitForEvent(ts, onB.task_id, (e) => e.event === 'spawner.lost', { what: 'B lost' }),
    ]);
    unsubscribe();
    expect(outcome).toMatchObject({
      event: 'launch.assigned',
      agent_id: onA.root_agent_id,
      spawner_id: helloB.spawner_id,
    });
    await b.next('launch');
    expect(registry.agent(onB.root_agent_id)!.spawner_id).toBe(helloB.spawner_id);
    expect(durableEvents(ts, onB.task_id).filter((e) => e.event === 'spawner.lost')).toEqual([]);
    const view = (await ts.api('GET', '/spawners')).body.spawners as Array<{
      spawner_id: string;
      connected: boolean;
      agents: unknown[];
    }>;
    expect(view.find((v) => v.spawner_id === helloB.spawner_id)).toMatchObject({
      connected: true,
      agents: [expect.anything(), expect.anything()],
    });
  });
});
