import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { durableEvents, eventsNamed, waitForEvent, type AnyEvent } from '../support/events.js';
import {
  agentToken,
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
  type ToolOutcome,
} from '../support/server.js';

/**
 * The server's watchdog (docs/architecture.md) with short intervals: pass A (a pending review pings the
 * leader twice, then escalates to the user gateway, then stays silent) and pass B (an idle
 * root or leader is nudged twice, then escalated; activity restarts the ladder). Every wait
 * is on an event (the in-process log subscription), never on a fixed sleep.
 */

const WATCHDOG_S = 0.05;
const REVIEW_PING_S = 0.2;
const IDLE_NUDGE_S = 0.3;
/** Event `ts` and the watchdog's clock are the same clock (seconds); allow for float rounding only. */
const EPS = 1e-6;

const t = (id: string, skill = 'worker') => ({
  id,
  role: `role-${id}`,
  skill,
  task: `do ${id}`,
  depends_on: [] as string[],
});

describe('watchdog', () => {
  let ts: TestServer;
  const agents: TestAgent[] = [];

  beforeEach(async () => {
    ts = await startTestServer({
      env: {
        BEIDOU_WATCHDOG_S: String(WATCHDOG_S),
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

  async function newRoot() {
    const task = await createTask(ts); // spawn: false, so the root has no queued launch
    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    return { root, rootId: task.root_agent_id, taskId: task.task_id };
  }

  async function connectAs(agentId: string): Promise<TestAgent> {
    const agent = await connectAgent(ts.url, await agentToken(ts, agentId));
    agents.push(agent);
    return agent;
  }

  async function ok(p: Promise<ToolOutcome>): Promise<any> {
    const r = await p;
    if (!r.ok) throw new Error(`tool failed: ${JSON.stringify(r.error)}`);
    return r.value;
  }

  /** Polls the in-process activity table (yielding to the event loop, no timer) until the agent has a call in flight. */
  async function untilBusy(agentId: string, timeoutMs = 5_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!ts.server.services.activity.busy(agentId)) {
      if (Date.now() > deadline) throw new Error(`${agentId} never had a tool call in flight`);
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** The event just before `e` in the log, which the watchdog commits in the same batch. */
  const eventBefore = (all: AnyEvent[], e: AnyEvent) => all.find((x) => x.seq === e.seq - 1);

  it('pass A: pings the leader twice, escalates to the user once, then stays silent; the user answer reaches the leader', async () => {
    const { root, rootId, taskId } = await newRoot();
    await ok(root.call('declare_plan', { tasks: [t('a'), t('b')] }));
    const aId = (await ok(root.call('spawn_agent', { task_id: 'a' }))).agent_id as string;
    const bId = (await ok(root.call('spawn_agent', { task_id: 'b' }))).agent_id as string;
    const a = await connectAs(aId);
    const b = await connectAs(bId);

    await ok(a.call('signal_review', { detail: '[REVIEW REQUIRED] a is ready' }));
    const forA = (e: AnyEvent) => e.agent_id === aId;
    const escalation = await waitForEvent(ts, taskId, (e) => e.event === 'review.escalated_to_user' && forA(e), {
      what: 'review.escalated_to_user for a',
    });

    let all = durableEvents(ts, taskId);
    const signalled = eventsNamed(all, 'status', (e) => forA(e) && e.state === 'review_pending')[0]!;
    const repings = eventsNamed(all, 'completion.reping', forA);
    expect(repings.map((e) => [e.ping_count, e.leader_id, e.pending])).toEqual([
      [1, rootId, 'review'],
      [2, rootId, 'review'],
    ]);
    // Each ping went to the leader's inbox as a [REVIEW PENDING] message, in the same batch.
    for (const reping of repings) {
      expect(eventBefore(all, reping)).toMatchObject({
        event: 'inbox.posted',
        to: rootId,
        from: 'beidou',
        kind: 'system',
      });
      expect(eventBefore(all, reping)!.content).toMatch(/^\[REVIEW PENDING\]/);
      expect(eventBefore(all, reping)!.content).toContain(aId);
    }
    // Spaced by the ping interval: signal -> ping 1 -> ping 2 -> escalation.
    const times = [signalled.ts, repings[0]!.ts, repings[1]!.ts, escalation.ts];
    for (let i = 1; i < times.length; i++)
      expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(REVIEW_PING_S - EPS);
    expect(escalation).toMatchObject({ leader_id: rootId, pending: 'review' });
    expect(escalation.seq).toBeGreaterThan(repings[1]!.seq);
    const qid = escalation.qid as string;
    expect(qid).toEqual(expect.any(String));

    const inbox = (await ok(root.call('read_inbox', { peek: true }))).messages as Array<{
      from: string;
      content: string;
    }>;
    expect(
      inbox.filter((m) => m.from === 'beidou' && m.content.startsWith('[REVIEW PENDING]') && m.content.includes(aId)),
    ).toHaveLength(2);

    const pending = (await ts.api('GET', '/questions/pending')).body as Array<Record<string, any>>;
    const question = pending.find((q) => q.qid === qid);
    expect(question).toMatchObject({
      task_id: taskId,
      origin: 'review_escalation',
      subject_agent_id: rootId,
      asker_agent_id: 'beidou',
      chain: ['user'],
    });
    expect(question!.questions).toHaveLength(1);
    expect(question!.questions[0]).toMatchObject({ multiSelect: false, options: [] });

    // Silence after the escalation: b's whole ladder (three more ping intervals) runs to its
    // own escalation, and a gets nothing more in the meantime.
    await ok(b.call('signal_review', { detail: '[REVIEW REQUIRED] b is ready' }));
    await waitForEvent(ts, taskId, (e) => e.event === 'review.escalated_to_user' && e.agent_id === bId, {
      what: 'review.escalated_to_user for b',
    });
    all = durableEvents(ts, taskId);
    expect(eventsNamed(all, 'completion.reping', (e) => e.agent_id === bId).map((e) => e.ping_count)).toEqual([1, 2]);
    expect(eventsNamed(all, 'completion.reping', forA)).toHaveLength(2);
    expect(eventsNamed(all, 'review.escalated_to_user', forA)).toHaveLength(1);
    expect(eventsNamed(all, 'question_asked', (e) => e.origin === 'review_escalation' && e.qid === qid)).toHaveLength(
      1,
    );

    // The user answers the gateway question: the answer lands in the leader's inbox from "user".
    const answered = await ts.api('POST', `/questions/${qid}/answer`, {
      answers: [{ selected_labels: [], text: 'approve it' }],
    });
    expect(answered).toMatchObject({ status: 200, body: { ok: true } });
    const after = (await ok(root.call('read_inbox', { peek: true }))).messages as Array<{
      from: string;
      kind: string;
      content: string;
    }>;
    // (The rendered answer carries the sub-question's header as a prefix: "Stuck review: approve it".)
    expect(after.filter((m) => m.from === 'user')).toEqual([
      expect.objectContaining({ kind: 'user', content: expect.stringContaining('approve it') }),
    ]);
    expect(eventsNamed(durableEvents(ts, taskId), 'send_message', (e) => e.caller_id === 'user')).toEqual([
      expect.objectContaining({ to: rootId, content: expect.stringContaining('approve it') }),
    ]);
    const stillPending = (await ts.api('GET', '/questions/pending')).body as Array<{ qid: string }>;
    expect(stillPending.map((q) => q.qid)).not.toContain(qid);

    expect(eventsNamed(durableEvents(ts, taskId), 'watchdog.exception')).toEqual([]);
  });

  it('pass B: nudges an idle root with a live child twice, escalates, and activity restarts the ladder', async () => {
    const { root, rootId, taskId } = await newRoot();
    await ok(root.call('declare_plan', { tasks: [t('a')] }));
    const aId = (await ok(root.call('spawn_agent', { task_id: 'a' }))).agent_id as string;

    const escalation = await waitForEvent(
      ts,
      taskId,
      (e) => e.event === 'liveness.escalated_to_user' && e.agent_id === rootId,
      {
        what: 'liveness.escalated_to_user for the root',
      },
    );
    let all = durableEvents(ts, taskId);
    const spawned = eventsNamed(all, 'task_spawned', (e) => e.agent_id === aId)[0]!;
    const nudges = eventsNamed(all, 'liveness.nudge', (e) => e.agent_id === rootId);
    expect(nudges.map((e) => e.nudge_count)).toEqual([1, 2]);
    for (const nudge of nudges) {
      expect(eventBefore(all, nudge)).toMatchObject({
        event: 'inbox.posted',
        to: rootId,
        from: 'beidou',
        kind: 'system',
      });
      expect(eventBefore(all, nudge)!.content).toMatch(/^\[LIVENESS\]/);
      expect(nudge.idle_s).toBeGreaterThanOrEqual(IDLE_NUDGE_S - EPS);
    }
    const times = [spawned.ts, nudges[0]!.ts, nudges[1]!.ts, escalation.ts];
    for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(IDLE_NUDGE_S - EPS);
    // Only the root: the child leads nobody (and its launch is queued).
    expect(eventsNamed(all, 'liveness.nudge', (e) => e.agent_id === aId)).toEqual([]);

    const qid = escalation.qid as string;
    const pending = (await ts.api('GET', '/questions/pending')).body as Array<Record<string, any>>;
    expect(pending.find((q) => q.qid === qid)).toMatchObject({
      origin: 'liveness_escalation',
      subject_agent_id: rootId,
      asker_agent_id: 'beidou',
    });

    // Activity: the root messages its child. The ladder restarts from 1 ...
    await ok(root.call('send_message', { to: aId, content: 'how is it going?' }));
    const sentSeq = eventsNamed(durableEvents(ts, taskId), 'send_message', (e) => e.caller_id === rootId)[0]!.seq;
    const renewed = await waitForEvent(
      ts,
      taskId,
      (e) => e.event === 'liveness.nudge' && e.agent_id === rootId && e.seq > sentSeq,
      {
        what: 'a new liveness.nudge after the root acted',
      },
    );
    expect(renewed.nudge_count).toBe(1);
    // ... and climbs again to a second escalation.
    const second = await waitForEvent(
      ts,
      taskId,
      (e) => e.event === 'liveness.escalated_to_user' && e.agent_id === rootId && e.seq > sentSeq,
      {
        what: 'a second liveness escalation',
      },
    );
    all = durableEvents(ts, taskId);
    expect(
      eventsNamed(all, 'liveness.nudge', (e) => e.agent_id === rootId && e.seq > sentSeq).map((e) => e.nudge_count),
    ).toEqual([1, 2]);
    expect(second.qid).not.toBe(qid);
    // Between the first escalation and the root's message it was silent.
    expect(
      eventsNamed(all, 'liveness.nudge', (e) => e.agent_id === rootId && e.seq > escalation.seq && e.seq < sentSeq),
    ).toEqual([]);

    expect(eventsNamed(all, 'watchdog.exception')).toEqual([]);
  });

  it('pass B: a tool call in flight (read_inbox waiting) holds the nudge off', async () => {
    const { root, rootId, taskId } = await newRoot();
    await ok(root.call('declare_plan', { tasks: [t('a')] }));
    const aId = (await ok(root.call('spawn_agent', { task_id: 'a' }))).agent_id as string;
    const a = await connectAs(aId);
    // The root blocks in read_inbox; while it waits, the watchdog must not nudge it.
    const waiting = root.call('read_inbox', { wait_s: 30 });
    await untilBusy(rootId);
    // A marker that several idle periods have passed: a sibling task's root, idle from now on,
    // climbs its own ladder to the second nudge (≥ 2 × IDLE_NUDGE_S).
    const marker = await newRoot();
    await ok(marker.root.call('declare_plan', { tasks: [t('m')] }));
    await ok(marker.root.call('spawn_agent', { task_id: 'm' }));
    await waitForEvent(ts, marker.taskId, (e) => e.event === 'liveness.nudge' && e.nudge_count === 2, {
      what: 'the marker root second nudge',
    });
    expect(eventsNamed(durableEvents(ts, taskId), 'liveness.nudge', (e) => e.agent_id === rootId)).toEqual([]);
    // Wake the root up (the child messages it) and let the call return.
    await ok(a.call('send_message', { to: rootId, content: 'done soon' }));
    const read = await waiting;
    expect(read.ok).toBe(true);
    // Idle from here on: the next nudge is the first one.
    const nudge = await waitForEvent(ts, taskId, (e) => e.event === 'liveness.nudge' && e.agent_id === rootId, {
      what: 'the root nudge after its call',
    });
    expect(nudge.nudge_count).toBe(1);
  });

  // An agent with children that has run (here it declared a plan and spawned over
  // MCP itself) is nudged when idle, even though its launch is still queued for a spawner.
  it('pass B: a sub-leader that ran (declared a plan and spawned a child itself) is nudged when idle', async () => {
    const { root, rootId, taskId } = await newRoot();
    await ok(root.call('declare_plan', { tasks: [t('lead', 'leader')] }));
    const leadId = (await ok(root.call('spawn_agent', { task_id: 'lead' }))).agent_id as string;
    const lead = await connectAs(leadId);
    await ok(lead.call('declare_plan', { tasks: [t('g')] }));
    await ok(lead.call('spawn_agent', { task_id: 'g' }));
    // The root's subtree (lead and g) has been idle since lead's spawn, like lead's own: by the
    // root's second nudge, lead has been idle for two nudge periods too.
    await waitForEvent(
      ts,
      taskId,
      (e) => e.event === 'liveness.nudge' && e.agent_id === rootId && e.nudge_count === 2,
      {
        what: 'the root second nudge',
      },
    );
    expect(
      eventsNamed(durableEvents(ts, taskId), 'liveness.nudge', (e) => e.agent_id === leadId).map((e) => e.nudge_count),
    ).toEqual(expect.arrayContaining([1]));
  });
});
