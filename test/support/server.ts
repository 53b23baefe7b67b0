import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { loadConfig } from '../../src/config.js';
import { startServer, type BeidouServer } from '../../src/server/server.js';
import type { Clock } from '../../src/util/clock.js';
import type { Logger } from '../../src/util/logger.js';
import { storeEnv } from './store.js';

/**
 * Test support: the real server on a free loopback port with a temp home, and real MCP SDK
 * clients talking to it over HTTP. Nothing of ours is mocked.
 */

export function tempHome(): string {
  return mkdtempSync(path.join(os.tmpdir(), 'beidou-test-'));
}

export interface TestServer {
  server: BeidouServer;
  url: string;
  home: string;
  adminToken: string;
  api<T = any>(
    method: string,
    route: string,
    body?: unknown,
    token?: string,
  ): Promise<{ status: number; body: T; headers: Headers }>;
  close(): Promise<void>;
}

/**
 * `port`: a restart on the same home and port (0, the default: a free one). The store is
 * the test run's (`BEIDOU_TEST_STORE`, test/support/store.ts): with postgres, the home's
 * own database, unless `env` names one. `webRoot`: where the built dashboard is looked for
 * (the package's dist/web/ by default).
 */
export async function startTestServer(
  opts: {
    home?: string;
    port?: number;
    env?: Record<string, string>;
    clock?: Clock;
    logger?: Logger;
    webRoot?: string;
  } = {},
): Promise<TestServer> {
  const home = opts.home ?? tempHome();
  const config = loadConfig({ port: String(opts.port ?? 0), home }, { ...(await storeEnv(home)), ...opts.env });
  const server = await startServer(config, {
    logger: opts.logger ?? pino({ level: 'silent' }),
    ...(opts.clock ? { clock: opts.clock } : {}),
    ...(opts.webRoot ? { webRoot: opts.webRoot } : {}),
  });
  const api = async (method: string, route: string, body?: unknown, token = server.adminToken) => {
    const res = await fetch(`${server.url}/api${route}`, {
      method,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
  };
  return { server, url: server.url, home, adminToken: server.adminToken, api, close: () => server.close() };
}

/**
 * A clock the test moves by hand: the server's one clock (event `ts`, the watchdog, token
 * expiry, session expiry, heartbeats) reads it, so time-driven behaviour needs no sleep.
 * It starts at the real time so tokens minted against it are valid.
 */
export class FakeClock implements Clock {
  private t = Math.floor(Date.now() / 1000);

  now(): number {
    return this.t;
  }

  advance(seconds: number): void {
    this.t += seconds;
  }
}

export function removeHome(home: string): void {
  rmSync(home, { recursive: true, force: true });
}

export type ToolOutcome<T = any> =
  | { ok: true; value: T; raw: CallToolResult }
  | { ok: false; error: { error: string; message: string; details: Record<string, unknown> }; raw: CallToolResult };

export interface TestAgent {
  client: Client;
  transport: StreamableHTTPClientTransport;
  call<T = any>(name: string, args?: Record<string, unknown>): Promise<ToolOutcome<T>>;
  close(): Promise<void>;
}

/** A real MCP client, authenticated as one agent. */
export async function connectAgent(baseUrl: string, token: string): Promise<TestAgent> {
  const client = new Client({ name: 'beidou-test', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  const call = async (name: string, args: Record<string, unknown> = {}) => {
    const raw = (await client.callTool({ name, arguments: args })) as CallToolResult;
    const text = (raw.content[0] as { text: string }).text;
    if (raw.isError) return { ok: false as const, error: JSON.parse(text), raw };
    return { ok: true as const, value: raw.structuredContent as any, raw };
  };
  return { client, transport, call, close: () => client.close() };
}

/** Creates a task through the admin API and returns the ids and the root's token. */
export async function createTask(ts: TestServer, body: Record<string, unknown> = {}) {
  const res = await ts.api('POST', '/tasks', { task: 'test task', spawn: false, ...body });
  if (res.status !== 201) throw new Error(`task creation failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { task_id: string; root_agent_id: string; token: string; mcp_url: string };
}

/** A fresh token for a registered agent, minted through the admin API. */
export async function agentToken(ts: TestServer, agentId: string): Promise<string> {
  const res = await ts.api('POST', `/agents/${agentId}/token`, {});
  if (res.status !== 200) throw new Error(`token for ${agentId}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.token as string;
}

/** A team of `n` workers (`sender-0`, ...) created by `root` with `create_team`: their agent ids. */
export async function senderTeam(root: TestAgent, n: number): Promise<string[]> {
  const made = await root.call('create_team', {
    name: 'senders',
    task: 'send',
    roles: Array.from({ length: n }, (_, i) => ({ role: `sender-${i}`, skill: 'worker', description: `sender ${i}` })),
  });
  if (!made.ok) throw new Error(JSON.stringify(made.error));
  return (made.value.members as Array<{ agent_id: string }>).map((m) => m.agent_id);
}
