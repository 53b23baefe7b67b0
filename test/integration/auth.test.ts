import { randomUUID } from 'node:crypto';
import { chmodSync, statSync } from 'node:fs';
import path from 'node:path';
import { SignJWT } from 'jose';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { PRIMITIVES } from '../../src/primitives/index.js';
import {
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';

/**
 * docs/api.md (Authentication, Errors): who may call what. Every refusal is 401 with a JSON `{error, message}`
 * body and a `WWW-Authenticate: Bearer ...` header, on /mcp and on /api alike.
 */

const SECRET = 'test-secret-0123456789-abcdefghij-ABCDEFGHIJ-xyz'; // 48 characters
const key = (secret: string) => new TextEncoder().encode(secret);
const now = () => Math.floor(Date.now() / 1000);

interface Claims {
  sub: string;
  task_id?: string;
  kind?: string;
  iss?: string;
  aud?: string;
  iat?: number;
  exp?: number;
  jti?: string;
}

/** Mints a JWT the way a forger (or the server) would, with every claim explicit. */
async function mint(claims: Claims, secret = SECRET): Promise<string> {
  const full = {
    kind: 'agent',
    iss: 'beidou',
    aud: 'beidou',
    iat: now(),
    exp: now() + 3600,
    jti: randomUUID(),
    ...claims,
  };
  return new SignJWT(full as unknown as Record<string, unknown>)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .sign(key(secret));
}

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** An unsigned token: header {"alg":"none"}, a valid-looking payload, an empty signature. */
function algNoneToken(claims: Claims): string {
  const payload = {
    kind: 'agent',
    iss: 'beidou',
    aud: 'beidou',
    iat: now(),
    exp: now() + 3600,
    jti: randomUUID(),
    ...claims,
  };
  return `${b64url({ alg: 'none', typ: 'JWT' })}.${b64url(payload)}.`;
}

const INITIALIZE = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'auth-test', version: '0.0.0' } },
};

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify(body),
  });
}

const bearer = (token: string | undefined): Record<string, string> =>
  token === undefined ? {} : { authorization: `Bearer ${token}` };

/** An initialize request to /mcp, as an MCP client's first request. */
const mcpInit = (ts: TestServer, token?: string) => post(`${ts.url}/mcp`, INITIALIZE, bearer(token));
/** An admin API call that needs the admin token. */
const apiTasks = (ts: TestServer, token?: string) => fetch(`${ts.url}/api/tasks`, { headers: bearer(token) });

/** Asserts a 401 refusal: status, JSON `{error, message}`, and a Bearer challenge. */
async function expect401(res: Response, code: string): Promise<void> {
  const text = await res.text();
  expect({ status: res.status, text }).toMatchObject({ status: 401 });
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  expect(res.headers.get('www-authenticate')).toMatch(/^Bearer\b/);
  const body = JSON.parse(text) as { error: unknown; message: unknown };
  expect(body.error).toBe(code);
  expect(typeof body.message).toBe('string');
  expect((body.message as string).length).toBeGreaterThan(0);
}

describe('authentication (docs/api.md)', () => {
  let ts: TestServer;
  const agents: TestAgent[] = [];
  beforeAll(async () => {
    ts = await startTestServer({ env: { BEIDOU_SECRET: SECRET } });
  });
  afterEach(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
  });
  afterAll(async () => {
    await ts.close();
    removeHome(ts.home);
  });

  it('accepts the admin token on /api and the agent token on /mcp (the control for every refusal below)', async () => {
    const task = await createTask(ts);
    const api = await apiTasks(ts, ts.adminToken);
    expect(api.status).toBe(200);
    expect(await api.json()).toMatchObject({ tasks: expect.any(Array) });
    const mcp = await mcpInit(ts, task.token);
    expect(mcp.status).toBe(200);
    expect(mcp.headers.get('mcp-session-id')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(await mcp.text()).toContain('"serverInfo"');
    // A token we mint ourselves with the server's secret is as good as the server's own.
    const own = await mint({ sub: task.root_agent_id, task_id: task.task_id });
    const agent = await connectAgent(ts.url, own);
    agents.push(agent);
    expect((await agent.call('list_peers')).ok).toBe(true);
  });

  it('GET /api/health needs no token', async () => {
    const res = await fetch(`${ts.url}/api/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ok: true, version: expect.any(String) });
  });

  it('refuses a request with no token on /mcp, /sse, /messages and /api', async () => {
    await expect401(await mcpInit(ts), 'missing_token');
    await expect401(await fetch(`${ts.url}/mcp`, { headers: { accept: 'text/event-stream' } }), 'missing_token');
    await expect401(await fetch(`${ts.url}/mcp`, { method: 'DELETE' }), 'missing_token');
    await expect401(await fetch(`${ts.url}/sse`, { headers: { accept: 'text/event-stream' } }), 'missing_token');
    await expect401(await post(`${ts.url}/messages?sessionId=x`, INITIALIZE), 'missing_token');
    await expect401(await apiTasks(ts), 'missing_token');
    await expect401(await post(`${ts.url}/api/tasks`, { task: 'x', spawn: false }), 'missing_token');
    // A non-Bearer scheme carrying the right secret is no token at all.
    await expect401(
      await fetch(`${ts.url}/api/tasks`, { headers: { authorization: `Basic ${ts.adminToken}` } }),
      'missing_token',
    );
  });

  it('refuses a token signed with another secret', async () => {
    const task = await createTask(ts);
    const forged = await mint(
      { sub: task.root_agent_id, task_id: task.task_id },
      'another-secret-that-is-long-enough-0123456789abc',
    );
    await expect401(await mcpInit(ts, forged), 'invalid_token');
    await expect401(await apiTasks(ts, forged), 'invalid_token');
  });

  it('refuses an alg: none token', async () => {
    const task = await createTask(ts);
    const unsigned = algNoneToken({ sub: task.root_agent_id, task_id: task.task_id });
    await expect401(await mcpInit(ts, unsigned), 'invalid_token');
    await expect401(await apiTasks(ts, unsigned), 'invalid_token');
  });

  it('refuses an expired token', async () => {
    const task = await createTask(ts);
    const expired = await mint({ sub: task.root_agent_id, task_id: task.task_id, iat: now() - 7200, exp: now() - 60 });
    await expect401(await mcpInit(ts, expired), 'token_expired');
    await expect401(await apiTasks(ts, expired), 'token_expired');
  });

  it('refuses a wrong iss and a wrong aud', async () => {
    const task = await createTask(ts);
    const wrongIss = await mint({ sub: task.root_agent_id, task_id: task.task_id, iss: 'not-beidou' });
    const wrongAud = await mint({ sub: task.root_agent_id, task_id: task.task_id, aud: 'not-beidou' });
    for (const token of [wrongIss, wrongAud]) {
      await expect401(await mcpInit(ts, token), 'invalid_claims');
      await expect401(await apiTasks(ts, token), 'invalid_claims');
    }
  });

  it('refuses a wrong kind: a spawner token on /mcp and /sse, an agent token on /api', async () => {
    const task = await createTask(ts);
    const minted = await ts.api('POST', '/spawner-tokens', {});
    expect(minted.status).toBe(200);
    const spawner = minted.body.token as string;
    await expect401(await mcpInit(ts, spawner), 'wrong_token_kind');
    await expect401(
      await fetch(`${ts.url}/sse`, { headers: { ...bearer(spawner), accept: 'text/event-stream' } }),
      'wrong_token_kind',
    );
    await expect401(await apiTasks(ts, spawner), 'wrong_token_kind');
    await expect401(await apiTasks(ts, task.token), 'wrong_token_kind');
    await expect401(
      await post(`${ts.url}/api/agents/${task.root_agent_id}/token`, {}, bearer(task.token)),
      'wrong_token_kind',
    );
    // A kind the server does not know at all.
    const odd = await mint({ sub: task.root_agent_id, task_id: task.task_id, kind: 'admin' });
    await expect401(await mcpInit(ts, odd), 'invalid_claims');
    await expect401(await apiTasks(ts, odd), 'invalid_claims');
  });

  it('refuses a validly signed token for an agent that is not registered (or not in that task)', async () => {
    const task = await createTask(ts);
    const ghost = await mint({ sub: 'ag_ghost', task_id: task.task_id });
    await expect401(await mcpInit(ts, ghost), 'unknown_agent');
    await expect401(await apiTasks(ts, ghost), 'unknown_agent');
    const other = await createTask(ts);
    const crossed = await mint({ sub: task.root_agent_id, task_id: other.task_id });
    await expect401(await mcpInit(ts, crossed), 'unknown_agent');
  });

  it('refuses the old token of a terminated agent with agent_terminated, also on an open session', async () => {
    const task = await createTask(ts);
    const agent = await connectAgent(ts.url, task.token);
    agents.push(agent);
    expect((await agent.call('list_peers')).ok).toBe(true);
    const sessionId = agent.transport.sessionId!;
    expect(sessionId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);

    const terminated = await ts.api('POST', `/tasks/${task.task_id}/terminate`, {});
    expect(terminated).toMatchObject({ status: 200, body: { ok: true } });

    await expect401(await mcpInit(ts, task.token), 'agent_terminated');
    const onSession = await post(
      `${ts.url}/mcp`,
      { jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} },
      { ...bearer(task.token), 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18' },
    );
    await expect401(onSession, 'agent_terminated');
    await expect401(
      await fetch(`${ts.url}/sse`, { headers: { ...bearer(task.token), accept: 'text/event-stream' } }),
      'agent_terminated',
    );
    // And no fresh token can be had for it.
    expect(await ts.api('POST', `/agents/${task.root_agent_id}/token`, {})).toMatchObject({
      status: 409,
      body: { error: 'agent_terminated' },
    });
  });

  it('compares the admin token exactly: near misses are refused', async () => {
    const admin = ts.adminToken;
    const lastChar = admin.at(-1)!;
    const nearMisses = [
      admin.slice(0, -1),
      `${admin}x`,
      admin.slice(0, -1) + (lastChar === 'A' ? 'B' : 'A'),
      admin.toUpperCase() === admin ? admin.toLowerCase() : admin.toUpperCase(),
      `bdu_admin_${'A'.repeat(32)}`,
    ];
    for (const token of nearMisses) {
      expect(token).not.toBe(admin);
      await expect401(await apiTasks(ts, token), 'invalid_token');
    }
    // The admin token is not an agent token either.
    await expect401(await mcpInit(ts, admin), 'wrong_token_kind');
    expect((await apiTasks(ts, admin)).status).toBe(200);
  });

  it("refuses an MCP session id presented with another agent's token (403), leaving the session to its owner", async () => {
    const a = await createTask(ts);
    const b = await createTask(ts);
    const agentA = await connectAgent(ts.url, a.token);
    agents.push(agentA);
    const sessionId = agentA.transport.sessionId!;
    expect(sessionId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);

    const headers = { ...bearer(b.token), 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18' };
    const listed = await post(`${ts.url}/mcp`, { jsonrpc: '2.0', id: 7, method: 'tools/list', params: {} }, headers);
    expect(listed.status).toBe(403);
    expect(await listed.json()).toMatchObject({ error: 'session_forbidden', message: expect.any(String) });
    const stream = await fetch(`${ts.url}/mcp`, { headers: { ...headers, accept: 'text/event-stream' } });
    expect(stream.status).toBe(403);
    await stream.body?.cancel();
    const deleted = await fetch(`${ts.url}/mcp`, { method: 'DELETE', headers });
    expect(deleted.status).toBe(403);
    await deleted.body?.cancel();

    // The owner's session is untouched.
    const peers = await agentA.call('list_peers');
    expect(peers.ok).toBe(true);
  });

  it('refuses leader_id in create_team with leader_override_attempted and creates nothing', async () => {
    const task = await createTask(ts);
    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    const res = await root.call('create_team', {
      name: 'usurped',
      task: 'do it',
      roles: [{ role: 'worker', skill: 'worker', description: 'does it' }],
      leader_id: 'ag_someone_else',
    });
    expect(res).toMatchObject({
      ok: false,
      error: { error: 'leader_override_attempted', message: expect.any(String) },
    });
    expect(res.raw.isError).toBe(true);
    const detail = await ts.api('GET', `/tasks/${task.task_id}`);
    expect(detail.status).toBe(200);
    expect(detail.body.teams).toEqual([]);
    expect(detail.body.agents).toHaveLength(1);
  });

  it("serves the same tools over the legacy HTTP+SSE transport, bound to the token's agent", async () => {
    const task = await createTask(ts);
    const authorization = `Bearer ${task.token}`;
    let streamOpenedWithAuth = false;
    let postedTo: URL | undefined;
    const transport = new SSEClientTransport(new URL(`${ts.url}/sse`), {
      eventSourceInit: {
        fetch: (url, init) => {
          const headers = new Headers(init?.headers);
          headers.set('authorization', authorization);
          streamOpenedWithAuth = true;
          return fetch(url, { ...init, headers });
        },
      },
      requestInit: { headers: { authorization } },
      // Records where the messages go (the endpoint the server announced, with its sessionId).
      fetch: (url, init) => {
        postedTo = new URL(String(url));
        return fetch(url, init);
      },
    });
    const client = new Client({ name: 'beidou-sse-test', version: '0.0.0' });
    try {
      await client.connect(transport);
      expect(streamOpenedWithAuth).toBe(true);
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual(PRIMITIVES.map((p) => p.name).sort());

      const raw = (await client.callTool({ name: 'list_peers', arguments: {} })) as CallToolResult;
      expect(raw.isError).toBeFalsy();
      expect(raw.structuredContent).toBeTypeOf('object');
      expect(JSON.parse((raw.content[0] as { text: string }).text)).toEqual(raw.structuredContent);

      // The legacy POST endpoint binds the session to its agent too.
      const other = await createTask(ts);
      expect(postedTo?.pathname).toBe('/messages');
      const sessionId = postedTo!.searchParams.get('sessionId')!;
      expect(sessionId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      const hijack = await post(
        `${ts.url}/messages?sessionId=${encodeURIComponent(sessionId)}`,
        { jsonrpc: '2.0', id: 9, method: 'tools/list', params: {} },
        bearer(other.token),
      );
      expect(hijack.status).toBe(403);
      await hijack.body?.cancel();
      const unknown = await post(
        `${ts.url}/messages?sessionId=nope`,
        { jsonrpc: '2.0', id: 9, method: 'tools/list', params: {} },
        bearer(task.token),
      );
      expect(unknown.status).toBe(404);
      await unknown.body?.cancel();
    } finally {
      await client.close();
    }
  });

  it('answers the OAuth discovery probes with a JSON 404', async () => {
    for (const probe of [
      '/.well-known/oauth-authorization-server',
      '/.well-known/oauth-protected-resource',
      '/.well-known/oauth-protected-resource/mcp',
    ]) {
      const res = await fetch(`${ts.url}${probe}`);
      expect({ probe, status: res.status }).toEqual({ probe, status: 404 });
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      const body = (await res.json()) as { error: unknown; message: unknown };
      expect(body).toMatchObject({ error: expect.any(String), message: expect.any(String) });
    }
  });

  it('lists exactly the implemented tools on tools/list, each with schemas', async () => {
    const task = await createTask(ts);
    const agent = await connectAgent(ts.url, task.token);
    agents.push(agent);
    const { tools } = await agent.client.listTools();
    const names = tools.map((t) => t.name);
    const implemented = PRIMITIVES.map((p) => p.name);
    expect(new Set(names).size).toBe(names.length);
    expect([...names].sort()).toEqual([...implemented].sort());
    expect(names).toEqual(expect.arrayContaining(['send_message', 'list_peers', 'create_team', 'read_inbox']));
    for (const tool of tools) {
      expect(tool.inputSchema.type).toBe('object');
      expect(tool.description?.length ?? 0).toBeGreaterThan(0);
    }
    expect(agent.client.getServerVersion()?.name).toBe('beidou');
  });
});

describe('secrets in the home (docs/api.md)', () => {
  it('writes admin.token and secret with mode 0600, and repairs a loosened mode on restart', async () => {
    // Generated secrets are the embedded store's: with a database URL they come from the
    // environment (test/postgres/cli.test.ts), so this runs on the embedded store in both projects.
    const embedded = { BEIDOU_DATABASE_URL: '', BEIDOU_SECRET: '', BEIDOU_ADMIN_TOKEN: '' };
    let ts = await startTestServer({ env: embedded });
    const home = ts.home;
    try {
      const files = [path.join(home, 'admin.token'), path.join(home, 'secret')];
      for (const file of files) expect({ file, mode: statSync(file).mode & 0o777 }).toEqual({ file, mode: 0o600 });
      const task = await createTask(ts);
      const adminToken = ts.adminToken;
      await ts.close();

      for (const file of files) chmodSync(file, 0o644);
      ts = await startTestServer({ home, env: embedded });
      for (const file of files) expect({ file, mode: statSync(file).mode & 0o777 }).toEqual({ file, mode: 0o600 });
      // Same secrets reused: the admin token and the old agent token still work.
      expect(ts.adminToken).toBe(adminToken);
      expect((await mcpInit(ts, task.token)).status).toBe(200);
    } finally {
      await ts.close();
      removeHome(home);
    }
  });

  it('accepts a BEIDOU_ADMIN_TOKEN that contains dots', async () => {
    const adminToken = 'ops.admin.token.0123456789abcdef';
    const ts = await startTestServer({ env: { BEIDOU_ADMIN_TOKEN: adminToken } });
    try {
      expect(ts.adminToken).toBe(adminToken);
      expect((await apiTasks(ts, adminToken)).status).toBe(200);
      await expect401(await apiTasks(ts, `${adminToken}.x`), 'invalid_token');
    } finally {
      await ts.close();
      removeHome(ts.home);
    }
  });
});
