import { randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startHaproxy, type TestHaproxy } from '../testkit/haproxy.js';
import { until } from '../testkit/poll.js';
import { freePort } from '../testkit/ports.js';
import { createDatabase, startPostgres, type TestPostgres } from '../testkit/postgres.js';
import { BenchReplica } from './replica.js';

/**
 * Section 9's stage, apart from what it measures: a real PostgreSQL (the testkit's), two real
 * `beidou serve` replicas on it (replica1 active, replica2 standby), a real HAProxy in front
 * with the deployment's health check (docs/deploy.md), and a team made through the balancer.
 * Whatever was started is stopped again by `stop`, also after a start that failed half way.
 */

/** Deadline of each wait; far past the 10 s bar, so a slow failover is measured, a stuck one fails. */
export const WAIT_MS = 60_000;

export class FailoverCluster {
  private postgres: TestPostgres | null = null;
  private balancer: TestHaproxy | null = null;
  /** Indexed as the balancer's backends; a replica started again replaces its predecessor. */
  readonly replicas: BenchReplica[] = [];
  readonly names = ['replica1', 'replica2'];
  /** The replicas' environment: the database, the secret, the admin token. */
  env: Record<string, string> = {};
  db = '';
  adminToken = '';

  async start(checkMs: number): Promise<void> {
    this.postgres = await startPostgres();
    await createDatabase(this.postgres.url('postgres'), 'beidou_bench_failover');
    this.db = this.postgres.url('beidou_bench_failover');
    this.adminToken = `bench-admin-${randomBytes(16).toString('hex')}`;
    this.env = {
      BEIDOU_DATABASE_URL: this.db,
      BEIDOU_SECRET: `bench-secret-${randomBytes(24).toString('hex')}`,
      BEIDOU_ADMIN_TOKEN: this.adminToken,
      BEIDOU_INBOX_CAP: '1000000000',
    };
    const ports = [await freePort(), await freePort()];
    const { names, replicas } = this;
    replicas[0] = await BenchReplica.start(names[0]!, ports[0]!, this.env);
    replicas[1] = await BenchReplica.start(names[1]!, ports[1]!, this.env);
    if (!/^role: active/.test(replicas[0].role) || !/^role: standby/.test(replicas[1].role)) {
      throw new Error(
        `expected replica1 active and replica2 standby, got "${replicas[0].role}" and "${replicas[1].role}"`,
      );
    }
    // The testkit names the backends replica1, replica2 in this order.
    this.balancer = await startHaproxy(
      ports.map((p) => `127.0.0.1:${p}`),
      { checkMs },
    );
  }

  /** The balancer's URL. */
  get lb(): string {
    return this.balancer!.url;
  }

  /** Until HAProxy sends everything to replica `to`: it is UP, the other is not. */
  routed(to: number) {
    return until(
      `HAProxy routing to ${this.names[to]} only`,
      async () => {
        const states = (await this.balancer!.servers()).map((s) => s.status);
        return states[to] === 'UP' && states[1 - to] !== 'UP' ? true : undefined;
      },
      WAIT_MS,
    );
  }

  /** Replica `at` started again, on its port, after it was SIGKILLed; it must come back as a standby. */
  async restart(at: number): Promise<void> {
    const down = this.replicas[at]!;
    this.replicas[at] = await BenchReplica.start(down.name, down.port, this.env);
    if (!/^role: standby/.test(this.replicas[at]!.role))
      throw new Error(`${down.name}, started again, is not a standby: ${this.replicas[at]!.role}`);
  }

  async stop(): Promise<void> {
    for (const r of this.replicas) await r?.stop().catch(() => undefined);
    await this.balancer?.stop().catch(() => undefined);
    await this.postgres?.stop().catch(() => undefined);
  }

  /** A task with a root and `n` members through the balancer; each member sends to the next. */
  async team(n: number): Promise<{ taskId: string; tokens: string[]; targets: string[] }> {
    const { lb, adminToken } = this;
    const api = async (method: string, route: string, body?: unknown) => {
      const res = await fetch(`${lb}/api${route}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const out = (await res.json()) as any;
      if (!res.ok) throw new Error(`${method} /api${route}: ${res.status} ${JSON.stringify(out)}`);
      return out;
    };
    const task = await api('POST', '/tasks', { task: 'bench failover', name: 'bench failover', spawn: false });
    const root = new Client({ name: 'beidou-bench-failover-root', version: '0' });
    await root.connect(
      new StreamableHTTPClientTransport(new URL(`${lb}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${task.token}` } },
      }),
    );
    try {
      const made = (await root.callTool({
        name: 'create_team',
        arguments: {
          name: 'senders',
          task: 'send',
          roles: Array.from({ length: n }, (_, i) => ({
            role: `sender-${i}`,
            skill: 'worker',
            description: `sender ${i}`,
          })),
        },
      })) as {
        isError?: boolean;
        content: Array<{ text?: string }>;
        structuredContent?: { members: Array<{ agent_id: string }> };
      };
      if (made.isError || !made.structuredContent) throw new Error(`create_team failed: ${made.content[0]?.text}`);
      const ids = made.structuredContent.members.map((m) => m.agent_id);
      const tokens = await Promise.all(
        ids.map(async (id) => (await api('POST', `/agents/${id}/token`, {})).token as string),
      );
      return { taskId: task.task_id as string, tokens, targets: ids.map((_, i) => ids[(i + 1) % ids.length]!) };
    } finally {
      await root.close().catch(() => undefined);
    }
  }
}
