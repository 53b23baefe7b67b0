import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { messageDrafts } from '../../src/domain/messages.js';
import { durableEvents, eventsNamed } from '../support/events.js';
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
 * The watchdog on a fake clock: the timer is set far beyond the test (an hour), the test
 * moves the server's clock by hand and runs one watchdog pass at a time with `tick()`. So
 * each rung of a ladder is checked at the exact second it becomes due, and one second
 * before it, with no sleep anywhere.
 */

const REVIEW_PING_S = 60;
const IDLE_NUDGE_S = 120;

const t = (id: string) => ({ id, role: `role-${id}`, skill: 'worker', task: `do ${id}`, depends_on: [] as string[] });

describe('watchdog (fake clock)', () => {
  let ts: TestServer;
  let clock: FakeClock;
  const agents: TestAgent[] = [];

  beforeEach(async () => {
    clock = new FakeClock();
    ts = await startTestServer({
      clock,
      env: {
        BEIDOU_WATCHDOG_S: '3600',
        BEIDOU_REVIEW_PING_S: String(REVIEW_PING_S),
        BEIDOU_IDLE_NUDGE_S: String(IDLE_NUDGE_S),
      },
    });
  });
  afterEach(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    await ts.close();
    removeHome(ts.home);
  });

  async function ok(p: Promise<ToolOutcome>): Promise<any> {
    const r = await p;
    if (!r.ok) throw new Error(`tool failed: ${JSON.stringify(r.error)}`);
    return r.value;
  }

  async function connect(token: string): Promise<TestAgent> {
    const agent = await connectAgent(ts.url, token);
    agents.push(agent);
    return agent;
  }

  /** Advances the clock, runs one watchdog pass, and returns the events it committed. */
  async function passAfter(seconds: number, taskId: string) {
    const before = durableEvents(ts, taskId).length;
    clock.advance(seconds);
    await ts.server.watchdog.tick();
    return durableEvents(ts, taskId).slice(before);
  }

  it('pass A: pings at exactly the ping interval, twice, then escalates once, then stays silent', async () => {
    const task = await createTask(ts);
    const root = await connect(task.token);
    await ok(root.call('declare_plan', { tasks: [t('a')] }));
    const aId = (await ok(root.call('spawn_agent', { task_id: 'a' }))).agent_id as string;
    const a = await connect(await agentToken(ts, aId));
    await ok(a.call('signal_review', { detail: '[REVIEW REQUIRED] a is ready' }));
    const names = (events: Array<{ event: string }>) => events.map((e) => e.event);

    expect(names(await passAfter(REVIEW_PING_S - 1, task.task_id))).toEqual([]);
    const ping1 = await passAfter(1, task.task_id);
    expect(names(ping1)).toEqual(['inbox.posted', 'completion.reping']);
    expect(ping1[1]).toMatchObject({ agent_id: aId, leader_id: task.root_agent_id, ping_count: 1, pending: 'review' });
    expect(ping1[0]!.content).toContain(`${REVIEW_PING_S} s ago`);
    // The next ping is an interval after the last one, not after the hand-off.
    expect(names(await passAfter(0, task.task_id))).toEqual([]);
    expect(names(await passAfter(REVIEW_PING_S - 1, task.task_id))).toEqual([]);
    const ping2 = await passAfter(1, task.task_id);
    expect(ping2[1]).toMatchObject({ event: 'completion.reping', ping_count: 2 });
    const escalation = await passAfter(REVIEW_PING_S, task.task_id);
    expect(names(escalation)).toEqual(['question_asked', 'review.escalated_to_user']);
    expect(escalation[0]).toMatchObject({
      asker: 'beidou',
      origin: 'review_escalation',
      subject_agent_id: task.root_agent_id,
    });
    expect(escalation[0]!.questions[0].question).toContain(`waited ${3 * REVIEW_PING_S} s`);
    // Silent from then on, however long it waits.
    expect(
      names(await passAfter(10 * REVIEW_PING_S, task.task_id)).filter(
        (n) => n !== 'liveness.nudge' && n !== 'inbox.posted',
      ),
    ).toEqual([]);
    const all = durableEvents(ts, task.task_id);
    expect(eventsNamed(all, 'completion.reping')).toHaveLength(2);
    expect(eventsNamed(all, 'review.escalated_to_user')).toHaveLength(1);
    expect(eventsNamed(all, 'watchdog.exception')).toEqual([]);
  });

  it('pass B: nudges an idle root at the nudge time, twice, escalates, and a tool call restarts the ladder', async () => {
    const task = await createTask(ts);
    const rootId = task.root_agent_id;
    const root = await connect(task.token);
    await ok(root.call('declare_plan', { tasks: [t('a')] }));
    await ok(root.call('spawn_agent', { task_id: 'a' }));
    const nudgesOf = (events: Array<Record<string, any>>) =>
      events.filter((e) => e.event === 'liveness.nudge' && e.agent_id === rootId);

    expect(nudgesOf(await passAfter(IDLE_NUDGE_S - 1, task.task_id))).toEqual([]);
    const first = nudgesOf(await passAfter(1, task.task_id));
    expect(first).toEqual([expect.objectContaining({ nudge_count: 1, idle_s: IDLE_NUDGE_S })]);
    expect(nudgesOf(await passAfter(IDLE_NUDGE_S - 1, task.task_id))).toEqual([]);
    expect(nudgesOf(await passAfter(1, task.task_id))).toEqual([
      expect.objectContaining({ nudge_count: 2, idle_s: 2 * IDLE_NUDGE_S }),
    ]);
    const third = await passAfter(IDLE_NUDGE_S, task.task_id);
    expect(third.filter((e) => e.event === 'liveness.escalated_to_user')).toEqual([
      expect.objectContaining({ agent_id: rootId, idle_s: 3 * IDLE_NUDGE_S }),
    ]);
    expect(nudgesOf(await passAfter(5 * IDLE_NUDGE_S, task.task_id))).toEqual([]);

    // A read-only call is activity too: the ladder starts again from one, an idle period later.
    await ok(root.call('list_peers', {}));
    expect(nudgesOf(await passAfter(IDLE_NUDGE_S - 1, task.task_id))).toEqual([]);
    expect(nudgesOf(await passAfter(1, task.task_id))).toEqual([expect.objectContaining({ nudge_count: 1 })]);
    expect(eventsNamed(durableEvents(ts, task.task_id), 'watchdog.exception')).toEqual([]);
  });

  it('each decision sees what landed while the previous watchdog commit was being written', async () => {
    const task = await createTask(ts);
    const rootId = task.root_agent_id;
    const root = await connect(task.token);
    await ok(root.call('declare_plan', { tasks: [t('a'), t('b')] }));
    const aId = (await ok(root.call('spawn_agent', { task_id: 'a' }))).agent_id as string;
    const bId = (await ok(root.call('spawn_agent', { task_id: 'b' }))).agent_id as string;
    for (const id of [aId, bId])
      await ok((await connect(await agentToken(ts, id))).call('signal_review', { detail: '[REVIEW REQUIRED] ready' }));

    // The moment a's ping is applied (before it is on disk), the root's rework to b is
    // committed too: it lands while the watchdog waits for a's ping to be durable.
    const { registry, domain } = ts.server.services;
    let reworked = false;
    const unsubscribe = registry.observe((events) => {
      if (
        reworked ||
        !events.some((e) => e.event === 'completion.reping' && (e as { agent_id?: string }).agent_id === aId)
      )
        return;
      reworked = true;
      queueMicrotask(() => void registry.commit(messageDrafts(domain, rootId, registry.agent(bId)!, 'rework please')));
    });
    const committed = await passAfter(REVIEW_PING_S, task.task_id);
    unsubscribe();
    expect(reworked).toBe(true);
    // b's review was acknowledged before the watchdog got to b: b is not pinged about it.
    expect(committed.filter((e) => e.event === 'completion.reping').map((e) => e.agent_id)).toEqual([aId]);
    expect(committed.filter((e) => e.event === 'review.acknowledged').map((e) => e.agent_id)).toEqual([bId]);
    expect(committed.filter((e) => e.event === 'inbox.posted' && String(e.content).includes(bId))).toEqual([]);
  });
});
