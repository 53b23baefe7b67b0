import { afterEach, describe, expect, it } from 'vitest';
import { createParser } from 'eventsource-parser';
import { createTask, removeHome, startTestServer, type TestServer } from '../support/server.js';

/** The admin REST API's edges: bad bodies, paging, the live stream and its resumption. */
describe('admin API', () => {
  let ts: TestServer;
  afterEach(async () => {
    await ts.close();
    removeHome(ts.home);
  });

  it('answers malformed JSON 400, unknown fields 400 naming them, oversize bodies 413, unknown routes 404 — and changes nothing', async () => {
    ts = await startTestServer();
    const post = (body: string, type = 'application/json') =>
      fetch(`${ts.url}/api/tasks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ts.adminToken}`, 'content-type': type },
        body,
      });
    const malformed = await post('{"task": "x"');
    expect(malformed.status).toBe(400);
    expect(await malformed.json()).toMatchObject({ error: 'invalid_json' });
    const unknown = await ts.api('POST', '/tasks', { task: 'x', colour: 'red' });
    expect(unknown).toMatchObject({ status: 400, body: { error: 'invalid_input', details: { field: 'colour' } } });
    const missing = await ts.api('POST', '/tasks', { spawn: false });
    expect(missing).toMatchObject({ status: 400, body: { error: 'invalid_input', details: { field: 'task' } } });
    const wrongType = await ts.api('POST', '/tasks', { task: 'x', spawn: 'yes' });
    expect(wrongType).toMatchObject({ status: 400, body: { error: 'invalid_input', details: { field: 'spawn' } } });
    const skill = await ts.api('POST', '/tasks', { task: 'x', skill: 'nope' });
    expect(skill).toMatchObject({ status: 400, body: { error: 'unknown_skill' } });
    const huge = await post(JSON.stringify({ task: 'x'.repeat(5 * 1024 * 1024) }));
    expect(huge.status).toBe(413);
    expect(await huge.json()).toMatchObject({ error: 'payload_too_large' });
    expect(await ts.api('GET', '/nowhere')).toMatchObject({ status: 404, body: { error: 'not_found' } });
    expect(await ts.api('GET', '/tasks/tsk_missing')).toMatchObject({ status: 404, body: { error: 'unknown_task' } });
    expect(await ts.api('GET', '/agents/ag_missing')).toMatchObject({ status: 404, body: { error: 'unknown_agent' } });
    expect((await ts.api('GET', '/tasks')).body).toEqual({ tasks: [] });
  });

  it('lists tasks newest first with live agent counts, and pages events with since/limit', async () => {
    ts = await startTestServer();
    const first = await createTask(ts, { task: 'first' });
    const second = await createTask(ts, { task: 'second' });
    await ts.api('POST', `/tasks/${first.task_id}/terminate`, {});
    const { tasks } = (await ts.api('GET', '/tasks')).body;
    expect(tasks.map((t: { task_id: string }) => t.task_id)).toEqual([second.task_id, first.task_id]);
    expect(tasks[0].agents).toEqual({ total: 1, live: 1 });
    expect(tasks[1]).toMatchObject({ status: 'terminated', agents: { total: 1, live: 0 } });
    for (let i = 0; i < 5; i++) await ts.api('POST', `/agents/${second.root_agent_id}/send`, { content: `m${i}` });
    const page1 = (await ts.api('GET', `/tasks/${second.task_id}/events?since=0&limit=3`)).body;
    expect(page1.events.map((e: { seq: number }) => e.seq)).toEqual([1, 2, 3]);
    expect(page1.cursor).toBe(3);
    const page2 = (await ts.api('GET', `/tasks/${second.task_id}/events?since=${page1.cursor}&limit=100`)).body;
    expect(page2.events.map((e: { seq: number }) => e.seq)).toEqual([4, 5, 6, 7]);
    const end = (await ts.api('GET', `/tasks/${second.task_id}/events?since=7`)).body;
    expect(end).toEqual({ events: [], cursor: 7 });
    expect((await ts.api('GET', `/tasks/${second.task_id}/events?since=-1`)).status).toBe(400);
    const agent = (await ts.api('GET', `/agents/${second.root_agent_id}`)).body;
    expect(agent).toMatchObject({
      agent_id: second.root_agent_id,
      inbox_depth: 5,
      status: 'active',
      leader_id: 'user',
    });
  });

  /** Reads SSE events from the stream until `count` arrived, then closes it. */
  async function readStream(url: string, headers: Record<string, string>, count: number, onOpen?: () => Promise<void>) {
    const controller = new AbortController();
    const res = await fetch(url, { headers, signal: controller.signal });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/text\/event-stream/);
    const got: Array<{ id: string | undefined; data: any }> = [];
    const parser = createParser({ onEvent: (e) => got.push({ id: e.id, data: JSON.parse(e.data) }) });
    const decoder = new TextDecoder();
    const reader = res.body!.getReader();
    let opened = false;
    while (got.length < count) {
      if (!opened && onOpen) {
        opened = true;
        await onOpen();
      }
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
    }
    controller.abort();
    return got;
  }

  it('streams events live as SSE with id = seq, and resumes after Last-Event-ID or ?since=', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const headers = { authorization: `Bearer ${ts.adminToken}`, accept: 'text/event-stream' };
    const url = `${ts.url}/api/tasks/${task.task_id}/events/stream`;
    // Backlog (seq 1-2), then a live event caused after the stream is open.
    const live = await readStream(url, headers, 3, async () => {
      await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'live one' });
    });
    expect(live.map((e) => e.id)).toEqual(['1', '2', '3']);
    expect(live[2]!.data).toMatchObject({ seq: 3, event: 'send_message', content: 'live one' });
    await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'while away' });
    const resumed = await readStream(url, { ...headers, 'last-event-id': '3' }, 1);
    expect(resumed.map((e) => [e.id, e.data.content])).toEqual([['4', 'while away']]);
    const since = await readStream(`${url}?since=2`, headers, 2);
    expect(since.map((e) => e.id)).toEqual(['3', '4']);
  });
});
