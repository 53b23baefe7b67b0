import type { BeidouServer } from '../server/server.js';
import { createDatabase, startPostgres } from '../testkit/postgres.js';
import { fmt, pct, report } from './figures.js';
import { runClients, team, withServer } from './harness.js';

/**
 * Sections 1, 2, 3 and 8 of `npm run bench`: send_message over Streamable HTTP next to the
 * no-op floor (on the embedded store, then on PostgreSQL), send→delivery latency next to the
 * floor's round trip, and 1,000 agents connected to one server. Clients run in a child process.
 */

/** `agents` members each calling the floor, then send_message, for `seconds`; prints both and their ratio. */
async function floorAndSend(server: BeidouServer, agents: number, seconds: number, sendName: string) {
  const { ids, tokens } = await team(server, agents);
  const targets = ids.map((_, i) => ids[(i + 1) % ids.length]!);
  const floor = report(
    'bench_noop (floor)',
    await runClients({ kind: 'throughput', url: server.url, tokens, targets, tool: 'bench_noop', seconds }),
  );
  const send = report(
    sendName,
    await runClients({ kind: 'throughput', url: server.url, tokens, targets, tool: 'send_message', seconds }),
  );
  console.log(
    `  send_message / floor: throughput ${fmt(send.rps / floor.rps, 2)}x, p50 latency ${fmt(send.p50 / floor.p50, 2)}x (bar: within 1.5x)\n`,
  );
  return { ids, tokens, floor };
}

/** Sections 1 and 2, on one server. */
export async function sendAndDelivery(agents: number, seconds: number): Promise<void> {
  await withServer(async (server) => {
    console.log(`1. ${agents} concurrent agents over Streamable HTTP, ${seconds} s each`);
    const { ids, tokens, floor } = await floorAndSend(server, agents, seconds, 'send_message');

    console.log('2. send -> delivery latency (read_inbox waiting, 200 samples)');
    const d = await runClients({
      kind: 'delivery',
      url: server.url,
      senderToken: tokens[0]!,
      receiverToken: tokens[1]!,
      receiverId: ids[1]!,
      samples: 200,
    });
    const delivery = { p50: pct(d.latenciesMs, 50), p99: pct(d.latenciesMs, 99) };
    console.log(
      `  send -> delivered          p50 ${fmt(delivery.p50, 2)} ms   p99 ${fmt(delivery.p99, 2)} ms   (floor round trip p50 ${fmt(floor.p50, 2)} ms)   errors ${d.errors}\n`,
    );
  });
}

/** Section 3. */
export async function thousandAgents(): Promise<void> {
  await withServer(
    async (server) => {
      console.log('3. 1,000 agents connected to one server');
      const { tokens } = await team(server, 1000);
      const before = process.memoryUsage().rss;
      let connectedAt = 0;
      const f = await runClients({ kind: 'connect', url: server.url, tokens }, (m, child) => {
        if ((m as { connected?: number }).connected) {
          connectedAt = process.memoryUsage().rss;
          child.send('done');
        }
      });
      console.log(
        `  ${f.calls} sessions opened and called list_peers in ${fmt(f.seconds, 2)} s, errors ${f.errors}; server RSS ${fmt(before / 2 ** 20, 0)} -> ${fmt(connectedAt / 2 ** 20, 0)} MiB\n`,
      );
      // The root and its 1,000 members: one past the default agents-per-task quota.
    },
    { BEIDOU_MAX_AGENTS_PER_TASK: '1001' },
  );
}

/**
 * Section 8: section 1 on the PostgreSQL store, a real server the bench starts (Debian's
 * binaries), the same team and clients; the floor is measured on the same server, so the
 * ratio says what the store's commit costs a call.
 */
export async function sendOnPostgres(agents: number, seconds: number): Promise<void> {
  const postgres = await startPostgres();
  try {
    await createDatabase(postgres.url('postgres'), 'beidou_bench_send');
    const env = {
      BEIDOU_DATABASE_URL: postgres.url('beidou_bench_send'),
      BEIDOU_SECRET: 'bench-secret-'.padEnd(40, 'x'),
      BEIDOU_ADMIN_TOKEN: 'bench-admin-'.padEnd(40, 'x'),
    };
    await withServer(async (server) => {
      console.log(`8. ${agents} concurrent agents on the PostgreSQL store, ${seconds} s each`);
      await floorAndSend(server, agents, seconds, 'send_message (postgres)');
    }, env);
  } finally {
    await postgres.stop();
  }
}
