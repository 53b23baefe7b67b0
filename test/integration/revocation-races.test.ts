import { afterEach, describe, expect, it } from 'vitest';
import { createParser } from 'eventsource-parser';
import { within } from '../../src/testkit/poll.js';
import { durableEvents, waitForEvent } from '../support/events.js';
import { serverCaughtUp, slowRequest } from '../support/slow-request.js';
import { createTask, removeHome, startTestServer, type TestServer } from '../support/server.js';
import { handSpawner } from '../support/spawner-stream.js';

/**
 * Revocation against requests already in flight (docs/security.md, "Revocation"): a token
 * that passed the door before its revocation, whose body then arrives slowly, is refused once
 * the body is read, on every agent and spawner route; a stream it opened is closed and handed
 * nothing; a launch whose agent's tokens were revoked while its token was minted is not sent;
 * a legacy SSE session ends with its token. Raw sockets hold the bodies; the real server.
 */

const WAIT_MS = 10_000;

const initialize = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'slow', version: '0' } },
});

describe('revocation racing a request in flight', () => {
  let ts: TestServer | undefined;
  const streams: AbortController[] = [];
  const sockets: Array<{ destroy: () => void }> = [];
  afterEach(async () => {
    for (const s of sockets.splice(0)) s.destroy();
    for (const c of streams.splice(0)) c.abort();
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
  });

  it('refuses a revoked agent token once its slow body is read: the inbox kept, nothing committed, no session', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const auth = { Authorization: `Bearer ${task.token}` };
    // Verified once, so the requests below pass the door as soon as their headers are in.
    expect((await fetch(`${ts.url}/api/hook/pre-tool-use`, { method: 'POST', headers: auth })).status).toBe(400);
    await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'SECRET-INSTRUCTIONS-42' });
    const slow = (method: string, route: string, body: string, extra: Record<string, string> = {}) => {
      const r = slowRequest(
        ts!,
        method,
        route,
        { ...auth, Accept: 'application/json, text/event-stream', ...extra },
        body,
      );
      sockets.push(r);
      return r;
    };
    const requests = {
      stop: slow('POST', '/api/hook/stop', '{}'),
      postToolUse: slow('POST', '/api/hook/post-tool-use', '{}'),
      preToolUse: slow('POST', '/api/hook/pre-tool-use', JSON.stringify({ tool_name: 'TodoWrite' })),
      mcp: slow('POST', '/mcp', initialize),
      // A GET with a body is read like any other before its route runs.
      sse: slow('GET', '/sse', '{}'),
    };
    await Promise.all(Object.values(requests).map((r) => r.sent));
    await serverCaughtUp(ts);
    const before = durableEvents(ts, task.task_id).length;

    expect((await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {})).status).toBe(200);
    for (const r of Object.values(requests)) r.finish();

    for (const [name, r] of Object.entries(requests)) {
      const answer = await r.response();
      expect({ name, status: answer.status, error: JSON.parse(answer.body).error }).toEqual({
        name,
        status: 401,
        error: 'token_revoked',
      });
    }
    await within(requests.sse.closed, WAIT_MS, 'the /sse connection to close');
    expect(requests.sse.text()).not.toContain('SECRET');
    expect(ts.server.mcpSessions()).toBe(0);
    // Nothing was taken from the inbox nor committed under the revoked identity.
    const after = durableEvents(ts, task.task_id).slice(before);
    expect(after.map((e) => e.event)).toEqual(['agent.tokens_revoked']);
    expect((await ts.api('GET', `/agents/${task.root_agent_id}`)).body.inbox_depth).toBe(1);
  });

  it('refuses a revoked spawner token once its slow body is read; a stream it opened is closed and handed nothing', async () => {
    ts = await startTestServer();
    const victim = await createTask(ts);
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const headers = { Authorization: `Bearer ${token}`, 'beidou-spawner-instance': 'evil-1' };
    expect(
      (
        await fetch(`${ts.url}/api/spawner/heartbeat`, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/json' },
          body: '{}',
        })
      ).status,
    ).toBe(200);
    const slow = (method: string, route: string, body: string) => {
      const r = slowRequest(ts!, method, `/api/spawner${route}`, { ...headers, Accept: 'text/event-stream' }, body);
      sockets.push(r);
      return r;
    };
    const agent = victim.root_agent_id;
    const posts = {
      heartbeat: slow('POST', '/heartbeat', '{}'),
      ack: slow('POST', '/ack', JSON.stringify({ type: 'terminate', agent_id: agent })),
      started: slow('POST', `/agents/${agent}/started`, '{}'),
      events: slow('POST', `/agents/${agent}/events`, JSON.stringify({ events: [] })),
      stream: slow('GET', '/stream?max_agents=4&name=evil', '{}'),
    };
    await Promise.all(Object.values(posts).map((r) => r.sent));
    await serverCaughtUp(ts);

    expect((await ts.api('POST', '/spawner-tokens/revoke', {})).status).toBe(200);
    for (const r of Object.values(posts)) r.finish();
    for (const [name, r] of Object.entries(posts)) {
      const answer = await r.response();
      expect({ name, status: answer.status, error: JSON.parse(answer.body).error }).toEqual({
        name,
        status: 401,
        error: 'token_revoked',
      });
    }

    // A spawner with a new token takes the next launch; the revoked stream gets none of it.
    const fresh = await handSpawner(ts, 'good', streams);
    await fresh.next('hello');
    const task = (await ts.api('POST', '/tasks', { task: 'launched after the revocation' })).body;
    const assigned = await waitForEvent(ts, task.task_id, (e) => e.event === 'launch.assigned');
    expect(assigned.spawner_id).toMatch(/\.good$/);
    await within(posts.stream.closed, WAIT_MS, 'the revoked stream to close');
    expect(posts.stream.text()).not.toContain('"type":"launch"');
  });

  it('does not send a launch whose agent had its tokens revoked while the launch token was minted', async () => {
    ts = await startTestServer();
    // Queued first (its own token minted with the task), launched once a spawner connects.
    const task = (await ts.api('POST', '/tasks', { task: 'revoked while minted' })).body;
    // The real mint, with the revocation landing between its start and the launch going out:
    // the one moment the scheduler awaits between reading the agent and sending its launch.
    const { tokens } = ts.server.services;
    const mint = tokens.mintAgent.bind(tokens);
    let revokedWhileMinting = false;
    tokens.mintAgent = async (agentId, taskId, opts) => {
      const token = await mint(agentId, taskId, opts);
      if (!revokedWhileMinting) {
        revokedWhileMinting = true;
        expect((await ts!.api('POST', `/agents/${agentId}/revoke-tokens`, {})).status).toBe(200);
      }
      return token;
    };
    const spawner = await handSpawner(ts, 'box', streams);
    const launch = await spawner.next('launch', task.root_agent_id);
    expect(revokedWhileMinting).toBe(true);
    // The launch that went out is the one after the revocation, with a token that works.
    const works = await fetch(`${ts.url}/api/hook/pre-tool-use`, {
      method: 'POST',
      headers: { authorization: `Bearer ${launch.token}` },
    });
    expect(works.status).toBe(400);
    expect(spawner.received.filter((c) => c.type === 'launch')).toHaveLength(1);
  });

  it('revoke-tokens ends a legacy /sse session the token opened', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const held = new AbortController();
    streams.push(held);
    const res = await fetch(`${ts.url}/sse`, {
      headers: { authorization: `Bearer ${task.token}`, accept: 'text/event-stream' },
      signal: held.signal,
    });
    expect(res.status).toBe(200);
    const events: string[] = [];
    let opened: () => void;
    const endpoint = new Promise<void>((r) => (opened = r));
    const parser = createParser({
      onEvent: (e) => {
        events.push(e.event ?? 'message');
        if (e.event === 'endpoint') opened();
      },
    });
    const ended = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of res.body!) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
    })();
    await within(endpoint, WAIT_MS, 'the endpoint event');
    expect(ts.server.mcpSessions()).toBe(1);
    await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {});
    await within(ended, WAIT_MS, 'the /sse stream to end');
    expect(ts.server.mcpSessions()).toBe(0);
  });
});
