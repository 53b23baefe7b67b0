import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  agentToken,
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';
import { until } from '../../src/testkit/poll.js';

describe('messaging over MCP', () => {
  let ts: TestServer;
  const agents: TestAgent[] = [];
  beforeEach(async () => {
    ts = await startTestServer();
  });
  afterEach(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    await ts.close();
    removeHome(ts.home);
  });

  /** A root with a two-member team created through create_team, each with its own token. */
  async function teamOfTwo() {
    const task = await createTask(ts);
    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    const team = await root.call('create_team', {
      name: 'builders',
      task: 'build it',
      roles: [
        { role: 'frontend', skill: 'worker', description: 'the UI' },
        { role: 'backend', skill: 'worker', description: 'the API' },
      ],
    });
    expect(team.ok).toBe(true);
    if (!team.ok) throw new Error('unreachable');
    const [fe, be] = team.value.members as Array<{ agent_id: string }>;
    const a = await connectAgent(ts.url, await agentToken(ts, fe!.agent_id));
    const b = await connectAgent(ts.url, await agentToken(ts, be!.agent_id));
    agents.push(a, b);
    return { task, root, a, b, aId: fe!.agent_id, bId: be!.agent_id, teamId: team.value.team_id as string };
  }

  it('two agents of one task exchange messages and read them with read_inbox', async () => {
    const { a, b, aId, bId } = await teamOfTwo();
    const sent = await a.call('send_message', { to: bId, content: 'hello B' });
    expect(sent).toMatchObject({ ok: true, value: { delivered: true } });
    const peek = await b.call('read_inbox', { peek: true });
    expect(peek.ok && peek.value.messages).toHaveLength(1);

    const read = await b.call('read_inbox');
    expect(read.ok).toBe(true);
    if (!read.ok) return;
    expect(read.value.messages).toEqual([
      expect.objectContaining({
        from: aId,
        kind: 'message',
        content: 'hello B',
        message_id: sent.ok && sent.value.message_id,
      }),
    ]);
    expect(read.value.messages[0].from_name).toMatch(/^frontend-/);
    // Delivered exactly once: a second read finds nothing.
    const again = await b.call('read_inbox');
    expect(again.ok && again.value.messages).toEqual([]);

    await b.call('send_message', { to: aId, content: 'hi A' });
    const back = await a.call('read_inbox');
    expect(back.ok && back.value.messages.map((m: { content: string }) => m.content)).toEqual(['hi A']);
  });

  it('read_inbox with wait_s returns as soon as a message arrives', async () => {
    const { a, b, bId } = await teamOfTwo();
    const waiting = b.call('read_inbox', { wait_s: 30 });
    // The waiter is registered once the server has the call; sending after the call is in flight.
    const sent = await a.call('send_message', { to: bId, content: 'wake up' });
    const read = await waiting;
    expect(read.ok && read.value.messages.map((m: { message_id: string }) => m.message_id)).toEqual([
      sent.ok && sent.value.message_id,
    ]);
  });

  it('read_inbox with wait_s also wakes for messages the server routes (a review report)', async () => {
    const { root, a, aId } = await teamOfTwo();
    // wait_s is past the test's own timeout: only a wake-up can make this pass.
    const waiting = root.call('read_inbox', { wait_s: 60 });
    expect((await a.call('signal_review', { detail: '[REVIEW REQUIRED] done' })).ok).toBe(true);
    const read = await waiting;
    expect(read.ok && read.value.messages).toEqual([
      expect.objectContaining({ from: aId, kind: 'review_report', content: '[REVIEW REQUIRED] done' }),
    ]);
  });

  it('an agent of another task is answered as one that does not exist (unknown_recipient), so ids of other tasks cannot be probed', async () => {
    const { bId } = await teamOfTwo();
    const other = await createTask(ts);
    const stranger = await connectAgent(ts.url, other.token);
    agents.push(stranger);
    const res = await stranger.call('send_message', { to: bId, content: 'hi' });
    expect(res).toMatchObject({ ok: false, error: { error: 'unknown_recipient', details: { to: bId } } });
    const none = await stranger.call('send_message', { to: 'ag_000000000000', content: 'hi' });
    expect(refusal(res, bId)).toEqual(refusal(none, 'ag_000000000000'));
  });

  /** A refusal with the id it names replaced, to compare two refusals word for word. */
  const refusal = (res: { ok: boolean; error?: unknown }, id: string) => {
    expect(res.ok).toBe(false);
    return JSON.stringify(res.error).split(id).join('<ID>');
  };

  it('no tool tells an id of another task from one that does not exist: answer_question, escalate_question, terminate_child', async () => {
    const { root, a, aId } = await teamOfTwo();
    // A question of this task, held by the asker's leader.
    const asking = a.call('ask_user', {
      questions: [{ question: 'Which port?', header: 'Port', multiSelect: false, options: [] }],
    });
    void asking.catch(() => undefined);
    const inbox = await root.call('read_inbox', { wait_s: 10 });
    const qid = inbox.ok
      ? /\[INBOX QUESTION (q_[0-9a-f]+)\]/.exec(inbox.value.messages[0]?.content ?? '')?.[1]
      : undefined;
    expect(qid).toBeDefined();
    const other = await createTask(ts);
    const stranger = await connectAgent(ts.url, other.token);
    agents.push(stranger);
    const answer = { answers: [{ text: 'x' }], reason: 'probing' };
    for (const [tool, args, real, fake] of [
      ['answer_question', (id: string) => ({ qid: id, ...answer }), qid!, 'q_000000000000'],
      ['escalate_question', (id: string) => ({ qid: id, reason: 'probing' }), qid!, 'q_000000000000'],
      ['terminate_child', (id: string) => ({ agent_id: id, force: true }), aId, 'ag_000000000000'],
    ] as const) {
      const there = await stranger.call(tool, args(real));
      const missing = await stranger.call(tool, args(fake));
      expect(refusal(there, real), tool).toEqual(refusal(missing, fake));
    }
  });

  it('reports unknown_recipient, recipient_terminated, inbox_full and invalid_input', async () => {
    const { a, bId, task } = await teamOfTwo();
    expect(await a.call('send_message', { to: 'ag_nope', content: 'x' })).toMatchObject({
      ok: false,
      error: { error: 'unknown_recipient' },
    });
    expect(await a.call('send_message', { to: bId })).toMatchObject({
      ok: false,
      error: { error: 'invalid_input', details: { field: 'content' } },
    });
    expect(await a.call('send_message', { to: bId, content: 'x', caller_id: 'ag_forged' })).toMatchObject({
      ok: false,
      error: { error: 'invalid_input', details: { field: 'caller_id' } },
    });

    // Terminating the task consumes every sentinel at once (no spawner runs these agents).
    const other = await createTask(ts);
    const otherRoot = await connectAgent(ts.url, other.token);
    agents.push(otherRoot);
    expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
    const user = await ts.api('POST', `/agents/${bId}/send`, { content: 'too late' });
    expect(user).toMatchObject({ status: 409, body: { error: 'recipient_terminated' } });
  });

  it('refuses a sender past the recipient inbox cap with inbox_full', async () => {
    await ts.close();
    removeHome(ts.home);
    ts = await startTestServer({ env: { BEIDOU_INBOX_CAP: '2' } });
    const { a, bId } = await teamOfTwo();
    expect((await a.call('send_message', { to: bId, content: '1' })).ok).toBe(true);
    expect((await a.call('send_message', { to: bId, content: '2' })).ok).toBe(true);
    const third = await a.call('send_message', { to: bId, content: '3' });
    expect(third).toMatchObject({ ok: false, error: { error: 'inbox_full', details: { cap: 2, undelivered: 2 } } });
  });

  it('caps the characters an inbox holds too, so one recipient cannot take the memory', async () => {
    await ts.close();
    removeHome(ts.home);
    ts = await startTestServer({ env: { BEIDOU_INBOX_MAX_CHARS: '10' } });
    const { a, b, bId } = await teamOfTwo();
    expect((await a.call('send_message', { to: bId, content: '12345678' })).ok).toBe(true);
    expect(await a.call('send_message', { to: bId, content: '123' })).toMatchObject({
      ok: false,
      error: { error: 'inbox_full', details: { undelivered_chars: 8, max_chars: 10 } },
    });
    // Reading frees the room.
    await b.call('read_inbox');
    expect((await a.call('send_message', { to: bId, content: '123' })).ok).toBe(true);
  });

  it('records send_message and agent_input events sharing the message_id', async () => {
    const { a, b, bId, task } = await teamOfTwo();
    const sent = await a.call('send_message', { to: bId, content: 'logged' });
    await b.call('read_inbox');
    const id = sent.ok && sent.value.message_id;
    // agent_input is recorded once the reply has been flushed, so it may follow the reply.
    const body = await until('the agent_input on disk', async () => {
      const { body } = await ts.api('GET', `/tasks/${task.task_id}/events?since=0`);
      return body.events.some(
        (e: { event: string; message_id?: string }) => e.event === 'agent_input' && e.message_id === id,
      )
        ? body
        : undefined;
    });
    const names = body.events
      .filter((e: { message_id?: string }) => e.message_id === id)
      .map((e: { event: string }) => e.event);
    expect(names).toEqual(['send_message', 'agent_input']);
    const seqs = body.events.map((e: { seq: number }) => e.seq);
    expect(seqs).toEqual(seqs.map((_: number, i: number) => i + 1));
  });
});
