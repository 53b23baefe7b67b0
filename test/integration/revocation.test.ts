import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { createParser } from 'eventsource-parser';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SYSTEM_LOG } from '../../src/events/catalogue.js';
import { until, within } from '../../src/testkit/poll.js';
import { durableEvents, waitForEvent } from '../support/events.js';
import { spawnSpawner, type SpawnerProcess } from '../support/process.js';
import {
  agentToken,
  connectAgent,
  createTask,
  FakeClock,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';
import { handSpawner } from '../support/spawner-stream.js';

/**
 * Revocation and narrow spawner tokens (docs/security.md, "Revocation"): a revoked agent or
 * spawner token is refused at once (401 `token_revoked`) and what it holds open ends; a
 * re-mint with `revoke_previous` refuses the older tokens, not the new one, even within the
 * same second; a revocation survives a restart; a spawner token limited to task A never gets a
 * launch of task B. The real server, the real MCP client, real spawners from dist. (Races with
 * requests in flight: revocation-races.test.ts; spawner tokens' bound, the agents of revoked
 * spawners, clocks: revocation-spawners.test.ts.)
 */

const WAIT_MS = 10_000;

/**
 * A POST with `token` and no body (a refusal closes the connection before any body is read:
 * a body still being sent would race it): the status and the JSON error code. A token that
 * passes gets past authentication to the body's check (400).
 */
async function refusalOf(ts: TestServer, route: string, token: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${ts.url}${route}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, ...headers },
  });
  const text = await res.text();
  return { status: res.status, error: text.startsWith('{') ? (JSON.parse(text).error as string) : text };
}

/** An MCP initialize with `token`, as a new client would send it. */
const initialize = (ts: TestServer, token: string) =>
  fetch(`${ts.url}/mcp`, {
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
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bare', version: '0' } },
    }),
  });

/** An SSE response read as it comes: its events, and when the server ends it. */
function sse(res: Response) {
  const events: Array<{ event: string | undefined; data: string }> = [];
  const parser = createParser({ onEvent: (e) => events.push({ event: e.event, data: e.data }) });
  const ended = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of res.body!) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
  })();
  return { events, ended };
}

describe('revocation', () => {
  let ts: TestServer | undefined;
  const agents: TestAgent[] = [];
  const streams: AbortController[] = [];
  const spawners: SpawnerProcess[] = [];
  beforeAll(() => {
    execFileSync('npx', ['tsc', '-b'], { cwd: path.resolve(import.meta.dirname, '../..'), stdio: 'inherit' });
  });
  afterEach(async () => {
    for (const s of spawners.splice(0)) {
      s.child.kill('SIGKILL');
      await s.exited;
    }
    for (const c of streams.splice(0)) c.abort();
    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
  });

  it("refuses an agent's old token at once after revoke-tokens, and ends its MCP sessions and inbox stream", async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const old = task.token;
    const sdk = await connectAgent(ts.url, old);
    agents.push(sdk);
    expect((await sdk.call('list_peers')).ok).toBe(true);
    // A bare session holding its GET stream open, as a client that took the token would.
    const init = await initialize(ts, old);
    const sessionId = init.headers.get('mcp-session-id')!;
    await init.text();
    const held = new AbortController();
    streams.push(held);
    const getStream = sse(
      await fetch(`${ts.url}/mcp`, {
        headers: {
          authorization: `Bearer ${old}`,
          accept: 'text/event-stream',
          'mcp-session-id': sessionId,
          'mcp-protocol-version': '2025-06-18',
        },
        signal: held.signal,
      }),
    );
    const inbox = sse(
      await fetch(`${ts.url}/api/hook/inbox/stream`, {
        headers: { authorization: `Bearer ${old}` },
        signal: held.signal,
      }),
    );
    await until('the inbox stream to open', () => (inbox.events.length > 0 ? true : undefined));
    expect(ts.server.mcpSessions()).toBe(2);

    const revoked = await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {});
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ ok: true, agent_id: task.root_agent_id, relaunched: false });

    // At once: the next request with the old token, on every route an agent uses.
    expect(await refusalOf(ts, '/api/hook/pre-tool-use', old)).toEqual({ status: 401, error: 'token_revoked' });
    const again = await fetch(`${ts.url}/mcp`, {
      headers: { authorization: `Bearer ${old}`, accept: 'text/event-stream' },
    });
    expect(again.status).toBe(401);
    expect(again.headers.get('www-authenticate')).toContain('token_revoked');
    expect(((await again.json()) as { error: string }).error).toBe('token_revoked');
    await expect(sdk.call('list_peers')).rejects.toThrow();
    // What it held open ends: the MCP GET stream, the inbox stream (saying why), both sessions.
    await within(getStream.ended, WAIT_MS, 'the MCP GET stream to end');
    await within(inbox.ended, WAIT_MS, 'the inbox stream to end');
    expect(inbox.events.at(-1)).toEqual({ event: 'ended', data: JSON.stringify({ reason: 'token_revoked' }) });
    await until('the sessions to close', () => (ts!.server.mcpSessions() === 0 ? true : undefined), WAIT_MS);

    // A token minted after the revocation works.
    const fresh = await connectAgent(ts.url, await agentToken(ts, task.root_agent_id));
    agents.push(fresh);
    expect((await fresh.call('list_peers')).ok).toBe(true);
  });

  it('re-minting with revoke_previous refuses every older token, the new one works, within the same second', async () => {
    // The clock does not move: every token here is minted in the same second, as a revocation is.
    const clock = new FakeClock();
    ts = await startTestServer({ clock });
    const task = await createTask(ts);
    const works = async (token: string) => (await refusalOf(ts!, '/api/hook/pre-tool-use', token)).status === 400;
    const t0 = task.token;
    const t1 = await agentToken(ts, task.root_agent_id);
    // Used first, so the server's cache of verified tokens holds them.
    expect([await works(t0), await works(t1)]).toEqual([true, true]);
    const mint = (body: unknown) => ts!.api('POST', `/agents/${task.root_agent_id}/token`, body);
    const r2 = await mint({ revoke_previous: true });
    expect(r2.status).toBe(200);
    const t2 = r2.body.token as string;
    expect([await works(t0), await works(t1), await works(t2)]).toEqual([false, false, true]);
    expect(await refusalOf(ts, '/api/hook/pre-tool-use', t1)).toEqual({ status: 401, error: 'token_revoked' });
    // Again in the same second (the same millisecond even): the token minted after the first revocation is refused now.
    const t3 = (await mint({ revoke_previous: true })).body.token as string;
    expect([await works(t2), await works(t3)]).toEqual([false, true]);
    // Without revoke_previous the earlier token keeps working.
    const t4 = (await mint({})).body.token as string;
    expect([await works(t3), await works(t4)]).toEqual([true, true]);
    clock.advance(1);
    await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {});
    expect([await works(t3), await works(t4)]).toEqual([false, false]);
    // Each revocation is one event in the agent's task log.
    const revocations = durableEvents(ts, task.task_id).filter((e) => e.event === 'agent.tokens_revoked');
    expect(revocations.map((e) => e.agent_id)).toEqual(Array(3).fill(task.root_agent_id));
    expect(revocations.map((e) => e.before)).toEqual([...revocations.map((e) => e.before)].sort());
  });

  it('refuses a revoked spawner token at once and closes its stream; both revocations survive a restart', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const spawner = await handSpawner(ts, 'box', streams);
    await spawner.next('hello');
    expect((await spawner.post('/heartbeat', {})).status).toBe(200);
    const agentOld = task.token;
    await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {});

    const revoked = await ts.api('POST', '/spawner-tokens/revoke', {});
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ ok: true, streams_closed: 1 });
    await within(spawner.ended, WAIT_MS, 'the spawner stream to end');
    expect(await refusalOf(ts, '/api/spawner/heartbeat', spawner.token, { 'beidou-spawner-instance': 'box' })).toEqual({
      status: 401,
      error: 'token_revoked',
    });
    const reopened = await handSpawner(ts, 'box', streams, 4, { token: spawner.token });
    expect(reopened.status).toBe(401);
    // The revocation is in the system log, which no task has.
    expect(durableEvents(ts, SYSTEM_LOG).map((e) => e.event)).toEqual(['spawner_tokens.revoked']);
    expect((await ts.api('GET', '/tasks')).body.tasks.map((t: { task_id: string }) => t.task_id)).toEqual([
      task.task_id,
    ]);
    const after = await handSpawner(ts, 'box', streams);
    expect(after.status).toBe(200);
    await after.next('hello');

    // A restart replays both revocations from the logs.
    const home = ts.home;
    await ts.close();
    ts = await startTestServer({ home });
    expect(await refusalOf(ts, '/api/spawner/heartbeat', spawner.token, { 'beidou-spawner-instance': 'box' })).toEqual({
      status: 401,
      error: 'token_revoked',
    });
    expect(await refusalOf(ts, '/api/hook/pre-tool-use', agentOld)).toEqual({ status: 401, error: 'token_revoked' });
    const back = await handSpawner(ts, 'box', streams, 4, { token: after.token });
    expect(back.status).toBe(200);
    await back.next('hello');
    const fresh = await connectAgent(ts.url, await agentToken(ts, task.root_agent_id));
    agents.push(fresh);
    expect((await fresh.call('list_peers')).ok).toBe(true);
  });

  it('a spawner limited to task A never gets a launch of task B; B waits for a spawner that takes it', async () => {
    ts = await startTestServer();
    const scriptFile = path.join(ts.home, 'script.json');
    writeFileSync(scriptFile, JSON.stringify({ root: [{ call: 'list_peers' }] }));
    // B first: the scheduler meets B's root before A's, so passing over it is what lets A's through.
    const b = (await ts.api('POST', '/tasks', { task: 'task B' })).body as { task_id: string; root_agent_id: string };
    const a = (await ts.api('POST', '/tasks', { task: 'task A' })).body as { task_id: string; root_agent_id: string };
    const limited = await ts.api('POST', '/spawner-tokens', { task_ids: [a.task_id] });
    expect(limited.status).toBe(200);
    expect(limited.body.task_ids).toEqual([a.task_id]);
    const onlyA = spawnSpawner(ts.url, limited.body.token, scriptFile, [
      '--workdir',
      path.join(ts.home, 'w'),
      '--name',
      'only-a',
    ]);
    spawners.push(onlyA);
    const startedA = await waitForEvent(ts, a.task_id, (e) => e.event === 'agent_started', { timeoutMs: 20_000 });
    const { spawners: listed } = (await ts.api('GET', '/spawners')).body;
    expect(listed).toEqual([expect.objectContaining({ name: 'only-a', connected: true, task_ids: [a.task_id] })]);
    // Every scheduling pass since it connected passed B over: B's root is still queued, unassigned.
    expect(durableEvents(ts, b.task_id).filter((e) => e.event === 'launch.assigned')).toEqual([]);
    expect((await ts.api('GET', `/agents/${b.root_agent_id}`)).body.status).toBe('pending_launch');

    // Its routes refuse B's agent too, and commit nothing.
    const hand = await handSpawner(ts, 'hand-a', streams, 4, { token: limited.body.token });
    await hand.next('hello');
    const before = durableEvents(ts, b.task_id).length;
    const posted = await hand.post(`/agents/${b.root_agent_id}/events`, {
      events: [{ event: 'assistant_text', message_id: 'm', text: 'forged', stop_reason: null }],
    });
    expect(posted).toEqual({ status: 409, body: expect.objectContaining({ error: 'not_your_agent' }) });
    expect((await hand.post(`/agents/${b.root_agent_id}/started`, {})).status).toBe(409);
    expect((await hand.post('/ack', { type: 'terminate', agent_id: b.root_agent_id })).status).toBe(409);
    expect(durableEvents(ts, b.task_id)).toHaveLength(before);

    // An unlimited spawner takes B.
    const any = (await ts.api('POST', '/spawner-tokens', {})).body;
    expect(any.task_ids).toBeNull();
    const anySpawner = spawnSpawner(ts.url, any.token, scriptFile, [
      '--workdir',
      path.join(ts.home, 'w'),
      '--name',
      'any',
    ]);
    spawners.push(anySpawner);
    const startedB = await waitForEvent(ts, b.task_id, (e) => e.event === 'agent_started', { timeoutMs: 20_000 });
    expect(startedB.spawner_id).not.toBe(startedA.spawner_id);
    // B went to the unlimited spawner, and hand-a got nothing of it: every command it received
    // since its stream opened is its hello (A's root runs on only-a already).
    const assignedB = durableEvents(ts, b.task_id).filter((e) => e.event === 'launch.assigned');
    expect(assignedB.map((e) => e.spawner_id)).toEqual([startedB.spawner_id]);
    expect(hand.received.map((c) => c.type)).toEqual(['hello']);

    // Revoking every spawner token ends both real spawners (their streams close, they are
    // refused, they stop) and the tokens of the agents they ran.
    expect((await ts.api('POST', '/spawner-tokens/revoke', {})).body).toMatchObject({
      streams_closed: 3,
      agents_revoked: 2,
    });
    for (const s of [onlyA, anySpawner]) {
      await within(s.exited, WAIT_MS, 'the spawner to stop');
      expect(s.stderr()).toContain("refused this spawner's token (401)");
    }
  });

  it('revoke-tokens of an agent a spawner runs: its process is stopped and relaunched with a fresh token that works', async () => {
    ts = await startTestServer();
    const scriptFile = path.join(ts.home, 'script.json');
    const run = (text: string) => [
      { call: 'list_peers' },
      { emit: { event: 'assistant_text', message_id: text, text, stop_reason: 'end_turn' } },
    ];
    writeFileSync(scriptFile, JSON.stringify({ root: run('first run'), 'root@resume': run('resumed run') }));
    const task = (await ts.api('POST', '/tasks', { task: 'revoke me' })).body as {
      task_id: string;
      root_agent_id: string;
    };
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    spawners.push(spawnSpawner(ts.url, token, scriptFile, ['--workdir', path.join(ts.home, 'w')]));
    const said = (text: string) => (e: { event: string; text?: string }) =>
      e.event === 'assistant_text' && e.text === text;
    await waitForEvent(ts, task.task_id, said('first run'), { timeoutMs: 20_000 });

    const revoked = await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {});
    expect(revoked.body).toMatchObject({ ok: true, relaunched: true });
    const resumed = await waitForEvent(ts, task.task_id, said('resumed run'), { timeoutMs: 20_000 });
    const events = durableEvents(ts, task.task_id);
    const revokedAt = events.find((e) => e.event === 'agent.tokens_revoked')!;
    expect(revokedAt.spawner_id).toEqual(expect.any(String));
    const starts = events.filter((e) => e.event === 'agent_started');
    // Started again after the revocation, and its call with the new token went through before it spoke.
    expect(starts).toHaveLength(2);
    expect(starts[1]!.seq).toBeGreaterThan(revokedAt.seq);
    expect(starts[1]!.resumed).toBe(true);
    expect(resumed.seq).toBeGreaterThan(starts[1]!.seq);
    // No crash was counted: the old process was stopped, not lost.
    expect(events.filter((e) => e.event === 'agent_crashed')).toEqual([]);
  });

  it('refuses bad revocation and spawner-token requests clearly, changing nothing', async () => {
    ts = await startTestServer({ env: { BEIDOU_MAX_AGENTS_PER_SPAWNER: '2' } });
    const task = await createTask(ts);
    const count = () => durableEvents(ts!, task.task_id).length + durableEvents(ts!, SYSTEM_LOG).length;
    const n = count();
    const cases: Array<[string, unknown, number, string]> = [
      ['/spawner-tokens', { task_ids: [] }, 400, 'invalid_input'],
      ['/spawner-tokens', { task_ids: ['../etc'] }, 400, 'invalid_input'],
      ['/spawner-tokens', { task_ids: [task.task_id, 'tsk_000000000000'] }, 404, 'unknown_task'],
      ['/spawner-tokens', { task_ids: Array(101).fill(task.task_id) }, 400, 'invalid_input'],
      ['/spawner-tokens', { tasks: [task.task_id] }, 400, 'invalid_input'],
      ['/spawner-tokens/revoke', { now: true }, 400, 'invalid_input'],
      [`/agents/${task.root_agent_id}/revoke-tokens`, { before: 1 }, 400, 'invalid_input'],
      ['/agents/ag_000000000000/revoke-tokens', {}, 404, 'unknown_agent'],
      [`/agents/${task.root_agent_id}/token`, { revoke_previous: 'yes' }, 400, 'invalid_input'],
    ];
    for (const [route, body, status, error] of cases) {
      const res = await ts.api('POST', route, body);
      expect({ route, status: res.status, error: res.body.error }).toEqual({ route, status, error });
    }
    const unknown = await ts.api('POST', '/spawner-tokens', { task_ids: [task.task_id, 'tsk_000000000000'] });
    expect(unknown.body.details).toEqual({ field: 'task_ids[1]' });
    // Not an admin: a spawner or agent token cannot revoke.
    const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    expect((await ts.api('POST', '/spawner-tokens/revoke', {}, spawnerToken)).status).toBe(401);
    expect((await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {}, task.token)).status).toBe(401);
    expect(count()).toBe(n);

    // max_agents above BEIDOU_MAX_AGENTS_PER_SPAWNER is refused, naming the setting.
    const over = await fetch(`${ts.url}/api/spawner/stream?max_agents=3`, {
      headers: { authorization: `Bearer ${spawnerToken}`, 'beidou-spawner-instance': 'big' },
    });
    expect(over.status).toBe(400);
    expect(await over.json()).toMatchObject({
      error: 'limit_exceeded',
      details: { limit: 'agents_per_spawner', max: 2, setting: 'BEIDOU_MAX_AGENTS_PER_SPAWNER' },
    });
    expect((await ts.api('GET', '/spawners')).body.spawners).toEqual([]);
    const atBound = await handSpawner(ts, 'ok', streams, 2, { token: spawnerToken });
    expect(atBound.status).toBe(200);

    // A terminated agent's tokens are refused already: 409, nothing written.
    await ts.api('POST', `/tasks/${task.task_id}/terminate`, {});
    await waitForEvent(ts, task.task_id, (e) => e.event === 'terminate.consumed');
    const m = count();
    const late = await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {});
    expect([late.status, late.body.error]).toEqual([409, 'agent_terminated']);
    expect(count()).toBe(m);
  });
});
