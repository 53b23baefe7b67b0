import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
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
import { until } from '../../src/testkit/poll.js';

/**
 * ask_user, answer_question, escalate_question and the user gateway (docs/tools.md; the
 * question routes of docs/api.md; the root's review), over HTTP against the real server with real
 * MCP clients. Synchronisation is by polling the admin API with a deadline, never by sleeping.
 */

interface Question {
  question: string;
  header: string;
  multiSelect: boolean;
  options: Array<{ label: string; description: string; value?: string; requires_text?: boolean }>;
}

interface TaskQuestion {
  qid: string;
  asker_agent_id: string;
  origin: string;
  subject_agent_id: string | null;
  questions: Question[];
  context: string | null;
  chain: string[];
  holder: string | null;
  status: 'pending' | 'answered' | 'declined';
  answers: unknown[] | null;
  answer_text: string | null;
  answered_by: string | null;
}

interface PendingQuestion {
  qid: string;
  asker_agent_id: string;
  origin: string;
  subject_agent_id: string | null;
  questions: Question[];
  context: string | null;
  chain: string[];
  created_at: number;
}

interface LoggedEvent {
  seq: number;
  event: string;
  [field: string]: unknown;
}

const YES_NO: Question = {
  question: 'Should we use Postgres?',
  header: 'Database',
  multiSelect: false,
  options: [
    { label: 'Yes', description: 'use Postgres', value: 'yes' },
    { label: 'No', description: 'use SQLite', value: 'no' },
  ],
};

const FREE: Question = { question: 'What is the deadline?', header: 'Deadline', multiSelect: false, options: [] };

describe('questions: ask_user, answer_question, escalate_question and the user gateway', () => {
  let ts: TestServer;
  let home = '';
  const agents: TestAgent[] = [];

  beforeEach(async () => {
    ts = await startTestServer();
    home = ts.home;
  });
  afterEach(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    await ts.close();
    removeHome(home);
  });

  /** Replaces the server with a fresh one on a new home, started with extra environment. */
  async function restartWith(env: Record<string, string>) {
    await ts.close();
    removeHome(home);
    ts = await startTestServer({ env });
    home = ts.home;
  }

  async function connect(token: string): Promise<TestAgent> {
    const agent = await connectAgent(ts.url, token);
    agents.push(agent);
    return agent;
  }

  const tokenFor = (agentId: string) => agentToken(ts, agentId);

  function must<T>(outcome: ToolOutcome<T>): T {
    if (!outcome.ok) throw new Error(`tool failed: ${JSON.stringify(outcome.error)}`);
    return outcome.value;
  }

  /**
   * root → child (through create_team) → grandchild (through the child's declare_plan +
   * spawn_agent), each with its own MCP client. Task created with spawn: false.
   */
  async function hierarchy() {
    const task = await createTask(ts);
    const root = await connect(task.token);
    const team = must(
      await root.call('create_team', {
        name: 'leads',
        task: 'lead the work',
        roles: [{ role: 'lead', skill: 'leader', description: 'leads the sub-team' }],
      }),
    );
    const childId = (team.members as Array<{ agent_id: string }>)[0]!.agent_id;
    const child = await connect(await tokenFor(childId));
    must(
      await child.call('declare_plan', {
        tasks: [{ id: 'impl', role: 'implementer', skill: 'worker', task: 'implement it' }],
      }),
    );
    const spawned = must(await child.call('spawn_agent', { task_id: 'impl' }));
    const grandchildId = spawned.agent_id as string;
    const grandchild = await connect(await tokenFor(grandchildId));
    return { task, taskId: task.task_id, root, rootId: task.root_agent_id, child, childId, grandchild, grandchildId };
  }

  async function taskQuestions(taskId: string): Promise<TaskQuestion[]> {
    const res = await ts.api('GET', `/tasks/${taskId}`);
    expect(res.status).toBe(200);
    return res.body.questions as TaskQuestion[];
  }

  /** Waits until the task has a pending question from `asker` whose holder is `holder` (null = the user). */
  function questionHeldBy(taskId: string, asker: string, holder: string | null): Promise<TaskQuestion> {
    return until(`a question from ${asker} held by ${holder ?? 'the user'}`, async () =>
      (await taskQuestions(taskId)).find(
        (q) => q.asker_agent_id === asker && q.status === 'pending' && q.holder === holder,
      ),
    );
  }

  async function pendingAtGateway(): Promise<PendingQuestion[]> {
    const res = await ts.api('GET', '/questions/pending');
    expect(res.status).toBe(200);
    return res.body as PendingQuestion[];
  }

  async function events(taskId: string): Promise<LoggedEvent[]> {
    const res = await ts.api('GET', `/tasks/${taskId}/events?since=0&limit=10000`);
    expect(res.status).toBe(200);
    return res.body.events as LoggedEvent[];
  }

  async function inbox(
    agent: TestAgent,
  ): Promise<Array<{ message_id: string; from: string; kind: string; content: string }>> {
    return must(await agent.call('read_inbox', {})).messages;
  }

  it('refuses malformed ask_user input with invalid_input naming the question index and field', async () => {
    const task = await createTask(ts);
    const root = await connect(task.token);
    const opt = (label: string) => ({ label, description: `${label} option` });
    const cases: Array<[string, Record<string, unknown>]> = [
      ['questions', { questions: [] }],
      ['questions', { questions: [FREE, FREE, FREE, FREE, FREE] }],
      ['questions[1].header', { questions: [FREE, { ...FREE, header: 'x'.repeat(13) }] }],
      ['questions[0].options', { questions: [{ ...YES_NO, options: [opt('Only')] }] }],
      ['questions[0].options', { questions: [{ ...YES_NO, options: ['A', 'B', 'C', 'D', 'E'].map(opt) }] }],
      ['questions[0].options[1].description', { questions: [{ ...YES_NO, options: [opt('A'), { label: 'B' }] }] }],
      ['questions[2].options[0]', { questions: [FREE, FREE, { ...YES_NO, options: ['not an object', 'neither'] }] }],
      [
        'questions[0].options[0].colour',
        { questions: [{ ...YES_NO, options: [{ ...opt('A'), colour: 'red' }, opt('B')] }] },
      ],
      ['questions[0].multiSelect', { questions: [{ question: 'q', header: '', options: [] }] }],
    ];
    for (const [field, args] of cases) {
      const res = await root.call('ask_user', args);
      expect(res, field).toMatchObject({ ok: false, error: { error: 'invalid_input', details: { field } } });
      if (!res.ok) expect(res.error.message, field).toContain(field);
    }
    // A header of exactly 12 characters is fine: the boundary is inclusive. (Answered below so the call ends.)
    const ok = root.call('ask_user', { questions: [{ ...FREE, header: 'x'.repeat(12) }] });
    const q = await questionHeldBy(task.task_id, task.root_agent_id, null);
    expect((await ts.api('POST', `/questions/${q.qid}/answer`, { answers: [{ text: 'soon' }] })).status).toBe(200);
    expect(await ok).toMatchObject({ ok: true, value: { answer_text: `${'x'.repeat(12)}: soon` } });
    // None of the refused calls created a question.
    expect(await taskQuestions(task.task_id)).toHaveLength(1);
  });

  it("routes a grandchild's question to its leader, who answers it with answer_question", async () => {
    const { taskId, root, child, childId, grandchild, grandchildId } = await hierarchy();
    const asking = grandchild.call('ask_user', { questions: [YES_NO], context: 'choosing storage' });

    const held = await questionHeldBy(taskId, grandchildId, childId);
    expect(held).toMatchObject({
      chain: [childId],
      origin: 'ask_user',
      context: 'choosing storage',
      questions: [YES_NO],
    });
    // Not at the user gateway: the leader holds it.
    expect((await pendingAtGateway()).map((q) => q.qid)).not.toContain(held.qid);

    const messages = await inbox(child);
    const asked = messages.filter((m) => m.kind === 'question');
    expect(asked).toHaveLength(1);
    expect(asked[0]!.content.startsWith(`[INBOX QUESTION ${held.qid}]`)).toBe(true);
    expect(asked[0]!.content).toMatch(/^\[INBOX QUESTION q_/);
    expect(asked[0]!.content).toContain(grandchildId);
    expect(asked[0]!.content).toContain('Should we use Postgres?');
    expect(asked[0]!.content).toContain('choosing storage');

    // Wrong agent, wrong count, unknown qid.
    expect(
      await root.call('answer_question', { qid: held.qid, answers: [{ selected_labels: ['Yes'] }], reason: 'I know' }),
    ).toMatchObject({
      ok: false,
      error: { error: 'not_holder', details: { holder: childId } },
    });
    expect(
      await child.call('answer_question', {
        qid: held.qid,
        answers: [{ selected_labels: ['Yes'] }, { text: 'x' }],
        reason: 'I know',
      }),
    ).toMatchObject({ ok: false, error: { error: 'answer_count_mismatch' } });
    expect(
      await child.call('answer_question', { qid: 'q_nope', answers: [{ selected_labels: ['Yes'] }], reason: 'I know' }),
    ).toMatchObject({
      ok: false,
      error: { error: 'unknown_qid' },
    });
    expect(
      await child.call('answer_question', {
        qid: held.qid,
        answers: [{ selected_labels: ['Maybe'] }],
        reason: 'I know',
      }),
    ).toMatchObject({
      ok: false,
      error: { error: 'invalid_input', details: { field: 'answers[0].selected_labels' } },
    });
    expect(
      await child.call('answer_question', { qid: held.qid, answers: [{ selected_labels: ['Yes'] }], reason: '  ' }),
    ).toMatchObject({
      ok: false,
      error: { error: 'invalid_input', details: { field: 'reason' } },
    });

    const answered = await child.call('answer_question', {
      qid: held.qid,
      answers: [{ selected_labels: ['Yes'] }],
      reason: 'the plan says Postgres',
    });
    expect(answered).toMatchObject({ ok: true, value: { ok: true, qid: held.qid } });

    const result = await asking;
    expect(result).toMatchObject({
      ok: true,
      value: {
        qid: held.qid,
        answers: [{ selected_labels: ['Yes'], selected_values: ['yes'], text: null }],
        answer_text: 'Database: Yes',
      },
    });
    // The blocked call got the answer, so it is not delivered a second time through the inbox.
    expect((await inbox(grandchild)).filter((m) => m.content.startsWith('[ANSWER'))).toEqual([]);
    // Answering it again is stale.
    expect(
      await child.call('answer_question', {
        qid: held.qid,
        answers: [{ selected_labels: ['No'] }],
        reason: 'changed my mind',
      }),
    ).toMatchObject({
      ok: false,
      error: { error: 'stale' },
    });

    const log = await events(taskId);
    const askedEvent = log.find((e) => e.event === 'question_asked' && e.qid === held.qid);
    expect(askedEvent).toMatchObject({ asker: grandchildId, holder: childId, questions: [YES_NO] });
    expect(String(askedEvent!.prompt)).toContain('Should we use Postgres?');
    const answeredEvents = log.filter((e) => e.event === 'question_answered' && e.qid === held.qid);
    expect(answeredEvents).toHaveLength(1);
    expect(answeredEvents[0]).toMatchObject({
      asker: grandchildId,
      chain_len: 1,
      answers: [{ selected_labels: ['Yes'], selected_values: ['yes'], text: null }],
      answer_text: 'Database: Yes',
      by: childId,
      reason: 'the plan says Postgres',
    });
    expect(answeredEvents[0]!.seq).toBeGreaterThan(askedEvent!.seq);
    expect((await taskQuestions(taskId)).find((q) => q.qid === held.qid)).toMatchObject({
      status: 'answered',
      answered_by: childId,
    });
  });

  it('escalates a question twice to the user, who answers it through the REST gateway', async () => {
    const { taskId, root, rootId, child, childId, grandchild, grandchildId } = await hierarchy();
    const questions = [YES_NO, FREE];
    const asking = grandchild.call('ask_user', { questions, context: 'planning' });
    const { qid } = await questionHeldBy(taskId, grandchildId, childId);

    // The root is not the holder yet: it can neither escalate nor answer.
    expect(await root.call('escalate_question', { qid, reason: 'not mine' })).toMatchObject({
      ok: false,
      error: { error: 'not_holder' },
    });
    expect(await grandchild.call('escalate_question', { qid, reason: 'not mine' })).toMatchObject({
      ok: false,
      error: { error: 'not_holder' },
    });
    expect(await child.call('escalate_question', { qid: 'q_nope', reason: 'x' })).toMatchObject({
      ok: false,
      error: { error: 'unknown_qid' },
    });
    expect(await child.call('escalate_question', { qid, reason: '' })).toMatchObject({
      ok: false,
      error: { error: 'invalid_input', details: { field: 'reason' } },
    });

    expect(await child.call('escalate_question', { qid, reason: 'budget call' })).toEqual(
      expect.objectContaining({ ok: true, value: { ok: true, qid, new_holder: rootId } }),
    );
    // It moved on: the child escalating again is stale, answering is not_holder.
    expect(await child.call('escalate_question', { qid, reason: 'again' })).toMatchObject({
      ok: false,
      error: { error: 'stale' },
    });
    expect(
      await child.call('answer_question', { qid, answers: [{ selected_labels: ['Yes'] }, { text: 'x' }], reason: 'r' }),
    ).toMatchObject({
      ok: false,
      error: { error: 'not_holder', details: { holder: rootId } },
    });

    const rootMessages = (await inbox(root)).filter((m) => m.kind === 'question');
    expect(rootMessages).toHaveLength(1);
    expect(rootMessages[0]!.content.startsWith(`[INBOX QUESTION ${qid}]`)).toBe(true);
    expect(rootMessages[0]!.content).toContain(childId); // escalated by

    expect(await root.call('escalate_question', { qid, reason: 'the user decides budgets' })).toMatchObject({
      ok: true,
      value: { ok: true, qid, new_holder: null },
    });
    expect(await root.call('escalate_question', { qid, reason: 'again' })).toMatchObject({
      ok: false,
      error: { error: 'stale' },
    });
    expect(
      await root.call('answer_question', { qid, answers: [{ selected_labels: ['Yes'] }, { text: 'x' }], reason: 'r' }),
    ).toMatchObject({
      ok: false,
      error: { error: 'not_holder' },
    });

    const pending = (await pendingAtGateway()).find((q) => q.qid === qid);
    expect(pending).toMatchObject({
      qid,
      asker_agent_id: grandchildId,
      questions,
      context: 'planning',
      chain: [childId, rootId, 'user'],
    });
    expect(typeof pending!.created_at).toBe('number');

    // REST errors first.
    expect(await ts.api('POST', '/questions/q_nope/answer', { answers: [{ text: 'x' }] })).toMatchObject({
      status: 404,
      body: { error: 'unknown_qid' },
    });
    expect(await ts.api('POST', `/questions/${qid}/answer`, { answers: [{ selected_labels: ['Yes'] }] })).toMatchObject(
      {
        status: 400,
        body: { error: 'answer_count_mismatch' },
      },
    );
    expect(
      await ts.api('POST', `/questions/${qid}/answer`, { answers: [{ selected_labels: ['Maybe'] }, { text: 'x' }] }),
    ).toMatchObject({
      status: 400,
      body: { error: 'invalid_input' },
    });
    expect(
      await ts.api('POST', `/questions/${qid}/answer`, { answers: [{ selected_labels: ['Yes'] }, { text: null }] }),
    ).toMatchObject({
      status: 400,
      body: { error: 'invalid_input' },
    });
    expect(
      await ts.api('POST', `/questions/${qid}/answer`, {
        answers: [{ selected_labels: ['Yes'] }, { text: 'x' }],
        extra: 1,
      }),
    ).toMatchObject({
      status: 400,
      body: { error: 'invalid_input' },
    });
    expect(await ts.api('POST', `/questions/${qid}/answer`, { answers: [] })).toMatchObject({
      status: 400,
      body: { error: 'invalid_input' },
    });
    expect((await taskQuestions(taskId)).find((q) => q.qid === qid)!.status).toBe('pending');

    const ok = await ts.api('POST', `/questions/${qid}/answer`, {
      answers: [{ selected_labels: ['No'] }, { text: 'end of June' }],
    });
    expect(ok).toMatchObject({ status: 200, body: { ok: true } });

    expect(await asking).toMatchObject({
      ok: true,
      value: {
        qid,
        answers: [
          { selected_labels: ['No'], selected_values: ['no'], text: null },
          { selected_labels: [], selected_values: [], text: 'end of June' },
        ],
        answer_text: 'Database: No\nDeadline: end of June',
      },
    });

    expect(
      await ts.api('POST', `/questions/${qid}/answer`, { answers: [{ selected_labels: ['Yes'] }, { text: 'x' }] }),
    ).toMatchObject({
      status: 409,
      body: { error: 'already_answered' },
    });
    expect((await pendingAtGateway()).map((q) => q.qid)).not.toContain(qid);

    const log = await events(taskId);
    expect(log.filter((e) => e.event === 'question_escalated' && e.qid === qid)).toEqual([
      expect.objectContaining({ by: childId, new_holder: rootId, reason: 'budget call' }),
      expect.objectContaining({ by: rootId, new_holder: null, reason: 'the user decides budgets' }),
    ]);
    expect(log.filter((e) => e.event === 'question_answered' && e.qid === qid)).toEqual([
      expect.objectContaining({
        asker: grandchildId,
        chain_len: 3,
        by: 'user',
        answer_text: 'Database: No\nDeadline: end of June',
      }),
    ]);
  });

  it('renders a multi-select and free-text answers as docs/tools.md gives them, with headers', async () => {
    const { taskId, child, childId, grandchild, grandchildId } = await hierarchy();
    const questions: Question[] = [
      {
        question: 'Which languages?',
        header: 'Langs',
        multiSelect: true,
        options: [
          { label: 'TypeScript', description: 'typed', value: 'ts' },
          { label: 'Rust', description: 'fast' },
          { label: 'Go', description: 'simple', value: 'golang' },
        ],
      },
      { question: 'Anything else?', header: '', multiSelect: false, options: [] },
      { question: 'Notes for the team?', header: 'Notes', multiSelect: false, options: [] },
    ];
    const asking = grandchild.call('ask_user', { questions });
    const { qid } = await questionHeldBy(taskId, grandchildId, childId);
    expect(
      await child.call('answer_question', {
        qid,
        answers: [
          { selected_labels: ['TypeScript', 'Rust'], text: null },
          { text: 'ship on friday' },
          { selected_labels: [], text: 'keep it small' },
        ],
        reason: 'decided in the kickoff',
      }),
    ).toMatchObject({ ok: true });
    const result = await asking;
    expect(result).toMatchObject({
      ok: true,
      value: {
        answers: [
          { selected_labels: ['TypeScript', 'Rust'], selected_values: ['ts', 'Rust'], text: null },
          { selected_labels: [], selected_values: [], text: 'ship on friday' },
          { selected_labels: [], selected_values: [], text: 'keep it small' },
        ],
        answer_text: 'Langs: TypeScript, Rust\nship on friday\nNotes: keep it small',
      },
    });
    // The same payload as structuredContent and as the text content.
    if (result.ok)
      expect(JSON.parse((result.raw.content[0] as { text: string }).text)).toEqual(result.raw.structuredContent);
  });

  it('sends progress notifications while ask_user waits', async () => {
    await restartWith({ BEIDOU_PROGRESS_S: '0.1' });
    const task = await createTask(ts);
    const root = await connect(task.token);
    const progress: Array<{ progress: number; message?: string }> = [];
    let twoArrived!: () => void;
    const gotTwo = new Promise<void>((resolve) => (twoArrived = resolve));
    const calling = root.client.callTool({ name: 'ask_user', arguments: { questions: [FREE] } }, undefined, {
      onprogress: (p) => {
        progress.push(p);
        if (progress.length >= 2) twoArrived();
      },
      resetTimeoutOnProgress: true,
    });
    calling.catch(() => undefined); // awaited below; this only keeps an early failure from going unhandled
    let deadline: NodeJS.Timeout | undefined;
    await Promise.race([
      gotTwo,
      new Promise(
        (_, reject) =>
          (deadline = setTimeout(
            () => reject(new Error(`only ${progress.length} progress notification(s) in 10 s`)),
            10_000,
          )),
      ),
    ]);
    clearTimeout(deadline);
    const [pending] = (await pendingAtGateway()).filter((q) => q.asker_agent_id === task.root_agent_id);
    expect(pending).toBeDefined();
    // Progress counts up, and the message says where the question waits.
    expect(progress[1]!.progress).toBeGreaterThan(progress[0]!.progress);
    expect(progress[0]!.message).toContain(pending!.qid);
    expect(
      await ts.api('POST', `/questions/${pending!.qid}/answer`, { answers: [{ text: 'next week' }] }),
    ).toMatchObject({ status: 200 });
    const raw = (await calling) as CallToolResult;
    expect(raw.isError).toBeFalsy();
    expect(raw.structuredContent).toMatchObject({ qid: pending!.qid, answer_text: 'Deadline: next week' });
  });

  it('keeps a question pending across a restart and delivers its answer to the asker inbox', async () => {
    const task = await createTask(ts);
    const root = await connect(task.token);
    const asking = root.call('ask_user', { questions: [FREE], context: 'before the restart' }).then(
      (outcome) => ({ rejected: false as const, outcome }),
      (error: unknown) => ({ rejected: true as const, error }),
    );
    const held = await questionHeldBy(task.task_id, task.root_agent_id, null);

    await ts.close();
    // The client goes away with the server; its pending call ends one way or the other (the
    // prompt failure result itself is checked by the shutdown test below). It must not have succeeded.
    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    const ended = await asking;
    if (!ended.rejected) expect(ended.outcome.ok).toBe(false);

    ts = await startTestServer({ home });
    const pending = (await pendingAtGateway()).find((q) => q.qid === held.qid);
    expect(pending).toMatchObject({
      asker_agent_id: task.root_agent_id,
      questions: [FREE],
      context: 'before the restart',
      chain: ['user'],
    });

    expect(
      await ts.api('POST', `/questions/${held.qid}/answer`, { answers: [{ text: 'after the restart' }] }),
    ).toMatchObject({
      status: 200,
      body: { ok: true },
    });
    const again = await connect(task.token);
    const answers = (await inbox(again)).filter((m) => m.content.startsWith('[ANSWER q_'));
    expect(answers).toHaveLength(1);
    expect(answers[0]!.content.startsWith(`[ANSWER ${held.qid}]`)).toBe(true);
    expect(answers[0]!.content).toContain('Deadline: after the restart');
    expect(answers[0]!.from).toBe('user');
    // Delivered once.
    expect(await inbox(again)).toEqual([]);
    expect((await taskQuestions(task.task_id)).find((q) => q.qid === held.qid)).toMatchObject({
      status: 'answered',
      answered_by: 'user',
    });
  });

  /** Connects, asks one free-text question as the root, and returns once it is at the gateway. */
  async function rootAsking(askWith: (agent: TestAgent) => Promise<unknown>) {
    const task = await createTask(ts);
    const root = await connect(task.token);
    const asking = askWith(root).then(
      (value) => ({ rejected: false as const, value }),
      (error: unknown) => ({ rejected: true as const, error }),
    );
    const held = await questionHeldBy(task.task_id, task.root_agent_id, null);
    return { task, root, asking, held };
  }

  /** The call is over on the server's side: no tool call of that agent is in flight any more. */
  function callEnded(agentId: string) {
    return until(
      `the server to end ${agentId}'s ask_user call`,
      () => (ts.server.services.activity.busy(agentId) ? undefined : true),
      5_000,
    );
  }

  async function answerGoesToInbox(task: { token: string; task_id: string }, qid: string) {
    expect(await ts.api('POST', `/questions/${qid}/answer`, { answers: [{ text: 'by inbox' }] })).toMatchObject({
      status: 200,
    });
    const again = await connect(task.token);
    const answers = (await inbox(again)).filter((m) => m.content.startsWith(`[ANSWER ${qid}]`));
    expect(answers).toEqual([expect.objectContaining({ content: `[ANSWER ${qid}] Deadline: by inbox` })]);
  }

  it('an ask_user the client gives up on (its own timeout) gets its answer through the inbox', async () => {
    const { task, held, asking } = await rootAsking((root) =>
      root.client.callTool({ name: 'ask_user', arguments: { questions: [FREE] } }, undefined, { timeout: 300 }),
    );
    expect(await asking).toMatchObject({ rejected: true });
    await callEnded(task.root_agent_id);
    expect((await pendingAtGateway()).map((q) => q.qid)).toContain(held.qid);
    await answerGoesToInbox(task, held.qid);
  });

  // docs/tools.md: if the call ends first (client timeout, dropped connection, server restart),
  // the question stays pending, and its answer is delivered to the asker's inbox. The dropped
  // connection sends no notifications/cancelled: the server itself must end the call, or the
  // answer would go to a waiter nobody reads. The SDK client can resume its stream, so the
  // server waits BEIDOU_RESUME_S for it to come back first (1 s here).
  it('an ask_user whose connection drops gets its answer through the inbox', async () => {
    await restartWith({ BEIDOU_RESUME_S: '1' });
    const { task, root, held, asking } = await rootAsking((agent) => agent.call('ask_user', { questions: [FREE] }));
    await root.close(); // aborts the HTTP request carrying the call; no cancellation is sent
    await asking;
    await callEnded(task.root_agent_id);
    expect((await pendingAtGateway()).map((q) => q.qid)).toContain(held.qid);
    await answerGoesToInbox(task, held.qid);
  });

  // docs/tools.md: a client whose call ended (here its own timeout; a reconnect after a
  // restart or a failover is the same) and that asks again is not a second question: the
  // new call waits for the pending one, and its answer comes back on that call.
  it('an ask_user asked again after its call ended waits for the pending question: asked once, answered on the second call, nothing in the inbox', async () => {
    const context = 'asked twice';
    const { task, root, held, asking } = await rootAsking((agent) =>
      agent.client.callTool({ name: 'ask_user', arguments: { questions: [YES_NO], context } }, undefined, {
        timeout: 300,
      }),
    );
    expect(await asking).toMatchObject({ rejected: true });
    await callEnded(task.root_agent_id);

    const again = await connect(task.token);
    const second = again.call('ask_user', { questions: [{ ...YES_NO }], context });
    await until(
      'the second call waiting',
      () => (ts.server.services.activity.busy(task.root_agent_id) ? true : undefined),
      5_000,
    );
    // The same question with other context is another question: asked anew.
    const other = root.call('ask_user', { questions: [YES_NO], context: 'another context' });
    await until(
      'the other question asked',
      async () => ((await pendingAtGateway()).length === 2 ? true : undefined),
      5_000,
    );
    const pending = (await pendingAtGateway()).filter((q) => q.context === context);
    expect(pending.map((q) => q.qid)).toEqual([held.qid]);

    expect(
      await ts.api('POST', `/questions/${held.qid}/answer`, { answers: [{ selected_labels: ['Yes'] }] }),
    ).toMatchObject({ status: 200 });
    expect(must(await second)).toMatchObject({
      qid: held.qid,
      answers: [{ selected_labels: ['Yes'], selected_values: ['yes'] }],
    });
    // Answered on the call: not in the inbox as well.
    expect(await inbox(again)).toEqual([]);
    const asked = (await events(task.task_id)).filter((e) => e.event === 'question_asked' && e.context === context);
    expect(asked.map((e) => e.qid)).toEqual([held.qid]);
    const otherQid = (await pendingAtGateway()).find((q) => q.context === 'another context')!.qid;
    expect(otherQid).not.toBe(held.qid);
    expect(
      await ts.api('POST', `/questions/${otherQid}/answer`, { answers: [{ selected_labels: ['No'] }] }),
    ).toMatchObject({ status: 200 });
    expect(must(await other)).toMatchObject({ qid: otherQid });
  });

  // On shutdown in-flight requests are finished or failed; a blocked ask_user ends
  // promptly with gateway_unavailable (its question stays pending).
  it('fails an in-flight ask_user promptly with gateway_unavailable when the server stops', async () => {
    const task = await createTask(ts);
    const root = await connect(task.token);
    const asking = root.call('ask_user', { questions: [FREE] }).then(
      (outcome) => ({ rejected: false as const, outcome }),
      (error: unknown) => ({ rejected: true as const, error }),
    );
    const held = await questionHeldBy(task.task_id, task.root_agent_id, null);
    await ts.close();
    // A deadline, not a synchronisation point: the call must settle well before any client timeout.
    let deadline: NodeJS.Timeout | undefined;
    const ended = await Promise.race([
      asking,
      new Promise<'hung'>((resolve) => (deadline = setTimeout(() => resolve('hung'), 5_000))),
    ]);
    clearTimeout(deadline);
    expect(ended).not.toBe('hung');
    expect(ended).toMatchObject({
      rejected: false,
      outcome: { ok: false, error: { error: 'gateway_unavailable', details: { qid: held.qid, pending: true } } },
    });
  });

  it("turns the root's signal_review into an Approve / Rework question at the gateway", async () => {
    const { taskId, root, rootId, child, childId, grandchild, grandchildId } = await hierarchy();
    const agentTokens = [await tokenFor(rootId), await tokenFor(childId), await tokenFor(grandchildId)];

    const reviewOf = (subject: string) =>
      until('a root review at the gateway', async () =>
        (await pendingAtGateway()).find((q) => q.origin === 'root_review' && q.subject_agent_id === subject),
      );

    expect(await root.call('signal_review', { detail: '[REVIEW REQUIRED] first cut: README.md' })).toMatchObject({
      ok: true,
      value: { recorded: true, review_pending: true },
    });
    const first = await reviewOf(rootId);
    expect(first.questions).toHaveLength(1);
    expect(first.questions[0]!.options.map((o) => o.label)).toEqual(['Approve', 'Rework']);
    expect(first.questions[0]!.question).toContain('first cut: README.md');

    // Rework needs its text.
    expect(
      await ts.api('POST', `/questions/${first.qid}/answer`, { answers: [{ selected_labels: ['Rework'] }] }),
    ).toMatchObject({
      status: 400,
      body: { error: 'invalid_input' },
    });
    expect(
      await ts.api('POST', `/questions/${first.qid}/answer`, {
        answers: [{ selected_labels: ['Rework'], text: 'add the install section' }],
      }),
    ).toMatchObject({ status: 200 });

    const fromUser = (await inbox(root)).filter((m) => m.from === 'user');
    expect(fromUser).toHaveLength(1);
    // The user's text goes back to the root. (The server sends "Rework: <text>"; the text itself is what matters.)
    expect(fromUser[0]!.content).toContain('add the install section');
    expect((await ts.api('GET', `/agents/${rootId}`)).body.review).toBeNull();
    let log = await events(taskId);
    expect(log.filter((e) => e.event === 'completion.reported')).toEqual([
      expect.objectContaining({ agent_id: rootId, leader_id: 'user', via: 'user_gateway', decision: 'rework' }),
    ]);
    expect((await ts.api('GET', `/tasks/${taskId}`)).body.task.status).toBe('running');

    // Second review: Approve ends the task.
    expect(
      await root.call('signal_review', { detail: '[REVIEW REQUIRED] second cut with install section' }),
    ).toMatchObject({ ok: true });
    const second = await until('a second root review', async () =>
      (await pendingAtGateway()).find(
        (q) => q.origin === 'root_review' && q.subject_agent_id === rootId && q.qid !== first.qid,
      ),
    );
    expect(
      await ts.api('POST', `/questions/${second.qid}/answer`, { answers: [{ selected_labels: ['Approve'] }] }),
    ).toMatchObject({ status: 200 });

    const detail = (await ts.api('GET', `/tasks/${taskId}`)).body;
    expect(detail.task.status).toBe('done');
    expect(detail.agents).toHaveLength(3);
    for (const agent of detail.agents as Array<{ agent_id: string; terminated_at: number | null }>) {
      expect(agent.terminated_at, agent.agent_id).not.toBeNull();
    }
    log = await events(taskId);
    expect(log.filter((e) => e.event === 'completion.reported').map((e) => e.decision)).toEqual(['rework', 'approve']);
    expect(
      log
        .filter((e) => e.event === 'terminate.consumed')
        .map((e) => e.agent_id)
        .sort(),
    ).toEqual([rootId, childId, grandchildId].sort());

    for (const token of [...agentTokens]) {
      const res = await fetch(`${ts.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: {
            protocolVersion: '2025-06-18',
            capabilities: {},
            clientInfo: { name: 'after-approve', version: '0.0.0' },
          },
        }),
      });
      expect(res.status).toBe(401);
      expect(((await res.json()) as { error: string }).error).toBe('agent_terminated');
    }
    // The connected clients are refused too.
    await expect(child.call('list_peers', {})).rejects.toThrow();
    await expect(grandchild.call('list_peers', {})).rejects.toThrow();
  });

  it('a declined question makes the blocked ask_user fail with user_declined', async () => {
    const task = await createTask(ts);
    const root = await connect(task.token);
    const asking = root.call('ask_user', { questions: [YES_NO] });
    const held = await questionHeldBy(task.task_id, task.root_agent_id, null);
    expect(await ts.api('POST', `/questions/${held.qid}/decline`, {})).toMatchObject({
      status: 400,
      body: { error: 'invalid_input' },
    });
    expect(await ts.api('POST', '/questions/q_nope/decline', { reason: 'no' })).toMatchObject({
      status: 404,
      body: { error: 'unknown_qid' },
    });
    expect(await ts.api('POST', `/questions/${held.qid}/decline`, { reason: 'not relevant' })).toMatchObject({
      status: 200,
      body: { ok: true },
    });
    expect(await asking).toMatchObject({
      ok: false,
      error: { error: 'user_declined', details: { qid: held.qid, reason: 'not relevant' } },
    });
    // The refusal is delivered to the blocked call, not a second time through the inbox.
    expect((await inbox(root)).filter((m) => m.content.startsWith('[ANSWER'))).toEqual([]);
    expect((await taskQuestions(task.task_id)).find((q) => q.qid === held.qid)).toMatchObject({ status: 'declined' });
    expect((await pendingAtGateway()).map((q) => q.qid)).not.toContain(held.qid);
    expect(
      await ts.api('POST', `/questions/${held.qid}/answer`, { answers: [{ selected_labels: ['Yes'] }] }),
    ).toMatchObject({
      status: 409,
      body: { error: 'already_answered' },
    });
    const log = await events(task.task_id);
    // The root's leader is the user: its question went straight to the gateway.
    expect(log.find((e) => e.event === 'question_asked' && e.qid === held.qid)).toMatchObject({
      asker: task.root_agent_id,
      holder: null,
    });
    expect(log.filter((e) => e.event === 'question_declined')).toEqual([
      expect.objectContaining({ qid: held.qid, asker: task.root_agent_id, reason: 'not relevant' }),
    ]);
  });
});
