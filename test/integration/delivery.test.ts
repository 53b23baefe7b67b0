import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StreamResumption } from '../../src/server/mcp/resumption.js';
import { quoteLines } from '../../src/domain/envelope.js';
import { waitUntil, type AnyEvent } from '../support/events.js';
import { until } from '../../src/testkit/poll.js';
import { spawnServer, type ServerProcess } from '../support/process.js';
import {
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  tempHome,
  type TestAgent,
  type TestServer,
} from '../support/server.js';
import { storedEvents } from '../support/store.js';

/**
 * A read loses nothing (docs/architecture.md, delivery guarantees): a message leaves the
 * inbox only once the reply carrying it has been flushed to the client's connection; a
 * connection that closes first leaves it there; a crash between the flush and its record
 * delivers it again with the same message_id, marked redelivered; and a tool call whose
 * response stream drops can be resumed with Last-Event-ID.
 */

const COUNT = 30;
// Large enough (about 70 MB of reply: `日\n` is 5 bytes of JSON, and 7 once quoted as `> 日\n`
// in the delivered text; control characters, which were 6, are now dropped as invisible) that the
// kernel's socket buffers cannot take it all for a client that does not read (Linux lets a
// loopback connection buffer some 36 MB): the reply is still on its way when the client goes.
const BIG = '日\n'.repeat(95_000);

let ts: TestServer | undefined;
let proc: ServerProcess | undefined;
let home = '';
const agents: TestAgent[] = [];
const sockets: net.Socket[] = [];

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.allSettled(agents.splice(0).map((a) => a.close()));
  if (ts) await ts.close();
  ts = undefined;
  if (proc) {
    proc.child.kill('SIGKILL');
    await proc.exited;
    proc = undefined;
  }
  if (home) removeHome(home);
  home = '';
});

/** An HTTP request written on a raw socket that never reads its response (until destroyed). */
function rawRequest(
  url: string,
  method: string,
  route: string,
  headers: Record<string, string>,
  body = '',
): net.Socket {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  sockets.push(socket);
  socket.on('error', () => undefined);
  const lines = [
    `${method} ${route} HTTP/1.1`,
    `Host: ${hostname}:${port}`,
    `Content-Length: ${Buffer.byteLength(body)}`,
  ];
  for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
  socket.write(`${lines.join('\r\n')}\r\n\r\n${body}`);
  return socket;
}

const MCP_HEADERS = (token: string, sessionId: string) => ({
  authorization: `Bearer ${token}`,
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
  'mcp-session-id': sessionId,
  'mcp-protocol-version': '2025-11-25',
});

/** Opens an MCP session by hand (initialize, initialized) and returns its id. */
async function openSession(url: string, token: string): Promise<string> {
  const init = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
    }),
  });
  const sessionId = init.headers.get('mcp-session-id');
  await init.text();
  if (!sessionId) throw new Error(`no session id: ${init.status}`);
  const ready = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: MCP_HEADERS(token, sessionId),
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  });
  await ready.text();
  return sessionId;
}

const toolCall = (id: number, name: string, args: Record<string, unknown>) =>
  JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

/** Sends COUNT large messages from the user to the agent and returns their ids. */
async function fill(send: (content: string) => Promise<string>): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < COUNT; i++) ids.push(await send(`${i} ${BIG}`));
  return ids;
}

/** The first event after the messages were sent that takes them on their way (delivering today, agent_input before). */
const handedOver = (ids: string[]) => (events: AnyEvent[]) =>
  events.find(
    (e) =>
      (e.event === 'delivering' && ids.includes(e.message_ids[0])) ||
      (e.event === 'agent_input' && ids.includes(e.message_id)),
  );

// These fill an inbox with the largest messages and then wait on every event of the task, read
// back in memory (`durableEvents`): a PostgreSQL replica keeps 32 MiB of a live task by default.
const WHOLE_TASK_IN_MEMORY = { env: { BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY: String(512 * 2 ** 20) } };

describe('a reply that never reaches its client', () => {
  it('read_inbox: a connection dropped before the reply leaves every message in the inbox', async () => {
    ts = await startTestServer(WHOLE_TASK_IN_MEMORY);
    const task = await createTask(ts);
    const ids = await fill(
      async (content) => (await ts!.api('POST', `/agents/${task.root_agent_id}/send`, { content })).body.message_id,
    );
    const sessionId = await openSession(ts.url, task.token);

    const socket = rawRequest(
      ts.url,
      'POST',
      '/mcp',
      MCP_HEADERS(task.token, sessionId),
      toolCall(1, 'read_inbox', {}),
    );
    await waitUntil(ts, task.task_id, handedOver(ids), { what: 'the read to take the messages' });
    socket.destroy();

    // The reservation ends when the server sees the close; then the messages are free again.
    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    const messages = await until('the messages back in the inbox', async () => {
      const r = await root.call('read_inbox', { peek: true });
      return r.ok && r.value.messages.length === COUNT ? r.value.messages : undefined;
    });
    expect(messages.map((m: { message_id: string }) => m.message_id)).toEqual(ids);
    expect(ts.server.services.registry.agent(task.root_agent_id)!.inbox.size).toBe(COUNT);

    // A read that does reach its client delivers them, each once, marked as possibly seen.
    const read = await root.call('read_inbox');
    expect(
      read.ok &&
        read.value.messages.map((m: { message_id: string; redelivered?: true }) => [m.message_id, m.redelivered]),
    ).toEqual(ids.map((id) => [id, true]));
    const delivered = await waitUntil(ts, task.task_id, (events) => {
      const inputs = events.filter((e) => e.event === 'agent_input');
      return inputs.length === COUNT ? inputs : undefined;
    });
    expect(delivered.map((e) => e.message_id)).toEqual(ids);
  }, 60_000);

  it('a second read while the first reply is in flight gets none of its messages', async () => {
    ts = await startTestServer(WHOLE_TASK_IN_MEMORY);
    const task = await createTask(ts);
    const ids = await fill(
      async (content) => (await ts!.api('POST', `/agents/${task.root_agent_id}/send`, { content })).body.message_id,
    );
    const sessionId = await openSession(ts.url, task.token);
    const socket = rawRequest(
      ts.url,
      'POST',
      '/mcp',
      MCP_HEADERS(task.token, sessionId),
      toolCall(1, 'read_inbox', {}),
    );
    await waitUntil(ts, task.task_id, handedOver(ids), { what: 'the first read to take the messages' });

    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    expect(await root.call('read_inbox')).toMatchObject({ ok: true, value: { messages: [] } });
    socket.destroy();
  }, 60_000);

  it('the hook: a connection dropped before the reply leaves every message in the inbox, then marks them [redelivered]', async () => {
    ts = await startTestServer(WHOLE_TASK_IN_MEMORY);
    const task = await createTask(ts);
    const ids = await fill(
      async (content) => (await ts!.api('POST', `/agents/${task.root_agent_id}/send`, { content })).body.message_id,
    );

    const headers = { authorization: `Bearer ${task.token}`, 'content-type': 'application/json' };
    const socket = rawRequest(ts.url, 'POST', '/api/hook/post-tool-use', headers, '{}');
    await waitUntil(ts, task.task_id, handedOver(ids), { what: 'the hook to take the messages' });
    socket.destroy();

    const inbox = () => ts!.server.services.inboxes.peek(ts!.server.services.registry.agent(task.root_agent_id)!);
    await until('the messages free again', () => (inbox().length === COUNT ? true : undefined));
    expect(inbox().map((m) => m.message_id)).toEqual(ids);

    const res = await fetch(`${ts.url}/api/hook/post-tool-use`, { method: 'POST', headers, body: '{}' });
    const body = (await res.json()) as { messages: { message_id: string; redelivered?: true }[]; context: string };
    expect(body.messages.map((m) => m.message_id)).toEqual(ids);
    expect(body.messages.every((m) => m.redelivered === true)).toBe(true);
    expect(
      body.context.startsWith(
        `New messages in your Beidou inbox:\n\n[redelivered] [from user (user)]\n${quoteLines(`0 ${BIG}`)}`,
      ),
    ).toBe(true);
  }, 60_000);
});

describe('a crash between the reply and its record', () => {
  it('redelivers after SIGKILL with the same message_id and redelivered: true', async () => {
    home = tempHome();
    proc = await spawnServer(home);
    const admin = readFileSync(path.join(home, 'admin.token'), 'utf8').trim();
    const api = async (url: string, route: string, body: unknown) => {
      const res = await fetch(`${url}/api${route}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return (await res.json()) as any;
    };
    const task = await api(proc.url, '/tasks', { task: 'crash', spawn: false });
    const ids = await fill(
      async (content) => (await api(proc!.url, `/agents/${task.root_agent_id}/send`, { content })).message_id,
    );
    const sessionId = await openSession(proc.url, task.token);
    rawRequest(proc.url, 'POST', '/mcp', MCP_HEADERS(task.token, sessionId), toolCall(1, 'read_inbox', {}));

    // The stored log (the JSONL file, or the database) once the read has taken the
    // messages; the reply is still on its way.
    const onDisk = async () => (await storedEvents(home, task.task_id)) as AnyEvent[];
    await until('the read recorded on disk', async () => handedOver(ids)(await onDisk()));
    proc.child.kill('SIGKILL');
    await proc.exited;
    expect((await onDisk()).filter((e) => e.event === 'agent_input')).toEqual([]);

    proc = await spawnServer(home);
    const root = await connectAgent(proc.url, task.token);
    agents.push(root);
    const read = await root.call('read_inbox');
    expect(
      read.ok &&
        read.value.messages.map((m: { message_id: string; redelivered?: true }) => [m.message_id, m.redelivered]),
    ).toEqual(ids.map((id) => [id, true]));
    expect(await root.call('read_inbox')).toMatchObject({ ok: true, value: { messages: [] } });
    const inputs = await until('the deliveries recorded', async () => {
      const found = (await onDisk()).filter((e) => e.event === 'agent_input');
      return found.length === COUNT ? found : undefined;
    });
    expect(inputs.map((e) => e.message_id)).toEqual(ids);
  }, 90_000);
});

/** Reads SSE events from a response body until `stop` says enough. */
async function readEvents(
  body: ReadableStream<Uint8Array>,
  stop: (events: Record<string, string>[]) => boolean,
): Promise<Record<string, string>[]> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const events: Record<string, string>[] = [];
  let buffer = '';
  while (!stop(events)) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event: Record<string, string> = {};
      for (const line of block.split('\n')) {
        const i = line.indexOf(':');
        if (i <= 0) continue;
        const key = line.slice(0, i);
        event[key] = (event[key] ?? '') + line.slice(i + 1).replace(/^ /, '');
      }
      if (Object.keys(event).length > 0) events.push(event);
    }
  }
  await reader.cancel().catch(() => undefined);
  return events;
}

describe('SSE resumability (MCP 2025-11-25)', () => {
  it('a blocked ask_user whose stream dropped is resumed with Last-Event-ID and receives its answer', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const sessionId = await openSession(ts.url, task.token);
    const abort = new AbortController();
    const res = await fetch(`${ts.url}/mcp`, {
      method: 'POST',
      headers: MCP_HEADERS(task.token, sessionId),
      body: toolCall(7, 'ask_user', {
        questions: [{ question: 'Deadline?', header: 'Deadline', multiSelect: false, options: [] }],
      }),
      signal: abort.signal,
    });
    // The stream opens with a priming event: an id, empty data, and a retry.
    const [priming] = await readEvents(res.body!, (events) => events.length >= 1);
    expect(priming).toMatchObject({ id: expect.any(String), data: '', retry: expect.stringMatching(/^\d+$/) });
    abort.abort(); // the connection drops; no cancellation is sent

    const qid = await until('the question at the gateway', async () => {
      const pending = await ts!.api('GET', '/questions/pending');
      return (pending.body as { qid: string }[])[0]?.qid;
    });
    expect(await ts.api('POST', `/questions/${qid}/answer`, { answers: [{ text: 'Friday' }] })).toMatchObject({
      status: 200,
    });

    const resumed = await fetch(`${ts.url}/mcp`, {
      method: 'GET',
      headers: { ...MCP_HEADERS(task.token, sessionId), accept: 'text/event-stream', 'last-event-id': priming!.id! },
    });
    expect(resumed.status).toBe(200);
    const events = await readEvents(resumed.body!, (evs) => evs.some((e) => e.data?.includes('"id":7')));
    const result = events.map((e) => JSON.parse(e.data || 'null')).find((m) => m?.id === 7);
    expect(result.result.structuredContent).toMatchObject({ qid, answer_text: 'Deadline: Friday' });
    // The answer reached the call: nothing went to the inbox.
    const inbox = ts.server.services.registry.agent(task.root_agent_id)!.inbox;
    expect([...inbox.values()].filter((m) => m.content.startsWith('[ANSWER'))).toEqual([]);
  }, 30_000);

  it('an answer whose stream is never resumed goes to the inbox once the stored reply expires', async () => {
    ts = await startTestServer({ env: { BEIDOU_RESUME_S: '1' } });
    const task = await createTask(ts);
    const sessionId = await openSession(ts.url, task.token);
    const abort = new AbortController();
    const res = await fetch(`${ts.url}/mcp`, {
      method: 'POST',
      headers: MCP_HEADERS(task.token, sessionId),
      body: toolCall(3, 'ask_user', {
        questions: [{ question: 'Deadline?', header: 'Deadline', multiSelect: false, options: [] }],
      }),
      signal: abort.signal,
    });
    await readEvents(res.body!, (events) => events.length >= 1);
    abort.abort();
    const qid = await until(
      'the question at the gateway',
      async () => (await ts!.api('GET', '/questions/pending')).body[0]?.qid as string | undefined,
    );
    expect(await ts.api('POST', `/questions/${qid}/answer`, { answers: [{ text: 'Monday' }] })).toMatchObject({
      status: 200,
    });
    const late = await waitUntil(ts, task.task_id, (events) =>
      events.find((e) => e.event === 'inbox.posted' && e.content.startsWith(`[ANSWER ${qid}]`)),
    );
    expect(late.content).toBe(`[ANSWER ${qid}] Deadline: Monday`);
  }, 30_000);
});

describe('the stream event store', () => {
  const message = (n: number, size = 10) => ({
    jsonrpc: '2.0' as const,
    method: 'notifications/message',
    params: { n, pad: 'x'.repeat(size) },
  });

  it('is bounded per session by count, bytes and age', async () => {
    let now = 1_000;
    const store = new StreamResumption({ maxEvents: 5, maxBytes: 2_000, maxAgeS: 60 }, () => now);
    try {
      for (let i = 0; i < 12; i++) await store.storeEvent('s', message(i));
      expect(store.size.events).toBe(5);

      for (let i = 0; i < 4; i++) await store.storeEvent('s', message(100 + i, 600));
      expect(store.size.bytes).toBeLessThanOrEqual(2_000);
      expect(store.size.events).toBeLessThan(5);

      // One event alone over the byte bound is not kept.
      await store.storeEvent('s', message(200, 5_000));
      expect(store.size.bytes).toBeLessThanOrEqual(2_000);

      now += 61;
      store.prune();
      expect(store.size).toEqual({ events: 0, bytes: 0 });
    } finally {
      store.close();
    }
  });

  it('replays what followed an event of the same stream, and refuses an evicted one', async () => {
    const store = new StreamResumption({ maxEvents: 3, maxBytes: 10_000, maxAgeS: 60 }, () => 0);
    try {
      const first = await store.storeEvent('a', message(1));
      await store.storeEvent('b', message(2));
      await store.storeEvent('a', message(3));
      const sent: unknown[] = [];
      expect(await store.replayEventsAfter(first, { send: async (_id, m) => void sent.push(m) })).toBe('a');
      expect(sent).toEqual([message(3)]);
      await store.storeEvent('a', message(4));
      expect(await store.getStreamIdForEventId(first)).toBeUndefined();
    } finally {
      store.close();
    }
  });
});
