import http from 'node:http';
import net from 'node:net';
import { createParser } from 'eventsource-parser';
import { afterEach, describe, expect, it } from 'vitest';
import { watchInbox, type WatchEnd } from '../../src/cli/wake/inbox-watch.js';
import type { InboxSummary } from '../../src/domain/messages.js';
import { waitForEvent } from '../support/events.js';
import { until, within } from '../../src/testkit/poll.js';
import {
  agentToken,
  connectAgent,
  createTask,
  FakeClock,
  removeHome,
  startTestServer,
  tempHome,
  type TestAgent,
  type TestServer,
} from '../support/server.js';
import { handSpawner } from '../support/spawner-stream.js';

/**
 * `GET /api/hook/inbox/stream` (docs/claude-code.md), what the relay and the rewake hook
 * follow to wake an idle Claude Code session: an agent's inbox as counts and sender names,
 * never contents; `ended` once the agent can get no more mail; capped per agent apart from
 * MCP sessions. Against the real server, read by a plain SSE reader and by the real client
 * (`watchInbox`).
 */

const ROUTE = '/api/hook/inbox/stream';
const WAIT_MS = 10_000;

interface SseEvent {
  event: string;
  data: any;
}

interface InboxStream {
  status: number;
  /** The JSON body of a refusal. */
  refusal: any;
  /** Everything the server wrote on the stream so far, as sent. */
  raw(): string;
  /** The next event not yet taken; rejects if the stream closes (or nothing comes) first. */
  next(): Promise<SseEvent>;
  /** Resolves once the stream is closed: true when the server ended the response, false when the connection was cut. */
  closed: Promise<boolean>;
  close(): void;
}

/**
 * Opens the inbox stream with node:http (which sends what fetch will not: a body on a GET,
 * any header) and reads its events as they come.
 */
function openInbox(
  url: string,
  token: string | null,
  o: { path?: string; headers?: Record<string, string>; body?: string; method?: string } = {},
): Promise<InboxStream> {
  const { port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port: Number(port),
      path: o.path ?? ROUTE,
      method: o.method ?? 'GET',
      agent: false,
      headers: {
        accept: 'text/event-stream',
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        // Node sends no length of its own for a GET's body (the server would read it as a second request).
        ...(o.body !== undefined ? { 'content-length': String(Buffer.byteLength(o.body)) } : {}),
        ...o.headers,
      },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      req.off('error', reject);
      req.on('error', () => undefined); // our own close, or the server's
      const queue: SseEvent[] = [];
      let text = '';
      let ended = false;
      let wake: (() => void) | null = null;
      const closed = new Promise<void>((done) => res.once('close', done)).then(() => {
        ended = true;
        wake?.();
        return res.complete;
      });
      const parser = createParser({
        onEvent: (e) => {
          queue.push({ event: e.event ?? 'message', data: JSON.parse(e.data) });
          wake?.();
        },
      });
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        if (res.statusCode === 200) parser.feed(chunk);
      });
      const stream: InboxStream = {
        status: res.statusCode!,
        refusal: undefined,
        raw: () => text,
        closed,
        close: () => req.destroy(),
        next: () =>
          new Promise<SseEvent>((ok, fail) => {
            const timer = setTimeout(
              () => fail(new Error(`no event within ${WAIT_MS} ms; stream so far: ${text}`)),
              WAIT_MS,
            );
            const check = () => {
              if (queue.length > 0) {
                clearTimeout(timer);
                wake = null;
                ok(queue.shift()!);
              } else if (ended) {
                clearTimeout(timer);
                fail(new Error(`the stream closed; it said: ${text}`));
              }
            };
            wake = check;
            check();
          }),
      };
      if (res.statusCode === 200) return resolve(stream);
      res.once('end', () => resolve({ ...stream, refusal: text ? JSON.parse(text) : undefined }));
    });
    req.end(o.body);
  });
}

/** An `inbox` event; `mcp` is how many MCP sessions the agent has open. */
const inbox = (count: number, senders: Array<[string, string, number]>, latest: string | null, mcp = 0): SseEvent => ({
  event: 'inbox',
  data: {
    count,
    senders: senders.map(([agent_id, name, count]) => ({ agent_id, name, count })),
    latest,
    mcp_sessions: mcp,
  },
});
const EMPTY = inbox(0, [], null);
/** The empty inbox of an agent with `mcp` MCP sessions open (a root connected by rootAndMember has one). */
const emptyWith = (mcp: number) => inbox(0, [], null, mcp);

/**
 * The `ended` event, after any `inbox` events before it: an agent's MCP sessions close as it
 * is terminated, which may change the summary (mcp_sessions) in the same moment. Then the close.
 */
async function endsWith(s: InboxStream, reason: string): Promise<void> {
  for (;;) {
    const e = await s.next();
    if (e.event === 'ended') {
      expect(e.data).toEqual({ reason });
      break;
    }
    expect(e.event).toBe('inbox');
  }
  expect(await s.closed).toBe(true);
  await expect(s.next()).rejects.toThrow(/the stream closed/);
}

/** Every watcher's signal, aborted after each test (a failed one would otherwise go on reconnecting). */
const watchers: AbortController[] = [];

/** The real client, its summaries queued: `summary()` is the next one, `end` how it ended. */
function watch(server: string, token: string) {
  const stop = new AbortController();
  watchers.push(stop);
  const summaries: InboxSummary[] = [];
  const troubles: string[] = [];
  let wake: (() => void) | null = null;
  const end: Promise<WatchEnd> = watchInbox({
    server,
    token: () => token,
    signal: stop.signal,
    onSummary: (s) => {
      summaries.push(s);
      wake?.();
    },
    onTrouble: (t) => {
      troubles.push(t);
      wake?.();
    },
  });
  const take = <T>(list: T[], what: string) =>
    new Promise<T>((ok, fail) => {
      const timer = setTimeout(
        () => fail(new Error(`no ${what} within ${WAIT_MS} ms (troubles: ${troubles.join('; ')})`)),
        WAIT_MS,
      );
      const check = () => {
        if (list.length === 0) return;
        clearTimeout(timer);
        wake = null;
        ok(list.shift()!);
      };
      wake = check;
      check();
    });
  return { stop, end, summary: () => take(summaries, 'summary'), trouble: () => take(troubles, 'trouble'), summaries };
}

describe('the inbox stream', () => {
  let ts: TestServer | undefined;
  const streams: InboxStream[] = [];
  const agents: TestAgent[] = [];
  const controllers: AbortController[] = [];
  const homes: string[] = [];
  afterEach(async () => {
    for (const s of streams.splice(0)) s.close();
    for (const c of [...controllers.splice(0), ...watchers.splice(0)]) c.abort();
    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    if (ts) {
      await ts.close();
      removeHome(ts.home);
    }
    ts = undefined;
    homes.splice(0).forEach(removeHome);
  });

  const open = async (token: string | null, o?: Parameters<typeof openInbox>[2]) => {
    const s = await openInbox(ts!.url, token, o);
    streams.push(s);
    return s;
  };
  const connect = async (token: string) => {
    const a = await connectAgent(ts!.url, token);
    agents.push(a);
    return a;
  };
  const send = async (agentId: string, content: string) => {
    const r = await ts!.api('POST', `/agents/${agentId}/send`, { content });
    expect(r.status).toBe(200);
    return r.body.message_id as string;
  };

  /** A root and a one-member team, all without a spawner; the member's token minted by the admin. */
  async function rootAndMember(roles = ['helper']) {
    const task = await createTask(ts!);
    const root = await connect(task.token);
    const team = await root.call('create_team', {
      name: 'crew',
      task: 'help',
      roles: roles.map((role) => ({ role, skill: 'worker', description: role })),
    });
    if (!team.ok) throw new Error(JSON.stringify(team.error));
    const members = team.value.members as Array<{ agent_id: string }>;
    const ids = members.map((m) => m.agent_id);
    const names = ids.map((id) => ts!.server.services.registry.agent(id)!.name);
    return { task, root, ids, names, tokens: await Promise.all(ids.map((id) => agentToken(ts!, id))) };
  }

  describe('what it says', () => {
    it('starts with the inbox as it is: empty, or the mail already waiting', async () => {
      ts = await startTestServer();
      const task = await createTask(ts);
      const empty = await open(task.token);
      expect(empty.status).toBe(200);
      expect(await empty.next()).toEqual(EMPTY);

      const first = await send(task.root_agent_id, 'one');
      const second = await send(task.root_agent_id, 'two');
      const waiting = await open(task.token);
      expect(await waiting.next()).toEqual(inbox(2, [['user', 'user', 2]], second));
      expect(first).not.toBe(second);
    });

    it('follows mail from the user and from another agent, and mail taken by read_inbox, without a word of any content', async () => {
      ts = await startTestServer();
      const { task, root, ids, names, tokens } = await rootAndMember();
      const member = await connect(tokens[0]!);
      const stream = await open(task.token);
      expect(await stream.next()).toEqual(emptyWith(1));

      const fromUser = await send(task.root_agent_id, 'SECRET-from-the-user: the launch code is 1234');
      expect(await stream.next()).toEqual(inbox(1, [['user', 'user', 1]], fromUser, 1));
      const sent = await member.call('send_message', {
        to: task.root_agent_id,
        content: 'SECRET-from-the-helper: password hunter2',
      });
      expect(sent.ok).toBe(true);
      const fromHelper = sent.ok ? (sent.value.message_id as string) : '';
      expect(await stream.next()).toEqual(
        inbox(
          2,
          [
            ['user', 'user', 1],
            [ids[0]!, names[0]!, 1],
          ],
          fromHelper,
          1,
        ),
      );

      // What changes nothing in this inbox sends nothing: a peek, mail to someone else. The
      // next event is the next change (so no repeat of the last summary came in between).
      expect((await root.call('read_inbox', { peek: true })).ok).toBe(true);
      await send(ids[0]!, 'SECRET-to-the-helper');
      expect((await root.call('send_message', { to: ids[0]!, content: 'SECRET-from-the-root' })).ok).toBe(true);
      const taken = await root.call('read_inbox');
      expect(taken.ok && taken.value.messages.map((m: { message_id: string }) => m.message_id)).toEqual([
        fromUser,
        fromHelper,
      ]);
      expect(await stream.next()).toEqual(emptyWith(1));

      // Counts per sender, senders in the order of their oldest waiting message.
      const u1 = await send(task.root_agent_id, 'SECRET-a');
      expect(await stream.next()).toEqual(inbox(1, [['user', 'user', 1]], u1, 1));
      const h1 = await member.call('send_message', { to: task.root_agent_id, content: 'SECRET-b' });
      expect((await stream.next()).data.latest).toBe(h1.ok && h1.value.message_id);
      const u2 = await send(task.root_agent_id, 'SECRET-c');
      expect(await stream.next()).toEqual(
        inbox(
          3,
          [
            ['user', 'user', 2],
            [ids[0]!, names[0]!, 1],
          ],
          u2,
          1,
        ),
      );

      expect(stream.raw()).toContain('event:inbox');
      expect(stream.raw()).not.toContain('SECRET');
      // Names and counts only: every event's data has exactly these keys.
      for (const line of stream
        .raw()
        .split('\n')
        .filter((l) => l.startsWith('data:'))) {
        const data = JSON.parse(line.slice(5));
        expect(Object.keys(data).sort()).toEqual(['count', 'latest', 'mcp_sessions', 'senders']);
        for (const s of data.senders) expect(Object.keys(s).sort()).toEqual(['agent_id', 'count', 'name']);
      }
    });

    it('outlives the body timeout: its request is complete, only its response lasts', async () => {
      ts = await startTestServer({ env: { BEIDOU_BODY_TIMEOUT_S: '1' } });
      const task = await createTask(ts);
      const stream = await open(task.token);
      expect(await stream.next()).toEqual(EMPTY);
      // A slow body on another connection is cut: the limit is live and has passed since the stream began.
      const slow = await new Promise<string>((resolve) => {
        const socket = net.connect(Number(new URL(ts!.url).port), '127.0.0.1');
        let seen = '';
        socket.on('data', (d) => (seen += d));
        socket.on('error', () => undefined);
        socket.on('close', () => resolve(seen));
        socket.write(
          `POST /api/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${ts!.adminToken}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{`,
        );
      });
      expect(slow).toMatch(/^HTTP\/1\.1 408 /);
      const id = await send(task.root_agent_id, 'still there?');
      expect(await stream.next()).toEqual(inbox(1, [['user', 'user', 1]], id));
    });
  });

  describe('how it ends', () => {
    it('the user terminating the task: `ended agent_terminated` for the root and its team, then the server closes', async () => {
      ts = await startTestServer();
      const { task, tokens } = await rootAndMember();
      const rootStream = await open(task.token);
      const memberStream = await open(tokens[0]!);
      expect(await rootStream.next()).toEqual(emptyWith(1));
      expect(await memberStream.next()).toEqual(EMPTY);
      expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
      await endsWith(rootStream, 'agent_terminated');
      // The member has no MCP session: nothing else changes, `ended` comes next.
      expect(await memberStream.next()).toEqual({ event: 'ended', data: { reason: 'agent_terminated' } });
      expect(await memberStream.closed).toBe(true);
    });

    it("a leader terminating a child no spawner runs: the child's stream ends, the leader's goes on", async () => {
      ts = await startTestServer();
      const { task, root, ids, tokens } = await rootAndMember();
      const childStream = await open(tokens[0]!);
      const rootStream = await open(task.token);
      expect(await childStream.next()).toEqual(EMPTY);
      expect(await rootStream.next()).toEqual(emptyWith(1));
      expect((await root.call('terminate_child', { agent_id: ids[0], force: true })).ok).toBe(true);
      expect(await childStream.next()).toEqual({ event: 'ended', data: { reason: 'agent_terminated' } });
      await childStream.closed;
      const id = await send(task.root_agent_id, 'carry on');
      expect(await rootStream.next()).toEqual(inbox(1, [['user', 'user', 1]], id, 1));
    });

    it('an agent a spawner runs: not ended while its termination waits on the spawner; ended once the spawner acknowledges, or is lost', async () => {
      const clock = new FakeClock();
      ts = await startTestServer({ clock, env: { BEIDOU_SPAWNER_HEARTBEAT_S: '1' } });
      const spawner = await handSpawner(ts, 'box', controllers);
      await spawner.next('hello');
      const { task, root, ids, tokens } = await rootAndMember(['acked', 'lost']);
      for (const id of ids) await spawner.next('launch', id);
      const [ackedStream, lostStream] = [await open(tokens[0]!), await open(tokens[1]!)];
      expect(await ackedStream.next()).toEqual(EMPTY);
      expect(await lostStream.next()).toEqual(EMPTY);

      for (const id of ids) expect((await root.call('terminate_child', { agent_id: id, force: true })).ok).toBe(true);
      expect(await spawner.next('terminate', ids[0])).toEqual({ type: 'terminate', agent_id: ids[0] });
      // Posted, not consumed: the streams go on (a message still lands and shows).
      const late = await send(ids[0]!, 'one more thing');
      expect(await ackedStream.next()).toEqual(inbox(1, [['user', 'user', 1]], late));

      expect((await spawner.post('/ack', { type: 'terminate', agent_id: ids[0] })).status).toBe(200);
      expect(await ackedStream.next()).toEqual({ event: 'ended', data: { reason: 'agent_terminated' } });
      await ackedStream.closed;

      // The spawner falls silent past three beats: the server consumes the sentinel it never acknowledged.
      clock.advance(5);
      expect(await lostStream.next()).toEqual({ event: 'ended', data: { reason: 'agent_terminated' } });
      await lostStream.closed;
      const consumed = await waitForEvent(
        ts,
        task.task_id,
        (e) => e.event === 'terminate.consumed' && e.agent_id === ids[1],
      );
      expect(consumed.via).toBe('server');
    });

    it('the task ending while the agent is not yet terminated (its spawner still ending it): `ended task_ended`', async () => {
      ts = await startTestServer();
      const spawner = await handSpawner(ts, 'box', controllers);
      await spawner.next('hello');
      const task = (await ts.api('POST', '/tasks', { task: 'held by a spawner' })).body;
      const launch = await spawner.next('launch', task.root_agent_id);
      const stream = await open(launch.token);
      expect(await stream.next()).toEqual(EMPTY);
      expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
      expect(await stream.next()).toEqual({ event: 'ended', data: { reason: 'task_ended' } });
      await stream.closed;
      // Its token still works until the spawner acknowledges; a new stream ends at once.
      const again = await open(launch.token);
      expect(await again.next()).toEqual(EMPTY);
      expect(await again.next()).toEqual({ event: 'ended', data: { reason: 'task_ended' } });
      await again.closed;
      await spawner.post('/ack', { type: 'terminate', agent_id: task.root_agent_id });
      await waitForEvent(ts, task.task_id, (e) => e.event === 'terminate.consumed');
      expect(await open(launch.token)).toMatchObject({ status: 401, refusal: { error: 'agent_terminated' } });
    });

    it('closing the server ends every open stream', async () => {
      ts = await startTestServer();
      const { task, tokens } = await rootAndMember();
      const open2 = [await open(task.token), await open(tokens[0]!)];
      expect(await open2[0]!.next()).toEqual(emptyWith(1));
      expect(await open2[1]!.next()).toEqual(EMPTY);
      await ts.close();
      // Ended by the server as it stops, not cut with the connections that are left.
      expect(await Promise.all(open2.map((s) => s.closed))).toEqual([true, true]);
      for (const s of open2) expect(s.raw()).not.toContain('event:ended');
      removeHome(ts.home);
      ts = undefined;
    });
  });

  describe('who may open it', () => {
    it("agent tokens only; a terminated agent's is refused agent_terminated", async () => {
      ts = await startTestServer();
      const { task, root, ids, tokens } = await rootAndMember();
      const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
      const refused = async (token: string | null, error: string) => {
        const s = await open(token);
        expect(s.status, error).toBe(401);
        expect(s.refusal.error).toBe(error);
      };
      await refused(null, 'missing_token');
      await refused('not-a-token', 'invalid_token');
      await refused(ts.adminToken, 'wrong_token_kind');
      await refused(spawnerToken, 'wrong_token_kind');
      const [, payload, sig] = task.token.split('.');
      await refused(`${task.token.split('.')[0]}.${payload}.${sig!.slice(0, -4)}AAAA`, 'invalid_token');

      expect((await root.call('terminate_child', { agent_id: ids[0], force: true })).ok).toBe(true);
      await refused(tokens[0]!, 'agent_terminated');
      // The root's still works.
      expect((await open(task.token)).status).toBe(200);
    });

    it('watchInbox: refused for a bad token, ended on termination, aborted by its signal', async () => {
      ts = await startTestServer();
      const { task, root, ids, tokens } = await rootAndMember(['a', 'b']);

      for (const token of ['garbage', ts.adminToken]) {
        const w = watch(ts.url, token);
        expect(await w.end).toMatchObject({ kind: 'refused', status: 401 });
        expect(w.summaries).toEqual([]);
      }

      const child = watch(ts.url, tokens[0]!);
      expect(await child.summary()).toEqual(EMPTY.data);
      expect((await root.call('terminate_child', { agent_id: ids[0], force: true })).ok).toBe(true);
      expect(await child.end).toEqual({ kind: 'ended', reason: 'agent_terminated' });
      // Its token is dead now: a new watch is refused, not retried forever.
      expect(await watch(ts.url, tokens[0]!).end).toMatchObject({
        kind: 'refused',
        status: 401,
        message: expect.stringMatching(/^agent_terminated: /),
      });

      const other = watch(ts.url, tokens[1]!);
      expect(await other.summary()).toEqual(EMPTY.data);
      other.stop.abort();
      expect(await other.end).toEqual({ kind: 'aborted' });

      const rootWatch = watch(ts.url, task.token);
      expect(await rootWatch.summary()).toEqual(emptyWith(1).data);
      expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
      expect(await rootWatch.end).toEqual({ kind: 'ended', reason: 'agent_terminated' });
    });
  });

  describe('the cap: BEIDOU_MAX_SESSIONS_PER_AGENT streams per agent, apart from MCP sessions', () => {
    const ENV = { BEIDOU_MAX_SESSIONS_PER_AGENT: '2' };

    /** Opens `n` streams as soon as the agent has room for them (the server sees a close a moment after the client). */
    const roomFor = (token: string, n: number) =>
      until(`room for ${n} streams`, async () => {
        const opened: InboxStream[] = [];
        for (let i = 0; i < n; i++) {
          const s = await open(token);
          if (s.status !== 200) {
            for (const o of opened) o.close();
            return undefined;
          }
          opened.push(s);
        }
        return opened;
      });

    it('refuses one stream past the cap with 429 limit_exceeded; closing one frees its place; other agents are not affected', async () => {
      ts = await startTestServer({ env: ENV });
      const { task, tokens } = await rootAndMember();
      const [a, b] = [await open(task.token), await open(task.token)];
      for (const s of [a, b]) expect(await s.next()).toEqual(emptyWith(1));
      const over = await open(task.token);
      expect(over.status).toBe(429);
      expect(over.refusal).toEqual({
        error: 'limit_exceeded',
        message: expect.stringContaining('inbox streams'),
        details: { limit: 'inbox_streams_per_agent', max: 2, setting: 'BEIDOU_MAX_SESSIONS_PER_AGENT' },
      });
      // Another agent has its own places.
      expect((await open(tokens[0]!)).status).toBe(200);

      a.close();
      const [c] = await roomFor(task.token, 1);
      expect(await c!.next()).toEqual(emptyWith(1));
      expect((await open(task.token)).status).toBe(429);

      // Termination ends both; the token is refused from then on.
      expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
      await Promise.all([b.closed, c!.closed]);
      expect(await open(task.token)).toMatchObject({ status: 401, refusal: { error: 'agent_terminated' } });
    });

    it('watchInbox waits out the cap (429 is trouble, not a refusal) and connects once a place frees', async () => {
      ts = await startTestServer({ env: ENV });
      const task = await createTask(ts);
      const [a] = [await open(task.token), await open(task.token)];
      const w = watch(ts.url, task.token);
      expect(await w.trouble()).toMatch(/429/);
      a!.close();
      expect(await w.summary()).toEqual(EMPTY.data);
      w.stop.abort();
      expect(await w.end).toEqual({ kind: 'aborted' });
    });

    it('streams and MCP sessions count apart: two streams open, two MCP sessions still connect and work', async () => {
      ts = await startTestServer({ env: ENV });
      const task = await createTask(ts);
      const streams2 = [await open(task.token), await open(task.token)];
      for (const s of streams2) expect(await s.next()).toEqual(EMPTY);
      const sessions = [await connect(task.token), await connect(task.token)];
      for (const s of sessions) expect((await s.call('read_inbox', { peek: true })).ok).toBe(true);
      expect(ts.server.mcpSessions()).toBe(2);
      // Each stream tells of each session as it opens.
      for (const s of streams2) expect([await s.next(), await s.next()]).toEqual([emptyWith(1), emptyWith(2)]);
      // And the MCP sessions take none of the streams' places, nor the streams theirs.
      expect((await open(task.token)).status).toBe(429);
      for (const s of sessions) expect((await s.call('list_peers')).ok).toBe(true);
      const id = await send(task.root_agent_id, 'hello both');
      for (const s of streams2) expect(await s.next()).toEqual(inbox(1, [['user', 'user', 1]], id, 2));
    });

    it('a client that resets its connection while its token is checked keeps no place', async () => {
      ts = await startTestServer({ env: ENV });
      const task = await createTask(ts);
      const port = Number(new URL(ts.url).port);
      // The reset lands during authentication (asynchronous), before the route's handler runs:
      // the response's 'close' is past by then. Both timings, many times.
      for (let i = 0; i < 40; i++) {
        const socket = net.connect(port, '127.0.0.1');
        socket.on('error', () => undefined);
        const closed = new Promise((resolve) => socket.once('close', resolve));
        socket.write(`GET ${ROUTE} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${task.token}\r\n\r\n`, () =>
          i % 2 ? setImmediate(() => socket.resetAndDestroy()) : socket.resetAndDestroy(),
        );
        await closed;
      }
      const both = await roomFor(task.token, 2);
      for (const s of both) expect(await s.next()).toEqual(EMPTY);
    });
  });

  describe('hostile requests: never a 500', () => {
    it('query strings, Last-Event-ID garbage, bodies on the GET, other methods', async () => {
      ts = await startTestServer();
      const task = await createTask(ts);
      const ok = async (o: Parameters<typeof openInbox>[2], what: string) => {
        const s = await open(task.token, o);
        expect(s.status, `${what}: ${JSON.stringify(s.refusal)}`).toBe(200);
        expect(await s.next(), what).toEqual(EMPTY);
        s.close();
      };
      for (const query of [
        '?padding=1',
        '?evs_preamble=1',
        '?lastEventId=%00%ff',
        `?evs_last_event_id=${'x'.repeat(4000)}`,
        '?x[y][z]=1&x=2&__proto__[a]=1',
        '?%E0%A4%A',
        '?since=-1&limit=abc',
      ]) {
        await ok({ path: ROUTE + query }, query);
      }
      for (const id of ['garbage', '-1', '99999999999999999999999', 'x'.repeat(8000), '\u00ff\u00fe latin-1', '']) {
        await ok({ headers: { 'last-event-id': id } }, `Last-Event-ID ${id.slice(0, 20)}`);
      }
      await ok({ headers: { 'content-type': 'application/json' }, body: '{"count": 99}' }, 'a JSON body');
      await ok({ headers: { 'content-type': 'text/plain' }, body: 'hello' }, 'a text body');
      await ok({ headers: { accept: 'application/json' } }, 'another Accept');

      const badJson = await open(task.token, { headers: { 'content-type': 'application/json' }, body: '{"a"' });
      expect(badJson).toMatchObject({ status: 400, refusal: { error: 'invalid_json' } });
      // HEAD: the headers a GET would get, and the end of the response (not a stream that never answers).
      const head = await within(open(task.token, { method: 'HEAD' }), 5_000, 'an answer to HEAD');
      expect(head.status).toBe(200);
      await within(head.closed, 5_000, 'the end of the HEAD response');
      // OPTIONS gets Express's own answer (the methods allowed); the rest are refused.
      expect((await open(task.token, { method: 'OPTIONS' })).status).toBe(200);
      for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
        const s = await open(task.token, { method, headers: { 'content-type': 'application/json' }, body: '{}' });
        expect(s.status, method).toBeGreaterThanOrEqual(400);
        expect(s.status, method).toBeLessThan(500);
      }
      // Still serving, and its own stream still follows the inbox.
      const stream = await open(task.token);
      expect(await stream.next()).toEqual(EMPTY);
      const id = await send(task.root_agent_id, 'after all that');
      expect(await stream.next()).toEqual(inbox(1, [['user', 'user', 1]], id));
    });
  });

  describe('what a closed stream leaves behind: nothing', () => {
    /** Timers keeping this process alive (the server runs in it): a stream's keep-alive among them. */
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

    it('no timer, with or without a body on the GET (whose request closes before the stream starts)', async () => {
      ts = await startTestServer();
      const task = await createTask(ts);
      const before = timers();
      const opened: InboxStream[] = [];
      for (const body of [undefined, '{}', '{"a": 1}', undefined, '[]']) {
        const s = await open(
          task.token,
          body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body },
        );
        expect(await s.next()).toEqual(EMPTY);
        opened.push(s);
      }
      expect(timers()).toBeGreaterThan(before); // each open stream has its keep-alive
      for (const s of opened) s.close();
      await until('every stream timer gone', () => (timers() <= before ? true : undefined));
    });
  });

  describe('watchInbox across a server restart', () => {
    it('reconnects to the server back on the same home and port and delivers the summary again, then what follows', async () => {
      const home = tempHome();
      homes.push(home);
      const first = await startTestServer({ home });
      ts = first;
      const task = await createTask(first);
      const m1 = await send(task.root_agent_id, 'before the restart');
      const w = watch(first.url, task.token);
      expect(await w.summary()).toEqual(inbox(1, [['user', 'user', 1]], m1).data);

      await first.close();
      ts = undefined;
      // Connection refused while it is down: trouble, retried.
      expect(await w.trouble()).toMatch(/inbox stream/);
      ts = await startTestServer({ home, port: first.server.port });
      expect(await w.summary()).toEqual(inbox(1, [['user', 'user', 1]], m1).data);
      const m2 = await send(task.root_agent_id, 'after the restart');
      expect(await w.summary()).toEqual(inbox(2, [['user', 'user', 2]], m2).data);
      w.stop.abort();
      expect(await w.end).toEqual({ kind: 'aborted' });
    });
  });
});
