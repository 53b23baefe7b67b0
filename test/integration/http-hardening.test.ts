import http from 'node:http';
import net from 'node:net';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { createParser } from 'eventsource-parser';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startServer, type BeidouServer } from '../../src/server/server.js';
import { waitForEvent } from '../support/events.js';
import { within } from '../../src/testkit/poll.js';
import {
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  tempHome,
  type TestAgent,
  type TestServer,
} from '../support/server.js';

/**
 * HTTP under hostile input and overload: what a client without
 * a token can cost, the time and connection limits, the per-agent session cap, bad bodies,
 * parameters and resume ids as 4xx, and the Host/Origin check against DNS rebinding.
 * Connection-level behaviour is driven with raw sockets.
 */

/** A raw TCP connection to the server: what it writes, and a promise of everything read until it closed. */
function rawSocket(url: string, payload?: string | Buffer) {
  const socket = net.connect(Number(new URL(url).port), '127.0.0.1');
  let data = '';
  let onData: (() => void) | null = null;
  socket.on('data', (d) => {
    data += d.toString();
    onData?.();
  });
  socket.on('error', () => undefined); // a reset counts as closed
  const closed = new Promise<string>((resolve) => socket.once('close', () => resolve(data)));
  if (payload !== undefined) socket.write(payload);
  /** Resolves once the data read so far contains `text`. */
  const received = (text: string) =>
    new Promise<string>((resolve) => {
      const check = () => data.includes(text) && resolve(data);
      onData = check;
      check();
    });
  return { socket, closed, received, data: () => data };
}

const post = (path: string, headers: Record<string, string>, contentLength: number, body: string) =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('')}Content-Type: application/json\r\nContent-Length: ${contentLength}\r\n\r\n${body}`;

/** The server with its log lines kept (the test support's server logs nothing). */
async function startLogged(env: Record<string, string> = {}) {
  const home = tempHome();
  const lines: Array<Record<string, any>> = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const server = await startServer(loadConfig({ port: '0', home }, env), { logger });
  return {
    server,
    home,
    lines,
    close: async () => {
      await server.close();
      removeHome(home);
    },
  };
}

/** An HTTP request with headers fetch may not send (Host). */
function rawHttp(
  url: string,
  headers: Record<string, string>,
  path = '/api/health',
): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port: Number(new URL(url).port), path, headers, agent: false },
      (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
};
const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

describe('resource limits: no token, no resources', () => {
  let ts: TestServer;
  const agents: TestAgent[] = [];
  const streams: AbortController[] = [];
  afterEach(async () => {
    for (const s of streams.splice(0)) s.abort();
    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    await ts?.close();
    if (ts) removeHome(ts.home);
  });

  it('answers a request without a valid token 401 before reading its body, and closes the connection', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    // Headers claiming a megabyte, four bytes sent: the refusal may not wait for the rest.
    for (const [path, token] of [
      ['/api/tasks', null],
      ['/api/tasks', 'not-a-token'],
      ['/mcp', null],
      ['/api/spawner/heartbeat', null],
      ['/api/hook/stop', null],
      ['/mcp', ts.adminToken], // a valid token of the wrong kind is refused the same way
      ['/api/tasks', task.token],
    ] as const) {
      const headers: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};
      const raw = rawSocket(ts.url, post(path, headers, 1_000_000, '{"a"'));
      const seen = await within(raw.closed, 5_000, `connection closed after a refused POST ${path}`);
      expect(seen, path).toMatch(/^HTTP\/1\.1 401 /);
      expect(seen.toLowerCase(), path).toContain('connection: close');
    }
    // /api/health stays open to all.
    expect((await fetch(`${ts.url}/api/health`)).status).toBe(200);
    // The routes that take no token take no body either: one that comes with a claimed body
    // is answered and its connection closed, not held for the rest.
    for (const path of ['/api/health', '/', '/.well-known/oauth-authorization-server']) {
      const raw = rawSocket(ts.url, `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n{"a"`);
      const seen = await within(raw.closed, 5_000, `connection closed after GET ${path} with a body`);
      expect(seen.toLowerCase(), path).toContain('connection: close');
    }
  });

  it('cuts a body that does not arrive within BEIDOU_BODY_TIMEOUT_S (408), and headers that never end', async () => {
    ts = await startTestServer({ env: { BEIDOU_BODY_TIMEOUT_S: '1' } });
    const slowBody = rawSocket(ts.url, post('/api/tasks', { Authorization: `Bearer ${ts.adminToken}` }, 100, '{"ta'));
    const slowHeaders = rawSocket(ts.url, 'POST /api/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    const silent = rawSocket(ts.url);
    expect(await within(slowBody.closed, 5_000, 'slow body cut')).toMatch(/^HTTP\/1\.1 408 /);
    expect(await within(slowHeaders.closed, 5_000, 'slow headers cut')).toMatch(/^HTTP\/1\.1 408 /);
    await within(silent.closed, 5_000, 'silent connection cut');
    expect((await ts.api('GET', '/tasks')).body.tasks).toEqual([]);
  });

  it('lets a blocked ask_user and an event stream outlive the body timeout', async () => {
    ts = await startTestServer({ env: { BEIDOU_BODY_TIMEOUT_S: '1' } });
    const task = await createTask(ts);
    const controller = new AbortController();
    streams.push(controller);
    const res = await fetch(`${ts.url}/api/tasks/${task.task_id}/events/stream`, {
      headers: { authorization: `Bearer ${ts.adminToken}`, accept: 'text/event-stream' },
      signal: controller.signal,
    });
    expect(res.status).toBe(200);
    const streamed: Array<Record<string, any>> = [];
    let onEvent: (() => void) | null = null;
    const parser = createParser({
      onEvent: (e) => {
        streamed.push(JSON.parse(e.data));
        onEvent?.();
      },
    });
    const streamEnded = (async () => {
      const decoder = new TextDecoder();
      try {
        for await (const chunk of res.body!) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
      } catch {
        // aborted at the end
      }
      return true;
    })();
    const streamedEvent = (name: string) =>
      new Promise<void>((resolve) => {
        const check = () => streamed.some((e) => e.event === name) && resolve();
        onEvent = check;
        check();
      });

    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    const asking = root.call('ask_user', {
      questions: [
        {
          question: 'Proceed?',
          header: 'Go',
          multiSelect: false,
          options: [
            { label: 'Yes', description: 'go on' },
            { label: 'No', description: 'stop' },
          ],
        },
      ],
    });
    const asked = await waitForEvent(ts, task.task_id, (e) => e.event === 'question_asked');
    await within(streamedEvent('question_asked'), 5_000, 'question_asked on the stream');

    // A slow body on another connection is cut: the limit is live and has passed since both began.
    const slow = rawSocket(ts.url, post('/api/tasks', { Authorization: `Bearer ${ts.adminToken}` }, 100, '{'));
    expect(await within(slow.closed, 5_000, 'slow body cut')).toMatch(/^HTTP\/1\.1 408 /);

    // Both long-lived responses are still there: the answer reaches the blocked call and the stream.
    const answered = await ts.api('POST', `/questions/${asked.qid}/answer`, {
      answers: [{ selected_labels: ['Yes'] }],
    });
    expect(answered.status).toBe(200);
    const outcome = await within(asking, 5_000, 'ask_user answered');
    expect(outcome.ok).toBe(true);
    await within(streamedEvent('question_answered'), 5_000, 'question_answered on the stream');
    expect(await Promise.race([streamEnded, Promise.resolve(false)])).toBe(false);
  });

  it('closes connections past BEIDOU_MAX_CONNECTIONS at once and logs it at most once a minute', async () => {
    const s = await startLogged({ BEIDOU_MAX_CONNECTIONS: '3' });
    const open = [0, 1, 2].map(() => rawSocket(s.server.url, 'GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'));
    try {
      await Promise.all(open.map((c) => within(c.received('"ok":true'), 5_000, 'health on a kept-alive connection')));
      for (let i = 0; i < 2; i++) {
        const over = rawSocket(s.server.url);
        expect(await within(over.closed, 5_000, 'connection over the cap closed')).toBe('');
      }
      expect(s.lines.filter((l) => l.msg === 'connection cap reached: new connections are closed at once')).toEqual([
        expect.objectContaining({ level: 40, max: 3, setting: 'BEIDOU_MAX_CONNECTIONS', dropped: 1 }),
      ]);
      // A freed place is taken again (the server sees the close a moment after the client).
      open[0]!.socket.destroy();
      await within(
        (async () => {
          for (;;) {
            const again = rawSocket(
              s.server.url,
              'GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n',
            );
            if ((await again.closed).includes('"ok":true')) return;
          }
        })(),
        5_000,
        'a connection served once one closed',
      );
    } finally {
      for (const c of open) c.socket.destroy();
      await s.close();
    }
  });

  describe('per-agent MCP session cap', () => {
    const initialize = async (token: string) => {
      const res = await fetch(`${ts.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, authorization: `Bearer ${token}` },
        body: JSON.stringify(INIT),
      });
      const text = await res.text();
      return { status: res.status, sessionId: res.headers.get('mcp-session-id'), text };
    };
    const ping = async (token: string, sessionId: string) => {
      const res = await fetch(`${ts.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, authorization: `Bearer ${token}`, 'mcp-session-id': sessionId },
        body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }),
      });
      await res.text();
      return res.status;
    };
    /** A long-lived GET (the /mcp notification stream or a legacy /sse stream), kept open. */
    const openStream = async (token: string, path: string, sessionId?: string) => {
      const controller = new AbortController();
      streams.push(controller);
      const res = await fetch(`${ts.url}${path}`, {
        headers: {
          authorization: `Bearer ${token}`,
          accept: 'text/event-stream',
          ...(sessionId ? { 'mcp-session-id': sessionId } : {}),
        },
        signal: controller.signal,
      });
      return res.status;
    };

    it('closes the least recently used idle session past the cap, and refuses 429 when every one has a stream open', async () => {
      ts = await startTestServer({ env: { BEIDOU_MAX_SESSIONS_PER_AGENT: '2' } });
      const task = await createTask(ts);
      const s1 = (await initialize(task.token)).sessionId!;
      const s2 = (await initialize(task.token)).sessionId!;
      expect(await ping(task.token, s1)).toBe(200); // s2 is now the least recently used
      const s3 = await initialize(task.token);
      expect(s3.status).toBe(200);
      expect(await ping(task.token, s2)).toBe(404);
      expect(await ping(task.token, s1)).toBe(200);
      expect(await ping(task.token, s3.sessionId!)).toBe(200);
      expect(ts.server.mcpSessions()).toBe(2);

      expect(await openStream(task.token, '/mcp', s1)).toBe(200);
      expect(await openStream(task.token, '/mcp', s3.sessionId!)).toBe(200);
      const refused = await initialize(task.token);
      expect(refused.status).toBe(429);
      expect(JSON.parse(refused.text)).toEqual({
        error: 'limit_exceeded',
        message: expect.any(String),
        details: { limit: 'sessions_per_agent', max: 2, setting: 'BEIDOU_MAX_SESSIONS_PER_AGENT' },
      });
      expect(ts.server.mcpSessions()).toBe(2);
      // The cap is per agent: another agent of the same task still opens its own.
      const other = await ts.api('POST', '/tasks', { task: 'other', spawn: false });
      expect((await initialize(other.body.token)).status).toBe(200);
    });

    it('counts legacy SSE sessions, which always have their stream open', async () => {
      ts = await startTestServer({ env: { BEIDOU_MAX_SESSIONS_PER_AGENT: '2' } });
      const task = await createTask(ts);
      expect(await openStream(task.token, '/sse')).toBe(200);
      expect(await openStream(task.token, '/sse')).toBe(200);
      expect(await openStream(task.token, '/sse')).toBe(429);
      expect((await initialize(task.token)).status).toBe(429);
      expect(ts.server.mcpSessions()).toBe(2);
    });
  });
});

describe('malformed requests: bad bodies, parameters and resume ids are 4xx, never 500', () => {
  let ts: TestServer;
  afterEach(async () => {
    await ts.close();
    removeHome(ts.home);
  });

  const CORRUPT: Record<string, Buffer> = {
    gzip: Buffer.concat([gzipSync('{"a":1}').subarray(0, 10), Buffer.from('garbage, not deflate data')]),
    deflate: Buffer.from('not deflate data at all'),
    br: Buffer.concat([brotliCompressSync('{"a":1}').subarray(0, 2), Buffer.from('not brotli data')]),
  };

  it('answers a corrupt gzip, deflate or br body 400 invalid_body on every POST route and on /mcp', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const head = (await ts.api('GET', `/tasks/${task.task_id}/events`)).body.cursor as number;
    const admin = { authorization: `Bearer ${ts.adminToken}` };
    const agent = { authorization: `Bearer ${task.token}` };
    const spawner = { authorization: `Bearer ${spawnerToken}`, 'beidou-spawner-instance': 'box' };
    const routes: Array<[string, Record<string, string>]> = [
      ['/api/tasks', admin],
      [`/api/tasks/${task.task_id}/terminate`, admin],
      [`/api/agents/${task.root_agent_id}/send`, admin],
      [`/api/agents/${task.root_agent_id}/token`, admin],
      ['/api/questions/q_x/answer', admin],
      ['/api/questions/q_x/decline', admin],
      ['/api/spawner-tokens', admin],
      ['/api/spawner/heartbeat', spawner],
      ['/api/spawner/ack', spawner],
      [`/api/spawner/agents/${task.root_agent_id}/started`, spawner],
      [`/api/spawner/agents/${task.root_agent_id}/events`, spawner],
      ['/api/hook/pre-tool-use', agent],
      ['/api/hook/post-tool-use', agent],
      ['/api/hook/stop', agent],
      ['/mcp', { ...agent, accept: 'application/json, text/event-stream' }],
      ['/messages?sessionId=x', agent],
    ];
    for (const [route, headers] of routes) {
      for (const [encoding, body] of Object.entries(CORRUPT)) {
        const res = await fetch(`${ts.url}${route}`, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/json', 'content-encoding': encoding },
          body,
        });
        expect([route, encoding, res.status], `${route} ${encoding}`).toEqual([route, encoding, 400]);
        expect(await res.json()).toMatchObject({ error: 'invalid_body', message: expect.any(String) });
      }
    }
    // Nothing was written: the task's log ends where it did.
    expect((await ts.api('GET', `/tasks/${task.task_id}/events`)).body.cursor).toBe(head);
  });

  it('answers a %ff path parameter 400 invalid_input', async () => {
    ts = await startTestServer();
    const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const admin = { authorization: `Bearer ${ts.adminToken}` };
    const spawner = { authorization: `Bearer ${spawnerToken}`, 'beidou-spawner-instance': 'box' };
    const routes: Array<[string, string, Record<string, string>]> = [
      ['GET', '/api/tasks/%ff', admin],
      ['POST', '/api/tasks/%ff/terminate', admin],
      ['GET', '/api/tasks/%ff/events', admin],
      ['GET', '/api/tasks/%ff/events/stream', admin],
      ['GET', '/api/agents/%ff', admin],
      ['POST', '/api/agents/%ff/send', admin],
      ['POST', '/api/agents/%ff/token', admin],
      ['POST', '/api/questions/%ff/answer', admin],
      ['POST', '/api/questions/%ff/decline', admin],
      ['POST', '/api/spawner/agents/%ff/started', spawner],
      ['POST', '/api/spawner/agents/%ff/events', spawner],
    ];
    for (const [method, route, headers] of routes) {
      const res = await fetch(`${ts.url}${route}`, {
        method,
        headers: { ...headers, ...(method === 'POST' ? { 'content-type': 'application/json' } : {}) },
        ...(method === 'POST' ? { body: '{}' } : {}),
      });
      expect([method, route, res.status]).toEqual([method, route, 400]);
      expect(await res.json()).toMatchObject({ error: 'invalid_input' });
    }
  });

  it('takes only a whole non-negative Last-Event-ID no later than the last event', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const url = `${ts.url}/api/tasks/${task.task_id}/events/stream`;
    const head = (await ts.api('GET', `/tasks/${task.task_id}/events`)).body.cursor as number;
    const open = async (lastEventId: string) => {
      const controller = new AbortController();
      const res = await fetch(url, {
        headers: { authorization: `Bearer ${ts.adminToken}`, 'last-event-id': lastEventId },
        signal: controller.signal,
      });
      const body = res.headers.get('content-type')?.includes('json') ? await res.json() : null;
      controller.abort();
      return { status: res.status, body };
    };
    for (const bad of ['5abc', '-1', '1.5', '1e3', 'x', ' ', String(head + 1), '99999999999999999999']) {
      const res = await open(bad);
      expect([bad, res.status]).toEqual([bad, 400]);
      expect(res.body).toMatchObject({ error: 'invalid_input', details: { field: 'Last-Event-ID' } });
    }
    expect((await open('0')).status).toBe(200);
    expect((await open(String(head))).status).toBe(200);
  });
});

describe('Host check: a page cannot borrow the server (Host and Origin against DNS rebinding)', () => {
  let server: BeidouServer | null = null;
  let home = '';
  let lines: Array<Record<string, any>> = [];
  afterEach(async () => {
    await server?.close();
    server = null;
    removeHome(home);
  });
  const start = async (env: Record<string, string>) => {
    const s = await startLogged(env);
    ({ server, home, lines } = s);
    return s.server.url;
  };
  const WARNING = /Host and Origin are not checked/;

  it('bound to loopback: accepts loopback names only, in Host and in Origin (403 forbidden_host)', async () => {
    const url = await start({});
    const port = new URL(url).port;
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'LOCALHOST', `127.9.8.7:${port}`, `[::1]:${port}`]) {
      expect([host, (await rawHttp(url, { host })).status]).toEqual([host, 200]);
    }
    expect((await rawHttp(url, { host: `localhost:${port}`, origin: `http://localhost:${port}` })).status).toBe(200);
    for (const headers of [
      { host: `evil.example:${port}` },
      { host: 'attacker.127.0.0.1.nip.io' },
      { host: `localhost:${port}`, origin: 'http://evil.example' },
      { host: `localhost:${port}`, origin: 'null' },
    ] as Array<Record<string, string>>) {
      const res = await rawHttp(url, headers);
      expect([headers, res.status]).toEqual([headers, 403]);
      expect(res.body).toMatchObject({
        error: 'forbidden_host',
        details: { header: headers.origin ? 'origin' : 'host' },
      });
    }
    // The check comes before anything else, authenticated routes included.
    const authed = await rawHttp(
      url,
      { host: 'evil.example', authorization: `Bearer ${server!.adminToken}` },
      '/api/tasks',
    );
    expect(authed.status).toBe(403);
    expect(lines.some((l) => WARNING.test(l.msg))).toBe(false);
  });

  it('bound elsewhere with BEIDOU_ALLOWED_HOSTS: accepts those names (and loopback ones) only', async () => {
    const url = await start({ BEIDOU_HOST: '0.0.0.0', BEIDOU_ALLOWED_HOSTS: 'Beidou.Example, 10.0.0.5:7777' });
    expect((await rawHttp(url, { host: 'beidou.example:7777' })).status).toBe(200);
    expect((await rawHttp(url, { host: 'beidou.example', origin: 'https://beidou.example' })).status).toBe(200);
    expect((await rawHttp(url, { host: '10.0.0.5:7777' })).status).toBe(200);
    expect((await rawHttp(url, { host: 'localhost' })).status).toBe(200);
    expect((await rawHttp(url, { host: '10.0.0.5:8888' })).status).toBe(403);
    expect((await rawHttp(url, { host: 'evil.example' })).status).toBe(403);
    expect((await rawHttp(url, { host: 'beidou.example', origin: 'http://evil.example' })).status).toBe(403);
    expect(lines.some((l) => WARNING.test(l.msg))).toBe(false);
  });

  it('bound elsewhere without an allow-list: refused at start, unless BEIDOU_ALLOW_ANY_HOST=1: then no check, and one warning', async () => {
    home = tempHome();
    await expect(startServer(loadConfig({ port: '0', home }, { BEIDOU_HOST: '0.0.0.0' }))).rejects.toThrow(
      /not listening on 0\.0\.0\.0 without BEIDOU_ALLOWED_HOSTS/,
    );
    removeHome(home);
    const url = await start({ BEIDOU_HOST: '0.0.0.0', BEIDOU_ALLOW_ANY_HOST: '1' });
    expect((await rawHttp(url, { host: 'anything.example', origin: 'http://elsewhere.example' })).status).toBe(200);
    expect(lines.filter((l) => WARNING.test(l.msg))).toEqual([expect.objectContaining({ level: 40, host: '0.0.0.0' })]);
  });
});
