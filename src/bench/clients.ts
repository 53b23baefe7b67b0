import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { failoverLoad, type FailoverCommand, type FailoverJob } from './follow.js';
import { WireClient } from './wire.js';

/**
 * The bench's load generator, in its own process so clients and server do not share a
 * core's event loop. Receives a job over IPC, prints nothing, answers with figures.
 */

export type Job =
  | { kind: 'throughput'; url: string; tokens: string[]; targets: string[]; tool: string; seconds: number }
  | { kind: 'delivery'; url: string; senderToken: string; receiverToken: string; receiverId: string; samples: number }
  | { kind: 'connect'; url: string; tokens: string[] }
  | FailoverJob;

export interface Figures {
  calls: number;
  errors: number;
  seconds: number;
  latenciesMs: number[];
  /** CPU seconds spent by the server process and by the clients process. */
  cpu?: { server: number; clients: number };
}

async function connect(url: string, token: string): Promise<Client> {
  const client = new Client({ name: 'beidou-bench', version: '0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    }),
  );
  return client;
}

async function throughput(job: Extract<Job, { kind: 'throughput' }>): Promise<Figures> {
  const clients = job.tokens.map((t) => new WireClient(new URL(`${job.url}/mcp`), t));
  await Promise.all(clients.map((c) => c.connect()));
  const latencies: number[] = [];
  let calls = 0;
  let errors = 0;
  const start = performance.now();
  const end = start + job.seconds * 1000;
  await Promise.all(
    clients.map(async (client, i) => {
      const to = job.targets[i]!;
      while (performance.now() < end) {
        const t0 = performance.now();
        const res = await client.callTool(job.tool, { to, content: `bench ${calls}` });
        latencies.push(performance.now() - t0);
        calls++;
        if (res.isError) errors++;
      }
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  for (const c of clients) c.close();
  return { calls, errors, seconds, latenciesMs: latencies };
}

async function delivery(job: Extract<Job, { kind: 'delivery' }>): Promise<Figures> {
  const sender = await connect(job.url, job.senderToken);
  const receiver = await connect(job.url, job.receiverToken);
  const latencies: number[] = [];
  let errors = 0;
  const start = performance.now();
  for (let i = 0; i < job.samples; i++) {
    const waiting = receiver.callTool({ name: 'read_inbox', arguments: { wait_s: 10 } });
    const t0 = performance.now();
    const sent = await sender.callTool({
      name: 'send_message',
      arguments: { to: job.receiverId, content: `ping ${i}` },
    });
    const got = (await waiting) as { structuredContent?: { messages?: unknown[] } };
    latencies.push(performance.now() - t0);
    if (sent.isError || (got.structuredContent?.messages?.length ?? 0) === 0) errors++;
  }
  const seconds = (performance.now() - start) / 1000;
  await Promise.all([sender.close(), receiver.close()]);
  return { calls: job.samples, errors, seconds, latenciesMs: latencies };
}

async function connectMany(job: Extract<Job, { kind: 'connect' }>): Promise<Figures> {
  const start = performance.now();
  const clients: Client[] = [];
  let errors = 0;
  // In waves, as a fleet of agents would arrive.
  for (let i = 0; i < job.tokens.length; i += 100) {
    const wave = await Promise.all(job.tokens.slice(i, i + 100).map((t) => connect(job.url, t)));
    clients.push(...wave);
  }
  const results = await Promise.all(clients.map((c) => c.callTool({ name: 'list_peers', arguments: {} })));
  errors += results.filter((r) => r.isError).length;
  const seconds = (performance.now() - start) / 1000;
  process.send!({ connected: clients.length });
  // Stay connected until the parent has measured the server.
  await new Promise<void>((resolve) => process.once('message', () => resolve()));
  await Promise.all(clients.map((c) => c.close()));
  return { calls: clients.length, errors, seconds, latenciesMs: [] };
}

// Its parent gone (killed, or failed before it could stop us), a load generator has no one to answer.
process.once('disconnect', () => process.exit(1));

process.once('message', async (job: Job) => {
  if (job.kind === 'failover') {
    // Talks with the parent while it runs: warm, the kill's watch, stop (section 9).
    const last = await failoverLoad(
      job,
      (m) => process.send!(m),
      (on) => process.on('message', (c: FailoverCommand) => on(c)),
    );
    process.send!(last, undefined, {}, () => process.exit(0));
    return;
  }
  const run = job.kind === 'throughput' ? throughput : job.kind === 'delivery' ? delivery : connectMany;
  const figures = await run(job as never);
  const used = process.cpuUsage();
  // Exit only once the message is handed over: an exit right after send() can drop it.
  process.send!(
    { figures: { ...figures, cpu: { server: NaN, clients: (used.user + used.system) / 1e6 } } },
    undefined,
    {},
    () => process.exit(0),
  );
});
