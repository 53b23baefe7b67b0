import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { CliChild } from './cli.js';
import { connectAgent, tempHome, type TestAgent, type ToolOutcome } from './server.js';
import { replicaSecrets } from './store.js';
import { until } from '../../src/testkit/poll.js';

/**
 * Several `beidou serve` replicas on one database, as child processes, each with a home of
 * its own and the secrets every replica shares; and an MCP client that follows the
 * active replica as an agent's client does: on a failed call it opens a new session, with
 * the same token, through the same URL (the load balancer's).
 */

export interface Replica {
  child: CliChild;
  home: string;
  url: string;
  /** The third line it printed: `role: active (...)` or `role: standby (...)`. */
  role: string;
  pid: number;
}

const CALL_TIMEOUT_MS = 5_000;

const LISTENING = /^beidou listening on (http:\/\/127\.0\.0\.1:\d+)$/;

export function sharedSecrets(databaseUrl: string) {
  return replicaSecrets(`replicas:${databaseUrl}`);
}

/** `port` 0 takes a free one; a given port lets a replica come back where a client looks for it. */
export async function startReplica(databaseUrl: string, env: Record<string, string> = {}, port = 0): Promise<Replica> {
  const home = tempHome();
  const child = new CliChild(['serve', '--port', String(port), '--home', home, '--database-url', databaseUrl], {
    BEIDOU_LOG_LEVEL: 'warn',
    ...sharedSecrets(databaseUrl),
    ...env,
  });
  const first = await child.waitForLine((_l, i) => i === 0);
  const m = LISTENING.exec(first);
  if (!m) throw new Error(`unexpected first line: ${first}\n${child.stderr}`);
  const role = await child.waitForLine((_l, i) => i === 2);
  return { child, home, url: m[1]!, role, pid: child.proc.pid! };
}

export async function health(url: string): Promise<{ status: number; body: any; retryAfter: string | null }> {
  const res = await fetch(`${url}/api/health`);
  return { status: res.status, body: await res.json(), retryAfter: res.headers.get('retry-after') };
}

/** Waits until `url` answers its health check 200 as the active replica. */
export function untilActive(url: string, deadlineMs = 15_000): Promise<true> {
  return until(
    `${url} active`,
    async () => ((await health(url).catch(() => null))?.status === 200 ? true : undefined),
    deadlineMs,
  );
}

export function adminCall(url: string, databaseUrl: string) {
  const token = sharedSecrets(databaseUrl).BEIDOU_ADMIN_TOKEN;
  return async (method: string, route: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${url}/api${route}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
}

/** An agent's MCP client that reconnects (new session, same token) when a call fails. */
export class FollowingAgent {
  private agent: TestAgent | null = null;
  reconnects = 0;

  constructor(
    private readonly url: () => string,
    private readonly token: string,
  ) {}

  /** One call on the current session; a failure (thrown, or a refusal of the server) closes it for the next call to reopen. */
  async tryCall(name: string, args: Record<string, unknown> = {}): Promise<ToolOutcome | null> {
    try {
      if (!this.agent) {
        this.agent = await connectAgent(this.url(), this.token);
        this.reconnects++;
      }
      // A call cut by the death of its replica can be left waiting by the SDK's stream
      // resumption: past a deadline it counts as failed, as an agent's client would see it.
      const raw = (await this.agent.client.callTool({ name, arguments: args }, undefined, {
        timeout: CALL_TIMEOUT_MS,
      })) as CallToolResult;
      const text = (raw.content[0] as { text: string }).text;
      const out: ToolOutcome = raw.isError
        ? { ok: false, error: JSON.parse(text), raw }
        : { ok: true, value: raw.structuredContent, raw };
      if (!out.ok && (out.error.error === 'internal_error' || out.error.error === 'standby')) await this.drop();
      return out;
    } catch {
      await this.drop();
      return null;
    }
  }

  async drop(): Promise<void> {
    const agent = this.agent;
    this.agent = null;
    await agent?.close().catch(() => undefined);
  }
}
