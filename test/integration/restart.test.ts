import { afterEach, describe, expect, it } from 'vitest';
import {
  agentToken,
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';

describe('restart on the same home', () => {
  let ts: TestServer | undefined;
  let home = '';
  const agents: TestAgent[] = [];
  afterEach(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    await ts?.close();
    removeHome(home);
  });

  it('answers GET /api/tasks/:id and list_peers exactly as before and delivers undelivered messages once', async () => {
    ts = await startTestServer();
    home = ts.home;
    const task = await createTask(ts);
    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    const team = await root.call('create_team', {
      name: 'pair',
      task: 'pair up',
      roles: [
        { role: 'writer', skill: 'worker', description: 'writes' },
        { role: 'editor', skill: 'worker', description: 'edits' },
      ],
    });
    if (!team.ok) throw new Error(JSON.stringify(team.error));
    const [writer, editor] = team.value.members as Array<{ agent_id: string }>;
    const writerToken = await agentToken(ts, writer!.agent_id);
    const editorToken = await agentToken(ts, editor!.agent_id);
    const w = await connectAgent(ts.url, writerToken);
    const e = await connectAgent(ts.url, editorToken);
    agents.push(w, e);

    await w.call('send_message', { to: editor!.agent_id, content: 'read before restart' });
    expect((await e.call('read_inbox')).ok).toBe(true);
    const pending1 = await w.call('send_message', { to: editor!.agent_id, content: 'waiting 1' });
    const pending2 = await root.call('send_message', { to: editor!.agent_id, content: 'waiting 2' });
    await ts.api('POST', `/agents/${writer!.agent_id}/send`, { content: 'from the user' });

    const before = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    const peersBefore = await Promise.all(
      ['team', 'children', 'all'].map((scope) => root.call('list_peers', { scope })),
    );
    const editorPeersBefore = await e.call('list_peers', {});
    const eventsBefore = (await ts.api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).body.events;

    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    await ts.close();
    ts = await startTestServer({ home });

    expect((await ts.api('GET', `/tasks/${task.task_id}`)).body).toEqual(before);
    const root2 = await connectAgent(ts.url, task.token);
    const e2 = await connectAgent(ts.url, editorToken);
    const w2 = await connectAgent(ts.url, writerToken);
    agents.push(root2, e2, w2);
    const peersAfter = await Promise.all(
      ['team', 'children', 'all'].map((scope) => root2.call('list_peers', { scope })),
    );
    expect(peersAfter.map((p) => p.raw.structuredContent)).toEqual(peersBefore.map((p) => p.raw.structuredContent));
    expect((await e2.call('list_peers', {})).raw.structuredContent).toEqual(editorPeersBefore.raw.structuredContent);

    const delivered = await e2.call('read_inbox');
    expect(
      delivered.ok &&
        delivered.value.messages.map((m: { message_id: string; content: string }) => [m.message_id, m.content]),
    ).toEqual([
      [pending1.ok && pending1.value.message_id, 'waiting 1'],
      [pending2.ok && pending2.value.message_id, 'waiting 2'],
    ]);
    const userMessage = await w2.call('read_inbox');
    expect(userMessage.ok && userMessage.value.messages).toEqual([
      expect.objectContaining({ from: 'user', kind: 'user', content: 'from the user' }),
    ]);
    expect((await e2.call('read_inbox')).raw.structuredContent).toEqual({ messages: [] });

    // Once more: what was delivered stays delivered, and the log continues gaplessly.
    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    await ts.close();
    ts = await startTestServer({ home });
    const e3 = await connectAgent(ts.url, editorToken);
    agents.push(e3);
    expect((await e3.call('read_inbox')).raw.structuredContent).toEqual({ messages: [] });
    const events = (await ts.api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).body.events as Array<{
      seq: number;
    }>;
    expect(events.slice(0, eventsBefore.length)).toEqual(eventsBefore);
    expect(events.map((ev) => ev.seq)).toEqual(events.map((_, i) => i + 1));
  });
});
