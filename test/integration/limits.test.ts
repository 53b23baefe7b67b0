import { afterEach, describe, expect, it } from 'vitest';
import { waitForEvent } from '../support/events.js';
import { storedPlans } from '../support/store.js';
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
 * Limits over the real server and real MCP clients: the quotas (agents per
 * task, roles and plan tasks, teams per leader) and the content cap refuse before anything
 * is written; messages the server writes on an agent's behalf count against the recipient's
 * inbox; a repeated signal_review replaces the undelivered report.
 */

const SETTINGS = {
  BEIDOU_MAX_AGENTS_PER_TASK: '4',
  BEIDOU_MAX_PLAN_TASKS: '3',
  BEIDOU_MAX_TEAMS_PER_LEADER: '2',
  BEIDOU_MAX_CONTENT_CHARS: '100',
};

const role = (name: string) => ({ role: name, skill: 'worker', description: `the ${name} part` });
const planTask = (id: string, depends_on: string[] = []) => ({
  id,
  role: `r-${id}`,
  skill: 'worker',
  task: `do ${id}`,
  depends_on,
});
const FREE = { question: 'Which way?', header: '', multiSelect: false, options: [] };

function expectError(outcome: ToolOutcome, code: string, details: Record<string, unknown> = {}): void {
  expect(outcome).toMatchObject({ ok: false, error: { error: code, details } });
}

function value<T = any>(outcome: ToolOutcome<T>): T {
  if (!outcome.ok) throw new Error(`expected success, got ${JSON.stringify(outcome.error)}`);
  return outcome.value;
}

describe('limits: quotas and content caps', () => {
  let ts: TestServer | null = null;
  const agents: TestAgent[] = [];

  async function start(env: Record<string, string> = {}, home?: string) {
    ts = await startTestServer({ env: { ...SETTINGS, ...env }, ...(home ? { home } : {}) });
    return ts;
  }
  async function connect(s: TestServer, token: string) {
    const agent = await connectAgent(s.url, token);
    agents.push(agent);
    return agent;
  }
  /** A task and its root's client. */
  async function rootOf(s: TestServer) {
    const task = await createTask(s);
    return { task, root: await connect(s, task.token) };
  }
  /** A root with a team of the given roles, each member connected. */
  async function team(s: TestServer, roles: string[]) {
    const { task, root } = await rootOf(s);
    const created = value(await root.call('create_team', { name: 'crew', task: 'build', roles: roles.map(role) }));
    const members: Array<{ id: string; client: TestAgent }> = [];
    for (const m of created.members as Array<{ agent_id: string }>)
      members.push({ id: m.agent_id, client: await connect(s, await agentToken(s, m.agent_id)) });
    return { task, root, members };
  }
  /** The task's log and its view, to compare before and after a refusal. */
  async function snapshot(s: TestServer, taskId: string) {
    const events = await s.api('GET', `/tasks/${taskId}/events?limit=10000`);
    const detail = await s.api('GET', `/tasks/${taskId}`);
    expect(events.status).toBe(200);
    return { events: events.body.events, detail: detail.body };
  }

  afterEach(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = null;
    }
  });

  it('create_team with more roles than BEIDOU_MAX_PLAN_TASKS is refused with limit_exceeded plan_tasks, nothing written', async () => {
    const s = await start();
    const { task, root } = await rootOf(s);
    const before = await snapshot(s, task.task_id);
    expectError(
      await root.call('create_team', { name: 'big', task: 'x', roles: ['a', 'b', 'c', 'd'].map(role) }),
      'limit_exceeded',
      {
        limit: 'plan_tasks',
        max: 3,
        setting: 'BEIDOU_MAX_PLAN_TASKS',
      },
    );
    expect(await snapshot(s, task.task_id)).toEqual(before);
    // At the cap it is allowed.
    expect(
      value(await root.call('create_team', { name: 'ok', task: 'x', roles: ['a', 'b', 'c'].map(role) })).members,
    ).toHaveLength(3);
  });

  it('declare_plan with more tasks than BEIDOU_MAX_PLAN_TASKS is refused with limit_exceeded plan_tasks, no plan file written', async () => {
    const s = await start();
    const { task, root } = await rootOf(s);
    const before = await snapshot(s, task.task_id);
    const tasks = [planTask('a'), planTask('b', ['a']), planTask('c', ['a']), planTask('d', ['b', 'c'])];
    expectError(await root.call('declare_plan', { tasks }), 'limit_exceeded', {
      limit: 'plan_tasks',
      max: 3,
      setting: 'BEIDOU_MAX_PLAN_TASKS',
    });
    expect(await snapshot(s, task.task_id)).toEqual(before);
    expect(await storedPlans(s.home, task.task_id)).toEqual([]);
    expect(value(await root.call('declare_plan', { tasks: tasks.slice(0, 3) })).tasks).toHaveLength(3);
  });

  it('agents per task counts every agent a create_team or spawn_agent would add (limit_exceeded agents_per_task)', async () => {
    const s = await start();
    const { task, root } = await rootOf(s);
    // Root + 2 = 3 agents; two more would be 5, past the cap of 4.
    value(await root.call('create_team', { name: 'one', task: 'x', roles: ['a', 'b'].map(role) }));
    let before = await snapshot(s, task.task_id);
    expectError(
      await root.call('create_team', { name: 'two', task: 'x', roles: ['c', 'd'].map(role) }),
      'limit_exceeded',
      {
        limit: 'agents_per_task',
        max: 4,
        setting: 'BEIDOU_MAX_AGENTS_PER_TASK',
      },
    );
    expect(await snapshot(s, task.task_id)).toEqual(before);
    // One more reaches the cap exactly; a member's spawn_agent past it is refused too.
    const third = value(await root.call('create_team', { name: 'two', task: 'x', roles: [role('c')] }));
    const member = await connect(s, await agentToken(s, third.members[0].agent_id));
    value(await member.call('declare_plan', { tasks: [planTask('t1')] }));
    before = await snapshot(s, task.task_id);
    expectError(await member.call('spawn_agent', { task_id: 't1' }), 'limit_exceeded', {
      limit: 'agents_per_task',
      max: 4,
    });
    expect(await snapshot(s, task.task_id)).toEqual(before);
  });

  it('a leader past BEIDOU_MAX_TEAMS_PER_LEADER teams is refused (create_team and a first spawn_agent), nothing written', async () => {
    const s = await start({ BEIDOU_MAX_AGENTS_PER_TASK: '100' });
    const { task, root } = await rootOf(s);
    value(await root.call('create_team', { name: 'one', task: 'x', roles: [role('a')] }));
    value(await root.call('create_team', { name: 'two', task: 'x', roles: [role('b')] }));
    const before = await snapshot(s, task.task_id);
    expectError(await root.call('create_team', { name: 'three', task: 'x', roles: [role('c')] }), 'limit_exceeded', {
      limit: 'teams_per_leader',
      max: 2,
      setting: 'BEIDOU_MAX_TEAMS_PER_LEADER',
    });
    expect(await snapshot(s, task.task_id)).toEqual(before);
    value(await root.call('declare_plan', { tasks: [planTask('t1')] }));
    const declared = await snapshot(s, task.task_id);
    expectError(await root.call('spawn_agent', { task_id: 't1' }), 'limit_exceeded', {
      limit: 'teams_per_leader',
      max: 2,
    });
    expect(await snapshot(s, task.task_id)).toEqual(declared);
  });

  it('an asker past BEIDOU_MAX_PENDING_QUESTIONS_PER_AGENT pending questions is refused, nothing written; a settled question drops its texts from memory', async () => {
    const s = await start({ BEIDOU_MAX_PENDING_QUESTIONS_PER_AGENT: '2' });
    const { task, root } = await rootOf(s);
    // Each question is asked, then the call is cancelled: it stays pending for the user.
    const askAndCancel = async (text: string) => {
      const cancel = new AbortController();
      const call = root.client
        .callTool({ name: 'ask_user', arguments: { questions: [{ ...FREE, question: text }] } }, undefined, {
          signal: cancel.signal,
        })
        .catch(() => undefined);
      const asked = await waitForEvent(s, task.task_id, (e) => e.event === 'question_asked' && e.prompt.includes(text));
      cancel.abort();
      await call;
      return asked.qid as string;
    };
    const first = await askAndCancel('first?');
    await askAndCancel('second?');
    const before = await snapshot(s, task.task_id);
    expectError(await root.call('ask_user', { questions: [{ ...FREE, question: 'third?' }] }), 'limit_exceeded', {
      limit: 'pending_questions_per_agent',
      max: 2,
      setting: 'BEIDOU_MAX_PENDING_QUESTIONS_PER_AGENT',
    });
    expect(await snapshot(s, task.task_id)).toEqual(before);

    // Once one is answered the asker may ask again; the answered one keeps its summary, not its texts.
    expect((await s.api('POST', `/questions/${first}/answer`, { answers: [{ text: 'yes' }] })).status).toBe(200);
    await askAndCancel('third?');
    const settled = s.server.services.registry.state.questions.get(first)!;
    expect(settled).toMatchObject({ status: 'answered', questions: [], context: null, prompt: 'first?' });
  });

  it('every text one agent hands another is capped by BEIDOU_MAX_CONTENT_CHARS (content_too_large), nothing written', async () => {
    const s = await start();
    const { task, root, members } = await team(s, ['a', 'b']);
    const [a, b] = members as [{ id: string; client: TestAgent }, { id: string; client: TestAgent }];
    const big = 'x'.repeat(101);
    const tooLarge = (field: string) => ({ field, max: 100, setting: 'BEIDOU_MAX_CONTENT_CHARS' });
    const before = await snapshot(s, task.task_id);

    expectError(
      await a.client.call('send_message', { to: b.id, content: big }),
      'content_too_large',
      tooLarge('content'),
    );
    expectError(
      await a.client.call('signal_review', { detail: `[REVIEW REQUIRED] ${big}` }),
      'content_too_large',
      tooLarge('detail'),
    );
    expectError(await a.client.call('request_termination', { detail: big }), 'content_too_large', tooLarge('detail'));
    expectError(
      await a.client.call('ask_user', { questions: [FREE], context: big }),
      'content_too_large',
      tooLarge('context'),
    );
    expectError(
      await a.client.call('ask_user', { questions: [{ ...FREE, question: big }] }),
      'content_too_large',
      tooLarge('questions'),
    );
    // What a leader hands the agents it creates: their first message and their prompt.
    const member = { role: 'm', skill: 'worker', description: 'm' };
    expectError(
      await a.client.call('create_team', { name: 'crew', task: big, roles: [member] }),
      'content_too_large',
      tooLarge('task'),
    );
    expectError(
      await a.client.call('create_team', { name: 'crew', task: 't', roles: [{ ...member, description: big }] }),
      'content_too_large',
      tooLarge('roles[0].description'),
    );
    expectError(
      await a.client.call('create_team', { name: 'crew', task: 't', roles: [member], rules: ['r', big] }),
      'content_too_large',
      tooLarge('rules'),
    );
    const planTask = { id: 'p', role: 'p', skill: 'worker', task: 't' };
    expectError(
      await a.client.call('declare_plan', { tasks: [{ ...planTask, task: big }] }),
      'content_too_large',
      tooLarge('tasks[0].task'),
    );
    expectError(
      await a.client.call('declare_plan', { tasks: [{ ...planTask, description: big }] }),
      'content_too_large',
      tooLarge('tasks[0].description'),
    );
    const rest = await s.api('POST', `/agents/${a.id}/send`, { content: big });
    expect(rest).toMatchObject({ status: 413, body: { error: 'content_too_large', details: tooLarge('content') } });
    expect(await snapshot(s, task.task_id)).toEqual(before);

    // At the cap a message goes through.
    value(await a.client.call('send_message', { to: b.id, content: 'y'.repeat(100) }));

    // Answers: by the holder (answer_question) and by the user (REST).
    const asking = a.client.call('ask_user', { questions: [FREE] });
    const asked = await waitForEvent(s, task.task_id, (e) => e.event === 'question_asked' && e.asker === a.id);
    const held = await snapshot(s, task.task_id);
    expectError(
      await root.call('answer_question', { qid: asked.qid, answers: [{ text: big }], reason: 'I know' }),
      'content_too_large',
      tooLarge('answers[0].text'),
    );
    expect(await snapshot(s, task.task_id)).toEqual(held);
    value(await root.call('escalate_question', { qid: asked.qid, reason: 'ask the user' }));
    const escalated = await snapshot(s, task.task_id);
    const answer = await s.api('POST', `/questions/${asked.qid}/answer`, { answers: [{ text: big }] });
    expect(answer).toMatchObject({
      status: 413,
      body: { error: 'content_too_large', details: tooLarge('answers[0].text') },
    });
    expect(await snapshot(s, task.task_id)).toEqual(escalated);
    expect((await s.api('POST', `/questions/${asked.qid}/answer`, { answers: [{ text: 'left' }] })).status).toBe(200);
    expect(value(await asking).answer_text).toBe('left');
  });

  it("messages the server writes on an agent's behalf count against the recipient's inbox cap (inbox_full), nothing written", async () => {
    const s = await start({ BEIDOU_INBOX_CAP: '2' });
    const { task, root, members } = await team(s, ['a', 'b']);
    const [a, b] = members as [{ id: string; client: TestAgent }, { id: string; client: TestAgent }];
    value(await a.client.call('send_message', { to: task.root_agent_id, content: 'one' }));
    value(await b.client.call('send_message', { to: task.root_agent_id, content: 'two' }));
    const before = await snapshot(s, task.task_id);
    const full = { to: task.root_agent_id, cap: 2 };

    expectError(await a.client.call('signal_review', { detail: '[REVIEW REQUIRED] done' }), 'inbox_full', full);
    expectError(await a.client.call('request_termination', { detail: 'finished' }), 'inbox_full', full);
    expectError(await b.client.call('ask_user', { questions: [FREE] }), 'inbox_full', full);
    expect(await snapshot(s, task.task_id)).toEqual(before);
    expect(value(await root.call('list_pending_reviews')).reviews).toEqual([]);

    // Once the leader reads, there is room again.
    expect(value(await root.call('read_inbox')).messages).toHaveLength(2);
    value(await a.client.call('signal_review', { detail: '[REVIEW REQUIRED] done' }));
  });

  it('the character cap (BEIDOU_INBOX_MAX_CHARS) counts review reports too', async () => {
    const s = await start({ BEIDOU_INBOX_MAX_CHARS: '60' });
    const { task, members } = await team(s, ['a', 'b']);
    const [a, b] = members as [{ id: string; client: TestAgent }, { id: string; client: TestAgent }];
    value(await b.client.call('send_message', { to: task.root_agent_id, content: 'z'.repeat(40) }));
    const before = await snapshot(s, task.task_id);
    expectError(
      await a.client.call('signal_review', { detail: '[REVIEW REQUIRED] more than twenty chars' }),
      'inbox_full',
      { max_chars: 60 },
    );
    expect(await snapshot(s, task.task_id)).toEqual(before);
  });

  it('a repeated signal_review replaces the undelivered report: one per child, counters right, the same after a restart', async () => {
    // A cap of one message: the second report fits only because it replaces the first.
    const s = await start({ BEIDOU_INBOX_CAP: '1' });
    const { task, root, members } = await team(s, ['a']);
    const [a] = members as [{ id: string; client: TestAgent }];
    for (const n of [1, 2, 3]) value(await a.client.call('signal_review', { detail: `[REVIEW REQUIRED] report ${n}` }));

    const peek = value(await root.call('read_inbox', { peek: true })).messages as Array<{
      kind: string;
      content: string;
      from: string;
    }>;
    expect(peek.map((m) => [m.kind, m.from, m.content])).toEqual([
      ['review_report', a.id, '[REVIEW REQUIRED] report 3'],
    ]);
    const rootView = await s.api('GET', `/agents/${task.root_agent_id}`);
    expect(rootView.body).toMatchObject({ inbox_depth: 1 });
    const withdrawn = (await snapshot(s, task.task_id)).events.filter(
      (e: { event: string }) => e.event === 'inbox.withdrawn',
    );
    expect(withdrawn).toHaveLength(2);
    const liveRoot = s.server.services.registry.agent(task.root_agent_id)!;
    const live = { size: liveRoot.inbox.size, chars: liveRoot.inbox_chars };
    expect(live).toEqual({ size: 1, chars: '[REVIEW REQUIRED] report 3'.length });

    // Replay: the same inbox after a restart.
    const home = s.home;
    await Promise.allSettled(agents.map((c) => c.close()));
    agents.length = 0;
    await s.close();
    ts = null;
    const again = await start({ BEIDOU_INBOX_CAP: '1' }, home);
    const replayed = again.server.services.registry.agent(task.root_agent_id)!;
    expect({ size: replayed.inbox.size, chars: replayed.inbox_chars }).toEqual(live);
    expect([...replayed.inbox.values()].map((m) => m.content)).toEqual(['[REVIEW REQUIRED] report 3']);

    // Once delivered, a new report is a new message (nothing left to replace).
    const root2 = await connect(again, await agentToken(again, task.root_agent_id));
    expect(value(await root2.call('read_inbox')).messages).toHaveLength(1);
    const a2 = await connect(again, await agentToken(again, a.id));
    value(await a2.call('signal_review', { detail: '[REVIEW REQUIRED] report 4' }));
    expect(value(await root2.call('read_inbox')).messages.map((m: { content: string }) => m.content)).toEqual([
      '[REVIEW REQUIRED] report 4',
    ]);
    expect(replayed.inbox_chars).toBe(0);
  });
});
