import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { z } from 'zod';
import { loadConfig } from '../config.js';
import { definePrimitive, type AnyPrimitive } from '../primitives/define.js';
import { PRIMITIVES } from '../primitives/index.js';
import { newTask } from '../domain/agents.js';
import { startServer, type BeidouServer } from '../server/server.js';
import { createDatabase, startPostgres } from '../testkit/postgres.js';
import type { Figures, Job } from './clients.js';
import { failoverTime, type FailoverRun } from './failover.js';
import { historyStart, type StartFigure } from './history.js';
import { largestRequests } from './limits.js';
import { wakeLatencies, wakeUnavailable, type WakeWay } from './wake.js';

/**
 * `npm run bench`: prints the README's performance figures. send_message over Streamable HTTP with 50
 * concurrent agents next to a no-op tool on the same stack (the floor), send→delivery
 * latency next to the floor's round trip, 1,000 connected agents, and replay of 100,000
 * events on start, the event-loop block of the largest requests the limits allow, and how
 * long a message takes to wake an idle Claude Code session (section 6, needs tmux), the start
 * of a home with a long history (section 7), and section 1's send_message on the PostgreSQL
 * store (section 8; both start a real PostgreSQL from Debian's binaries), and failover time
 * of two replicas on PostgreSQL behind HAProxy (section 9).
 * Clients run in a child process (section 5 runs one in process). Figures, not assertions.
 */

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
/** BENCH_ONLY=1,4 runs just those sections. */
const ONLY = new Set((process.env.BENCH_ONLY ?? '1,2,3,4,5,6,7,8,9').split(','));
/** Section 7: the history a home holds (ended tasks, events per task), the stores, and the starts with the index per store. */
const HISTORY_TASKS = Number(process.env.BENCH_HISTORY_TASKS ?? 10_000);
const HISTORY_PER_TASK = Number(process.env.BENCH_HISTORY_EVENTS_PER_TASK ?? 100);
const HISTORY_STORES = (process.env.BENCH_HISTORY_STORES ?? 'embedded,postgres').split(',') as Array<
  'embedded' | 'postgres'
>;
const HISTORY_RUNS = Number(process.env.BENCH_HISTORY_RUNS ?? 3);
// BENCH_HISTORY_BEFORE=/path/to/an/older/beidou/dist/cli/main.js starts the same home with it first, for comparison;
// BENCH_HISTORY_MAIN=/path/to/another/beidou/dist/cli/main.js measures that build in every start instead of this one.
const AGENTS = 50;
/** Section 6: sends per wake path (after one first wake, reported apart), and which paths. */
const WAKE_SENDS = Number(process.env.BENCH_WAKE_SENDS ?? 20);
const WAKE_WAYS = (process.env.BENCH_WAKE_PATHS ?? 'socket,rewake').split(',') as WakeWay[];
/** Section 9: runs per way of taking the active down (SIGKILL, SIGSTOP), agents sending, HAProxy's check interval (docs/deploy.md's example: 1 s). */
const FAILOVER_RUNS = Number(process.env.BENCH_FAILOVER_RUNS ?? 3);
const FAILOVER_AGENTS = Number(process.env.BENCH_FAILOVER_AGENTS ?? 8);
const FAILOVER_CHECK_MS = Number(process.env.BENCH_FAILOVER_CHECK_MS ?? 1000);
/** The failover bar: one takes over within 10 s at the defaults. */
const FAILOVER_BAR_S = 10;

/** The floor: same input shape and the same wrapper as send_message, doing nothing. */
const noop = definePrimitive({
  name: 'bench_noop',
  title: 'no-op (bench floor)',
  description: 'Does nothing; the bench measures the stack under it.',
  inputSchema: z.strictObject({ to: z.string().min(1), content: z.string().min(1) }),
  outputSchema: z.object({ ok: z.literal(true) }),
  allowedDuringReview: true,
  async handler() {
    return { ok: true as const };
  },
});

const CLIENTS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'clients.js');

function runClients(job: Job, onMessage?: (m: unknown, child: ReturnType<typeof fork>) => void): Promise<Figures> {
  return new Promise((resolve, reject) => {
    const child = fork(CLIENTS, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const cpu0 = process.cpuUsage();
    child.on('message', (m: { figures?: Figures }) => {
      if (m.figures) {
        const used = process.cpuUsage(cpu0);
        resolve({
          ...m.figures,
          cpu: { server: (used.user + used.system) / 1e6, clients: m.figures.cpu?.clients ?? NaN },
        });
      } else onMessage?.(m, child);
    });
    child.on('exit', (code) => code !== 0 && reject(new Error(`bench clients exited with ${code}`)));
    child.send(job);
  });
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const fmt = (n: number, digits = 1) => n.toFixed(digits);

async function withServer<T>(
  fn: (server: BeidouServer, home: string) => Promise<T>,
  env: Record<string, string> = {},
): Promise<T> {
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-'));
  const server = await startServer(loadConfig({ port: '0', home }, { BEIDOU_INBOX_CAP: '1000000000', ...env }), {
    logger: pino({ level: 'silent' }),
    catalogue: [...PRIMITIVES, noop as unknown as AnyPrimitive],
  });
  try {
    return await fn(server, home);
  } finally {
    await server.close();
    rmSync(home, { recursive: true, force: true });
  }
}

/** A task whose root leads one team of `n` members; returns their ids and tokens. */
async function team(server: BeidouServer, n: number) {
  const { services } = server;
  const skill = services.skills.load('worker');
  const { taskId, rootAgentId, drafts } = newTask(services.domain, {
    task: 'bench',
    skill,
    model: null,
    name: 'bench',
    workspace: null,
    spawn: false,
  });
  await services.registry.commit(drafts);
  const { createTeam } = await import('../primitives/create-team.js');
  const root = services.registry.agent(rootAgentId)!;
  const out = await createTeam.handler(
    {
      name: 'bench',
      task: 'bench',
      roles: Array.from({ length: n }, (_, i) => ({ role: `agent-${i}`, skill: 'worker', description: `member ${i}` })),
      rules: [],
      consensus: false,
    },
    { services, caller: root, signal: new AbortController().signal, progress: async () => {} },
  );
  const ids = out.members.map((m) => m.agent_id);
  const tokens = await Promise.all(ids.map((id) => services.tokens.mintAgent(id, taskId)));
  return { taskId, ids, tokens };
}

function report(name: string, f: Figures): { rps: number; p50: number; p99: number } {
  const rps = f.calls / f.seconds;
  if (f.cpu)
    console.log(
      `    (cpu: server ${fmt(f.cpu.server, 2)} s, clients ${fmt(f.cpu.clients, 2)} s over ${fmt(f.seconds, 2)} s)`,
    );
  const p50 = pct(f.latenciesMs, 50);
  const p99 = pct(f.latenciesMs, 99);
  console.log(
    `  ${name.padEnd(26)} ${fmt(rps, 0).padStart(7)} req/s   p50 ${fmt(p50, 2).padStart(6)} ms   p99 ${fmt(p99, 2).padStart(6)} ms   errors ${f.errors}`,
  );
  return { rps, p50, p99 };
}

async function main(): Promise<void> {
  console.log(`beidou bench (node ${process.version}, ${os.cpus().length} cpus)\n`);

  if (ONLY.has('1') || ONLY.has('2'))
    await withServer(async (server) => {
      console.log(`1. ${AGENTS} concurrent agents over Streamable HTTP, ${SECONDS} s each`);
      const { ids, tokens } = await team(server, AGENTS);
      const targets = ids.map((_, i) => ids[(i + 1) % ids.length]!);
      const floor = report(
        'bench_noop (floor)',
        await runClients({
          kind: 'throughput',
          url: server.url,
          tokens,
          targets,
          tool: 'bench_noop',
          seconds: SECONDS,
        }),
      );
      const send = report(
        'send_message',
        await runClients({
          kind: 'throughput',
          url: server.url,
          tokens,
          targets,
          tool: 'send_message',
          seconds: SECONDS,
        }),
      );
      console.log(
        `  send_message / floor: throughput ${fmt(send.rps / floor.rps, 2)}x, p50 latency ${fmt(send.p50 / floor.p50, 2)}x (bar: within 1.5x)\n`,
      );

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

  if (ONLY.has('3'))
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

  if (ONLY.has('5')) {
    console.log('5. the largest requests the default limits allow: longest event-loop block (bar: about 250 ms)');
    const defaults = loadConfig({ port: '0', home: os.tmpdir() }, {});
    const fresh = <T>(fn: (server: BeidouServer) => Promise<T>) =>
      withServer(fn, { BEIDOU_INBOX_CAP: String(defaults.inboxCap) });
    for (const b of await largestRequests(fresh, defaults.maxAgentsPerTask, defaults.maxPlanTasks)) {
      console.log(
        `  ${b.name.padEnd(44)} body ${fmt(b.bodyBytes / 1024, 0).padStart(5)} KiB   call ${fmt(b.callMs, 0).padStart(5)} ms   longest block ${fmt(b.maxBlockMs, 0).padStart(4)} ms (worst ${fmt(b.worstBlockMs, 0)} ms)`,
      );
    }
    console.log('');
  }

  if (ONLY.has('6')) {
    const unavailable = wakeUnavailable();
    if (unavailable) console.log(`6. wake latency of an idle Claude Code session: skipped, ${unavailable}\n`);
    else {
      console.log(
        `6. wake: send -> new model request of an idle Claude Code session (${WAKE_SENDS} sends per path, ${WAKE_WAYS.join(' and ')})`,
      );
      for (const way of WAKE_WAYS) {
        const w = await withServer((server, home) => wakeLatencies(server, home, way, WAKE_SENDS));
        const xs = w.latenciesMs;
        const name = way === 'socket' ? 'socket (relay rings it)' : 'rewake (asyncRewake hook)';
        console.log(
          `  ${name.padEnd(26)} p50 ${fmt(pct(xs, 50), 0).padStart(4)} ms   p99 ${fmt(pct(xs, 99), 0).padStart(4)} ms   min ${fmt(Math.min(...xs), 0)} ms   max ${fmt(Math.max(...xs), 0)} ms   n ${xs.length}   errors ${w.errors}   (first wake after start, not counted: ${fmt(w.firstMs, 0)} ms)`,
        );
      }
      console.log('');
    }
  }

  if (ONLY.has('7')) {
    console.log(
      `7. a home of ${HISTORY_TASKS.toLocaleString('en')} ended tasks (${HISTORY_PER_TASK} events each): start time and RSS, with the archive index and without (bar: under 2 s, under 200 MB)`,
    );
    const line = (name: string, f: StartFigure) =>
      `  ${name.padEnd(34)} start ${fmt(f.seconds, 2).padStart(6)} s (store and replay ${fmt(f.openMs / 1000, 2)} s)   RSS ${fmt(f.rssMiB, 0).padStart(5)} MiB (peak ${fmt(f.peakMiB, 0)})   events replayed ${f.replayed}   tasks left archived ${f.archived}`;
    for (const store of HISTORY_STORES) {
      const h = await historyStart(
        store,
        HISTORY_TASKS,
        HISTORY_PER_TASK,
        HISTORY_RUNS,
        process.env.BENCH_HISTORY_BEFORE,
      );
      console.log(
        `  ${store}: generated ${h.tasks.toLocaleString('en')} tasks, ${h.events.toLocaleString('en')} events in ${fmt(h.generateSeconds, 1)} s; load average then ${h.load.before.map((l) => fmt(l, 2)).join(' ')}`,
      );
      console.log(line(`${store}, empty home (the floor)`, h.empty));
      if (h.before) console.log(line(`${store}, beidou before the index`, h.before));
      console.log(line(`${store}, no index (full replay)`, h.withoutIndex));
      h.withIndex.forEach((f, i) => console.log(line(`${store}, with the index, run ${i + 1}`, f)));
      console.log(`  load average after the starts: ${h.load.after.map((l) => fmt(l, 2)).join(' ')}`);
    }
    console.log('');
  }

  if (ONLY.has('8')) {
    // Section 1 on the PostgreSQL store: a real server the bench starts (Debian's binaries),
    // the same team and clients; the floor is measured on the same server, so the ratio
    // says what the store's commit costs a call.
    const postgres = await startPostgres();
    try {
      await createDatabase(postgres.url('postgres'), 'beidou_bench_send');
      const env = {
        BEIDOU_DATABASE_URL: postgres.url('beidou_bench_send'),
        BEIDOU_SECRET: 'bench-secret-'.padEnd(40, 'x'),
        BEIDOU_ADMIN_TOKEN: 'bench-admin-'.padEnd(40, 'x'),
      };
      await withServer(async (server) => {
        console.log(`8. ${AGENTS} concurrent agents on the PostgreSQL store, ${SECONDS} s each`);
        const { ids, tokens } = await team(server, AGENTS);
        const targets = ids.map((_, i) => ids[(i + 1) % ids.length]!);
        const floor = report(
          'bench_noop (floor)',
          await runClients({
            kind: 'throughput',
            url: server.url,
            tokens,
            targets,
            tool: 'bench_noop',
            seconds: SECONDS,
          }),
        );
        const send = report(
          'send_message (postgres)',
          await runClients({
            kind: 'throughput',
            url: server.url,
            tokens,
            targets,
            tool: 'send_message',
            seconds: SECONDS,
          }),
        );
        console.log(
          `  send_message / floor: throughput ${fmt(send.rps / floor.rps, 2)}x, p50 latency ${fmt(send.p50 / floor.p50, 2)}x (bar: within 1.5x)\n`,
        );
      }, env);
    } finally {
      await postgres.stop();
    }
  }

  if (ONLY.has('9')) {
    const lease = process.env.BEIDOU_LEASE_S
      ? `BEIDOU_LEASE_S=${process.env.BEIDOU_LEASE_S}`
      : 'BEIDOU_LEASE_S=3 (the default)';
    console.log(
      `9. failover: two beidou serve replicas on one PostgreSQL behind HAProxy (health check every ${FAILOVER_CHECK_MS} ms), ${FAILOVER_AGENTS} agents sending send_message through it (MCP SDK clients in a child process, a call given up after 5 s), ${lease}; the active SIGKILLed, then SIGSTOPped, ${FAILOVER_RUNS} runs each (bar: within ${FAILOVER_BAR_S} s)`,
    );
    console.log(
      '  active after: take-down -> the standby logs "took over the lease ...: active"; first ack after: take-down -> the first send_message sent after it acknowledged through HAProxy',
    );
    const runs = await failoverTime({
      agents: FAILOVER_AGENTS,
      runs: FAILOVER_RUNS,
      checkMs: FAILOVER_CHECK_MS,
      warmup: 100,
      after: 100,
      onRun: (r) => console.log(failoverLine(r)),
    });
    for (const how of ['SIGKILL', 'SIGSTOP'] as const) {
      const of = runs.filter((r) => r.how === how);
      const active = median(of.map((r) => r.activeS));
      const ack = median(of.map((r) => r.firstAckS));
      const worst = Math.max(...of.map((r) => r.firstAckS));
      console.log(
        `  ${how} median of ${of.length}: active after ${fmt(active, 2)} s, first ack after ${fmt(ack, 2)} s (worst ${fmt(worst, 2)} s); bar within ${FAILOVER_BAR_S} s: ${worst < FAILOVER_BAR_S ? 'met' : 'MISSED'}`,
      );
    }
    console.log('');
  }

  if (!ONLY.has('4')) return;
  console.log('4. replay of 100,000 events on start');
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-'));
  try {
    const config = loadConfig({ port: '0', home }, { BEIDOU_INBOX_CAP: '1000000000' });
    const quiet = { logger: pino({ level: 'silent' }) };
    let server = await startServer(config, quiet);
    const { services } = server;
    const { ids } = await team(server, 10);
    const taskId = services.registry.agent(ids[0]!)!.task_id;
    const t0 = performance.now();
    for (let batch = 0; batch < 100; batch++) {
      const drafts = Array.from({ length: 1000 }, (_, i) => ({
        event: 'send_message' as const,
        task_id: taskId,
        caller_id: ids[i % 10]!,
        to: ids[(i + 1) % 10]!,
        content: `replay message ${batch * 1000 + i} with a little body text`,
        message_id: services.ids.next('msg'),
      }));
      await services.registry.commit(drafts);
    }
    const wrote = (performance.now() - t0) / 1000;
    await server.close();
    const t1 = performance.now();
    server = await startServer(config, quiet);
    const replay = (performance.now() - t1) / 1000;
    const events = server.services.registry.task(taskId)!.event_count;
    await server.close();
    console.log(
      `  wrote 100,000 events in ${fmt(wrote, 2)} s; restart replayed ${events} events in ${fmt(replay, 2)} s (${fmt(events / replay, 0)} events/s)`,
    );
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

function failoverLine(r: FailoverRun): string {
  const n = (x: number | null) => (x === null ? '?' : x.toLocaleString('en'));
  const replayed = r.warm
    ? `warm: read ${n(r.readEvents)} events at the takeover (${n(r.followedEvents)} followed) in ${r.replayMs} ms`
    : `cold: replayed ${n(r.readEvents)} events in ${r.replayMs} ms`;
  const failures = Object.entries(r.failures)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
  const paused = r.stepDownS === null ? '' : `; after SIGCONT ${r.down} stepped down in ${fmt(r.stepDownS, 2)} s`;
  return (
    `  ${r.how} run ${r.run} (${r.down} was active): active after ${fmt(r.activeS, 2).padStart(5)} s (${r.up}, ${replayed}, ${r.reason}), first ack after ${fmt(r.firstAckS, 2).padStart(5)} s${paused}; ` +
    `${r.acked} acknowledged, each stored once, seq gapless (${r.events} events); ${r.failed} calls failed${failures ? ` (${failures})` : ''}, ${r.reconnects} sessions opened`
  );
}

const median = (xs: number[]) => pct(xs, 50);

let finished = false;
// A pending await that nothing keeps alive lets Node exit 0 without a word: say so, and fail.
process.on('beforeExit', () => {
  if (finished) return;
  console.error(
    'bench: the event loop ran empty before the bench finished (an awaited promise nothing could settle any more): failing',
  );
  process.exit(1);
});

main().then(
  () => {
    finished = true;
  },
  (err: unknown) => {
    finished = true;
    console.error(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exit(1);
  },
);
