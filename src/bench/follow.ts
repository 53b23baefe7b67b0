import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/**
 * Section 9's load: agents sending `send_message` through the load balancer with the real
 * MCP SDK client, each following the active replica as an agent's client does: a failed call
 * closes its session, and once the balancer answers health 200 again the next call opens a
 * new session with the same token. Every acknowledgement is kept with its wall-clock times
 * (Date.now(), comparable with the parent's kill time and the replicas' log times).
 */

/** A call cut by the death of its replica can be left waiting by the SDK's stream resumption, or hang on a paused one: past this it counts as failed. */
export const CALL_TIMEOUT_MS = 5_000;

export type FailoverJob = { kind: 'failover'; url: string; tokens: string[]; targets: string[]; warmup: number };
/** Parent → clients: report once `more` calls sent after `after` (ms) were acknowledged; or stop. */
export type FailoverCommand = { watch: { after: number; more: number } } | { stop: true };
export interface Ack {
  id: string;
  startedAt: number;
  ackedAt: number;
}
/** Clients → parent. */
export type FailoverReport =
  | { warm: number }
  | { watched: { first: Ack; count: number } }
  | { done: { acked: string[]; failed: number; reconnects: number; failures: Record<string, number> } };

class FollowingAgent {
  private client: Client | null = null;
  reconnects = 0;

  constructor(
    private readonly url: string,
    private readonly token: string,
  ) {}

  /** The message id, or why the call failed (a tool error's code, or what was thrown). */
  async send(to: string, content: string): Promise<{ id: string } | { failure: string }> {
    try {
      if (!this.client) {
        const client = new Client({ name: 'beidou-bench-failover', version: '0' });
        client.onerror = () => undefined; // a broken stream surfaces as the call's failure
        await client.connect(
          new StreamableHTTPClientTransport(new URL(`${this.url}/mcp`), {
            requestInit: { headers: { authorization: `Bearer ${this.token}` } },
          }),
          { timeout: CALL_TIMEOUT_MS },
        );
        this.client = client;
        this.reconnects++;
      }
      const raw = (await this.client.callTool({ name: 'send_message', arguments: { to, content } }, undefined, {
        timeout: CALL_TIMEOUT_MS,
      })) as {
        isError?: boolean;
        content: Array<{ text?: string }>;
        structuredContent?: { message_id?: string };
      };
      if (!raw.isError && raw.structuredContent?.message_id) return { id: raw.structuredContent.message_id };
      const code = (() => {
        try {
          return String((JSON.parse(raw.content[0]?.text ?? '{}') as { error?: string }).error ?? 'tool error');
        } catch {
          return 'tool error';
        }
      })();
      await this.drop();
      return { failure: code };
    } catch (err) {
      await this.drop();
      return { failure: /timed? ?out/i.test(String(err)) ? 'timeout' : 'transport' };
    }
  }

  async drop(): Promise<void> {
    const client = this.client;
    this.client = null;
    await client?.close().catch(() => undefined);
  }
}

/** Until the balancer answers health 200 (it routes to an active replica), or `stopped()`. */
async function untilRoutable(url: string, stopped: () => boolean): Promise<void> {
  while (!stopped()) {
    const status = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(1_000) }).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200) return;
    await new Promise((resolve) => setTimeout(resolve, 20)); // the probe's pace
  }
}

/** Runs the load until told to stop, talking to the parent through `report` and `commands`; returns the last report. */
export async function failoverLoad(
  job: FailoverJob,
  report: (m: FailoverReport) => void,
  commands: (on: (c: FailoverCommand) => void) => void,
): Promise<Extract<FailoverReport, { done: unknown }>> {
  const agents = job.tokens.map((t) => new FollowingAgent(job.url, t));
  const acks: Ack[] = [];
  const failures: Record<string, number> = {};
  let failed = 0;
  let stopped = false;
  let warm = false;
  let watch: { after: number; more: number; first: Ack | null; count: number } | null = null;
  const seen = (ack: Ack) => {
    if (!warm && acks.length >= job.warmup) {
      warm = true;
      report({ warm: acks.length });
    }
    if (!watch || ack.startedAt <= watch.after) return;
    // Only a call sent after the kill can have been served by the new active.
    watch.count++;
    if (!watch.first || ack.ackedAt < watch.first.ackedAt) watch.first = ack;
    if (watch.count >= watch.more) {
      report({ watched: { first: watch.first, count: watch.count } });
      watch = null;
    }
  };
  let done!: () => void;
  const stopping = new Promise<void>((resolve) => (done = resolve));
  commands((c) => {
    if ('stop' in c) {
      stopped = true;
      done();
      return;
    }
    watch = { ...c.watch, first: null, count: 0 };
    for (const ack of acks) if (ack.startedAt > c.watch.after) seen(ack);
  });
  const loops = agents.map(async (agent, i) => {
    for (let n = 0; !stopped; n++) {
      const startedAt = Date.now();
      const out = await agent.send(job.targets[i]!, `failover ${i}-${n}`);
      if ('id' in out) {
        const ack = { id: out.id, startedAt, ackedAt: Date.now() };
        acks.push(ack);
        seen(ack);
        continue;
      }
      failed++;
      failures[out.failure] = (failures[out.failure] ?? 0) + 1;
      await untilRoutable(job.url, () => stopped);
    }
  });
  await stopping;
  await Promise.all(loops);
  await Promise.all(agents.map((a) => a.drop()));
  return {
    done: { acked: acks.map((a) => a.id), failed, reconnects: agents.reduce((n, a) => n + a.reconnects, 0), failures },
  };
}
