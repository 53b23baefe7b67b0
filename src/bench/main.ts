import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { loadConfig } from '../config.js';
import { startServer, type BeidouServer } from '../server/server.js';
import { heartbeatGap, scrubShapeTimes, scrubTimes } from './agent-output.js';
import { loopingAgents } from './budget.js';
import { failoverTime } from './failover.js';
import { failoverLine, fmt, median, pct } from './figures.js';
import { team, withServer } from './harness.js';
import { historyStart, type StartFigure } from './history.js';
import { largestRequests } from './limits.js';
import { sendAndDelivery, sendOnPostgres, thousandAgents } from './throughput.js';
import { wakeLatencies, wakeUnavailable, type WakeWay } from './wake.js';

/**
 * `npm run bench`: prints the README's performance figures. send_message over Streamable HTTP with 50
 * concurrent agents next to a no-op tool on the same stack (the floor), send→delivery
 * latency next to the floor's round trip, 1,000 connected agents, and replay of 100,000
 * events on start, the event-loop block of the largest requests the limits allow, and how
 * long a message takes to wake an idle Claude Code session (section 6, needs tmux), the start
 * of a home with a long history (section 7), and section 1's send_message on the PostgreSQL
 * store (section 8; both start a real PostgreSQL from Debian's binaries), and failover time
 * of two replicas on PostgreSQL behind HAProxy (section 9), what an agent's output costs its
 * spawner: the token scrub, the heartbeat under 1 MB lines (section 10), and a looping agent at
 * the write budget with what the server then holds in memory (section 11, both stores).
 * Clients run in a child process (section 5 runs one in process). Figures, not assertions.
 */

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
/** BENCH_ONLY=1,4 runs just those sections. */
const ONLY = new Set((process.env.BENCH_ONLY ?? '1,2,3,4,5,6,7,8,9,10,11').split(','));
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
/** Section 10: the spawner's heartbeat (seconds) and the 1 MB lines its agent prints. */
const OUTPUT_HEARTBEAT_S = Number(process.env.BENCH_OUTPUT_HEARTBEAT_S ?? 0.2);
const OUTPUT_LINES = Number(process.env.BENCH_OUTPUT_LINES ?? 100);
/** The failover bar: one takes over within 10 s at the defaults. */
const FAILOVER_BAR_S = 10;
/** Section 11: real seconds per looping agent, and the stores. */
const BUDGET_SECONDS = Number(process.env.BENCH_BUDGET_SECONDS ?? 10);
const BUDGET_STORES = (process.env.BENCH_BUDGET_STORES ?? 'embedded,postgres').split(',') as Array<
  'embedded' | 'postgres'
>;

async function main(): Promise<void> {
  console.log(`beidou bench (node ${process.version}, ${os.cpus().length} cpus)\n`);

  if (ONLY.has('1') || ONLY.has('2')) await sendAndDelivery(AGENTS, SECONDS);

  if (ONLY.has('3')) await thousandAgents();

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
      for (const [i, f] of h.withIndex.entries()) console.log(line(`${store}, with the index, run ${i + 1}`, f));
      console.log(`  load average after the starts: ${h.load.after.map((l) => fmt(l, 2)).join(' ')}`);
    }
    console.log('');
  }

  if (ONLY.has('8')) await sendOnPostgres(AGENTS, SECONDS);

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

  if (ONLY.has('10')) {
    console.log("10. an agent's output and its spawner: the token scrub on eyJ… (one run, no dot), and the heartbeat");
    for (const f of scrubTimes([20_000, 200_000, 1_000_000], 20_000)) {
      const old = f.oldMs === null ? '' : `   (the pattern it replaced: ${fmt(f.oldMs, 0)} ms)`;
      console.log(`  scrub ${f.chars.toLocaleString('en').padStart(9)} chars ${fmt(f.scanMs, 2).padStart(6)} ms${old}`);
    }
    for (const f of scrubShapeTimes(1_000_000))
      console.log(`  scrub 1,000,000 chars of ${f.shape}: ${fmt(f.ms, 2)} ms`);
    const hb = await heartbeatGap(OUTPUT_HEARTBEAT_S, OUTPUT_LINES, 1_000_000);
    console.log(
      `  a command agent printing ${hb.lines} lines of 1 MB of eyJ (cut to 64 KiB, scrubbed, logged at info): heartbeat every ${fmt(hb.heartbeatMs, 0)} ms, intervals while they were read: longest ${fmt(Math.max(...hb.gapsMs), 0)} ms, median ${fmt(median(hb.gapsMs), 0)} ms (n ${hb.gapsMs.length}); spawner lost: ${hb.lost ? 'YES' : 'no'}`,
    );
    console.log('');
  }

  if (ONLY.has('11')) await loopingAgents(BUDGET_STORES, BUDGET_SECONDS);

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
