import { mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { pino } from 'pino';
import { loadConfig, type Config } from '../config.js';
import { startServer } from '../server/server.js';
import type { Clock } from '../util/clock.js';
import { createDatabase, startPostgres, withClient } from '../testkit/postgres.js';
import { fmt } from './figures.js';
import { team } from './harness.js';

/**
 * Section 11 of `npm run bench`: a looping agent at the default write budget
 * (BEIDOU_MAX_WRITE_BYTES_PER_MINUTE). One worker, a real MCP client, calls a tool in a loop
 * with the largest text the limits allow; the server's clock skips each wait a refusal names
 * (`retry_after_s`), so a few real seconds cover many minutes of looping at the budget.
 * Reported: the minutes covered, what reached the log, the calls admitted and refused, the
 * server process's RSS and heap (after a full GC) before and after, and what the log holds of
 * that task in memory next to its bound (BEIDOU_LIVE_EVENTS_IN_MEMORY, _BYTES_). Figures, not assertions.
 */

/** The real time, plus the waits skipped. */
class SkippingClock implements Clock {
  skipped = 0;
  now(): number {
    return Date.now() / 1000 + this.skipped;
  }
}

export type Loop = 'signal_review' | 'declare_plan/remove_plan';

export interface LoopFigure {
  store: 'embedded' | 'postgres';
  loop: Loop;
  minutes: number;
  admitted: number;
  refused: number;
  events: number;
  writtenMiB: number;
  /** Before the loop, half way, at its end (each after a full GC). */
  rssMiB: [number, number, number];
  heapMiB: [number, number, number];
  held: { events: number; bytes: number };
  config: Pick<Config, 'maxWriteBytesPerMinute' | 'liveEventsInMemory' | 'liveEventBytesInMemory'>;
}

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const mib = (bytes: number) => bytes / 2 ** 20;
function memory(): { rss: number; heap: number } {
  gc();
  gc();
  const m = process.memoryUsage();
  return { rss: mib(m.rss), heap: mib(m.heapUsed) };
}

/** One loop on a fresh server of `store` for `seconds` of real time. */
async function loopFor(
  store: LoopFigure['store'],
  loop: Loop,
  seconds: number,
  databaseUrl: string | null,
): Promise<LoopFigure> {
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-budget-'));
  const clock = new SkippingClock();
  const env: Record<string, string> = { BEIDOU_WATCHDOG_S: '86400' };
  if (databaseUrl) {
    env.BEIDOU_DATABASE_URL = databaseUrl;
    env.BEIDOU_SECRET = 'bench-secret-'.padEnd(40, 'x');
    env.BEIDOU_ADMIN_TOKEN = 'bench-admin-'.padEnd(40, 'x');
  }
  const config = loadConfig({ port: '0', home }, env);
  const server = await startServer(config, { logger: pino({ level: 'silent' }), clock });
  const client = new Client({ name: 'beidou-bench-budget', version: '0.0.0' });
  try {
    const { taskId, tokens } = await team(server, 1);
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${tokens[0]!}` } },
      }),
    );
    const text = (tag: string) => `${tag} ${'x'.repeat(config.maxContentChars - tag.length - 1)}`;
    let declared = false;
    let n = 0;
    /** One call of the loop: the retry_after_s of a refusal, or null. */
    const step = async (): Promise<number | null> => {
      n++;
      let name: string;
      let args: Record<string, unknown>;
      if (loop === 'signal_review') [name, args] = ['signal_review', { detail: text(`[REVIEW REQUIRED] ${n}`) }];
      else if (declared) [name, args] = ['remove_plan', {}];
      else {
        const tasks = [0, 1, 2, 3].map((k) => ({
          id: `t${k}`,
          role: `r${k}`,
          skill: 'worker',
          task: text(`${n}.${k}`),
        }));
        [name, args] = ['declare_plan', { tasks }];
      }
      const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
      if (!result.isError) {
        if (name !== 'signal_review') declared = name === 'declare_plan';
        return null;
      }
      const error = JSON.parse((result.content[0] as { text: string }).text);
      if (error.error !== 'rate_limited') throw new Error(`${name}: ${error.error}: ${error.message}`);
      return error.details.retry_after_s as number;
    };
    const written = async () =>
      databaseUrl
        ? withClient(databaseUrl, async (c) =>
            Number(
              (
                await c.query('SELECT coalesce(sum(octet_length(body::text)), 0) AS b FROM events WHERE task_id = $1', [
                  taskId,
                ])
              ).rows[0].b,
            ),
          )
        : statSync(path.join(home, 'events', `${taskId}.jsonl`)).size;

    // Warm: a few calls, so the code is compiled and the pools are filled before the first reading.
    for (let i = 0; i < 4; i++) await step();
    const log = server.services.registry.log;
    const before = { memory: memory(), seq: log.durableSeq(taskId), bytes: await written(), at: clock.now() };
    let admitted = 0;
    let refused = 0;
    const start = performance.now();
    const until = start + seconds * 1000;
    let half: { rss: number; heap: number } | null = null;
    while (performance.now() < until) {
      if (!half && performance.now() - start >= (seconds * 1000) / 2) half = memory();
      const wait = await step();
      if (wait === null) admitted++;
      else {
        refused++;
        clock.skipped += wait;
      }
    }
    const after = memory();
    return {
      store,
      loop,
      minutes: (clock.now() - before.at) / 60,
      admitted,
      refused,
      events: log.durableSeq(taskId) - before.seq,
      writtenMiB: mib((await written()) - before.bytes),
      rssMiB: [before.memory.rss, half?.rss ?? after.rss, after.rss],
      heapMiB: [before.memory.heap, half?.heap ?? after.heap, after.heap],
      held: log.inMemory(taskId),
      config,
    };
  } finally {
    await client.close().catch(() => undefined);
    await server.close();
    rmSync(home, { recursive: true, force: true });
  }
}

export function loopLine(f: LoopFigure): string {
  const cap = `${f.config.liveEventsInMemory.toLocaleString('en')}${f.store === 'postgres' ? ` and ${fmt(mib(f.config.liveEventBytesInMemory), 0)} MiB` : ''}`;
  const held =
    f.store === 'postgres'
      ? `${f.held.events.toLocaleString('en')} events, ${fmt(mib(f.held.bytes), 1)} MiB`
      : `${f.held.events.toLocaleString('en')} line offsets, no event`;
  const three = (xs: readonly number[], digits: number) => xs.map((x) => fmt(x, digits)).join(' -> ');
  // A minute's budget is spent at once; from then on the loop writes at the rate it drains.
  const budget = mib(f.config.maxWriteBytesPerMinute);
  const rate = (f.writtenMiB - budget) / f.minutes;
  return (
    `  ${`${f.store}, ${f.loop}`.padEnd(36)} ${fmt(f.minutes, 1).padStart(5)} min: ${fmt(f.writtenMiB, 0).padStart(4)} MiB written (the budget at once, then ${fmt(rate, 1)} MiB/min), ` +
    `${f.events.toLocaleString('en')} events, calls ${f.admitted} admitted ${f.refused} refused\n` +
    `  ${''.padEnd(36)} RSS ${three(f.rssMiB, 0)} MiB, heap ${three(f.heapMiB, 1)} MiB (start, half way, end); ` +
    `held of the task: ${held} (bound ${cap})`
  );
}

/** Both loops on each store (`stores`), `seconds` each; PostgreSQL is a real server the bench starts. */
export async function loopingAgents(stores: Array<LoopFigure['store']>, seconds: number): Promise<void> {
  const budget = loadConfig({ port: '0', home: os.tmpdir() }, {}).maxWriteBytesPerMinute;
  console.log(
    `11. a looping agent at the default write budget (${fmt(mib(budget), 0)} MiB a minute), ${seconds} s of real time per loop; the server's clock skips each wait a refusal names`,
  );
  const loops: Loop[] = ['signal_review', 'declare_plan/remove_plan'];
  if (stores.includes('embedded'))
    for (const loop of loops) console.log(loopLine(await loopFor('embedded', loop, seconds, null)));
  if (stores.includes('postgres')) {
    const postgres = await startPostgres();
    try {
      for (const [i, loop] of loops.entries()) {
        const name = `beidou_bench_budget_${i}`;
        await createDatabase(postgres.url('postgres'), name);
        console.log(loopLine(await loopFor('postgres', loop, seconds, postgres.url(name))));
      }
    } finally {
      await postgres.stop();
    }
  }
  console.log('');
}
