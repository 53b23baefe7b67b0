import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import pg from 'pg';
import { pino } from 'pino';
import { loadConfig } from '../config.js';
import { migrate, MIGRATIONS } from '../store/postgres/schema.js';
import { startServer } from '../server/server.js';
import { createDatabase, startPostgres, type TestPostgres } from '../testkit/postgres.js';

/**
 * Section 7: a home holding many ended tasks (10,000 tasks, 1,000,000 events by default)
 * starts, on each store, with the archive index (the ended tasks are not read) and without
 * it (every event replayed, as every start did before the index). The history is generated
 * quickly: one real task is run through a real server (messages sent through the admin
 * API and read with `read_inbox` over MCP, then the task terminated), and its stored events
 * are copied under fresh task and agent ids, as JSONL files or bulk-inserted rows. The first
 * start replays all of it through the real reducer, which validates the copy. Each start is a
 * child `beidou serve`, timed from spawn to "listening", its RSS read from /proc.
 */

/** The beidou measured: this build's, or another build's `dist/cli/main.js` (`BENCH_HISTORY_MAIN`) to compare with, under this same harness. */
const MAIN =
  process.env.BENCH_HISTORY_MAIN || path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'main.js');

export interface StartFigure {
  seconds: number;
  rssMiB: number;
  peakMiB: number;
  replayed: number;
  archived: number;
  /** The server's own figure: opening the store and rebuilding the registry (the rest of the start is loading code and listening). */
  openMs: number;
}

/** The events of one real, ended task of `perTask` events: its task id, root id and stored lines. */
export async function templateTask(perTask: number): Promise<{ taskId: string; rootId: string; lines: string[] }> {
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-tpl-'));
  try {
    const server = await startServer(loadConfig({ port: '0', home }, {}), { logger: pino({ level: 'silent' }) });
    try {
      const api = async (method: string, route: string, body?: unknown) => {
        const res = await fetch(`${server.url}/api${route}`, {
          method,
          headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
        return (await res.json()) as Record<string, unknown>;
      };
      const created = await api('POST', '/tasks', {
        task: 'summarise the quarterly report and send it to the team',
        name: 'bench history',
        spawn: false,
      });
      const taskId = created.task_id as string;
      const rootId = created.root_agent_id as string;
      const client = new Client({ name: 'bench-history', version: '0.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${created.token as string}` } },
        }),
      );
      const count = () => server.services.registry.task(taskId)!.event_count;
      // Terminating adds three events (terminate.posted, terminate.consumed, task_ended).
      let i = 0;
      while (count() + 3 + 3 <= perTask) {
        await api('POST', `/agents/${rootId}/send`, {
          content: `progress note ${i++}: section ${i} of the report is drafted; figures checked against the ledger`,
        });
        await client.callTool({ name: 'read_inbox', arguments: {} }); // delivering + agent_input
      }
      while (count() + 3 < perTask) await api('POST', `/agents/${rootId}/send`, { content: `a last note ${i++}` });
      await client.close();
      await api('POST', `/tasks/${taskId}/terminate`, {});
      await server.services.registry.log.flush();
      const lines = readFileSync(path.join(home, 'events', `${taskId}.jsonl`), 'utf8')
        .split('\n')
        .filter((l) => l.length > 0);
      return { taskId, rootId, lines };
    } finally {
      await server.close();
    }
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

const hex12 = (n: number) => n.toString(16).padStart(12, '0');

/** The template's lines under the ids of copy `n` (same length: ids are fixed width). */
function copyOf(tpl: { taskId: string; rootId: string; lines: string[] }, n: number): string[] {
  const taskId = `tsk_${hex12(n)}`;
  const rootId = `${tpl.rootId.slice(0, tpl.rootId.indexOf('_') + 1)}${hex12(n)}`;
  return tpl.lines.map((l) => l.split(tpl.taskId).join(taskId).split(tpl.rootId).join(rootId));
}

export function writeEmbeddedHome(
  home: string,
  tpl: { taskId: string; rootId: string; lines: string[] },
  tasks: number,
): void {
  const dir = path.join(home, 'events');
  mkdirSync(dir, { recursive: true });
  for (let n = 0; n < tasks; n++)
    writeFileSync(path.join(dir, `tsk_${hex12(n)}.jsonl`), `${copyOf(tpl, n).join('\n')}\n`);
}

export async function fillDatabase(
  url: string,
  tpl: { taskId: string; rootId: string; lines: string[] },
  tasks: number,
  schema: number,
): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    // The schema of the beidou that starts first (an older one refuses a newer schema).
    await migrate(
      client,
      MIGRATIONS.filter((m) => m.version <= schema),
    );
    const ROWS = 20_000;
    let rows: { t: string[]; s: number[]; ts: number[]; e: string[]; b: string[] } = {
      t: [],
      s: [],
      ts: [],
      e: [],
      b: [],
    };
    const insert = async () => {
      if (rows.t.length === 0) return;
      await client.query(
        'INSERT INTO events (task_id, seq, ts, event, body) SELECT t, s, ts, e, b::json FROM unnest($1::text[], $2::int[], $3::float8[], $4::text[], $5::text[]) AS r(t, s, ts, e, b)',
        [rows.t, rows.s, rows.ts, rows.e, rows.b],
      );
      rows = { t: [], s: [], ts: [], e: [], b: [] };
    };
    const taskIds: string[] = [];
    const created: number[] = [];
    for (let n = 0; n < tasks; n++) {
      for (const line of copyOf(tpl, n)) {
        // The stored body has no commit markers: a commit is a transaction there.
        const {
          commit: _c,
          of: _o,
          ...event
        } = JSON.parse(line) as {
          seq: number;
          ts: number;
          event: string;
          task_id: string;
          commit?: number;
          of?: number;
        };
        rows.t.push(event.task_id);
        rows.s.push(event.seq);
        rows.ts.push(event.ts);
        rows.e.push(event.event);
        rows.b.push(JSON.stringify(event));
        if (event.seq === 1) {
          taskIds.push(event.task_id);
          created.push(event.ts);
        }
      }
      if (rows.t.length >= ROWS) await insert();
    }
    await insert();
    await client.query('INSERT INTO log_tasks (task_id, created_ts) SELECT * FROM unnest($1::text[], $2::float8[])', [
      taskIds,
      created,
    ]);
    await client.query('VACUUM ANALYZE events');
  } finally {
    await client.end();
  }
}

/** One `beidou serve` start: seconds to "listening", RSS then (and its peak), what it replayed; waits for `archivedTasks` to be archived if given. */
async function measureStart(
  home: string,
  env: Record<string, string>,
  archivedTasks?: number,
  before?: () => Promise<void>,
  main = MAIN,
): Promise<StartFigure> {
  await before?.();
  const t0 = performance.now();
  const child = spawn(process.execPath, [main, 'serve', '--home', home, '--port', '0'], {
    env: { ...process.env, BEIDOU_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const figure = await new Promise<StartFigure>((resolve, reject) => {
    let at: { seconds: number; rssMiB: number; peakMiB: number } | null = null;
    const onData = (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (!at && out.includes('beidou listening on')) {
        const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
        const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(status)![1]) / 1024;
        at = { seconds: (performance.now() - t0) / 1000, rssMiB: kb('VmRSS'), peakMiB: kb('VmHWM') };
      }
      // The log line and "listening" come on different pipes: either may be read first.
      const rebuilt = /\{[^\n]*registry rebuilt from the event logs[^\n]*\}/.exec(out);
      if (!at || !rebuilt) return;
      if (archivedTasks !== undefined && !new RegExp(`archived ${archivedTasks} ended tasks`).test(out)) return;
      // A beidou from before the index logs no events count: every event was replayed.
      const line = JSON.parse(rebuilt[0]) as { events?: number; archived?: number; ms: number };
      resolve({ ...at, replayed: line.events ?? NaN, archived: line.archived ?? 0, openMs: line.ms });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) =>
      reject(new Error(`beidou serve exited (${code}) before it was measured:\n${out.slice(-2000)}`)),
    );
  });
  if (/quarantined/.test(out)) throw new Error(`the generated history did not replay cleanly:\n${out.slice(-2000)}`);
  child.removeAllListeners('exit');
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
  return figure;
}

export interface HistoryFigures {
  store: 'embedded' | 'postgres';
  tasks: number;
  events: number;
  generateSeconds: number;
  withoutIndex: StartFigure;
  withIndex: StartFigure[];
  /** The same home started by a beidou from before the index (`BENCH_HISTORY_BEFORE`: its dist/cli/main.js), if given. */
  before: StartFigure | null;
  /** An empty home on the same store: the start's floor (loading the code, opening the store, listening). */
  empty: StartFigure;
  /** The machine's load averages (1, 5, 15 min) once the history was generated, and after the last start. */
  load: { before: number[]; after: number[] };
}

/** Section 7 for one store. */
export async function historyStart(
  store: 'embedded' | 'postgres',
  tasks: number,
  perTask: number,
  runs: number,
  beforeMain?: string,
): Promise<HistoryFigures> {
  const tpl = await templateTask(perTask);
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-history-'));
  let postgres: TestPostgres | null = null;
  try {
    const env: Record<string, string> = { BEIDOU_ARCHIVE_AFTER_S: '1' };
    const g0 = performance.now();
    if (store === 'embedded') writeEmbeddedHome(home, tpl, tasks);
    else {
      postgres = await startPostgres();
      await createDatabase(postgres.url('postgres'), 'beidou_bench');
      env.BEIDOU_DATABASE_URL = postgres.url('beidou_bench');
      // With a database URL both are required from the environment (every replica signs alike).
      env.BEIDOU_SECRET = 'bench-history-secret-'.padEnd(48, 'x');
      env.BEIDOU_ADMIN_TOKEN = 'bench-history-admin-'.padEnd(48, 'x');
      await fillDatabase(env.BEIDOU_DATABASE_URL, tpl, tasks, beforeMain ? 3 : MIGRATIONS.at(-1)!.version);
    }
    const generateSeconds = (performance.now() - g0) / 1000;
    const loadBefore = os.loadavg();
    const emptyHome = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-empty-'));
    let empty: StartFigure;
    try {
      empty = await measureStart(
        emptyHome,
        store === 'embedded' ? env : { ...env, BEIDOU_DATABASE_URL: postgres!.url('beidou_empty') },
        undefined,
        async () => {
          if (postgres) await createDatabase(postgres.url('postgres'), 'beidou_empty');
        },
      );
    } finally {
      rmSync(emptyHome, { recursive: true, force: true });
    }
    const before = beforeMain ? await measureStart(home, env, undefined, undefined, beforeMain) : null;
    // No index yet: every event is replayed (what every start did before it). Then the
    // archiver (its delay 1 s: the copies ended when the template did) fills the index.
    const withoutIndex = await measureStart(home, env, tasks);
    const withIndex: StartFigure[] = [];
    for (let r = 0; r < runs; r++) withIndex.push(await measureStart(home, env));
    return {
      store,
      tasks,
      events: tasks * tpl.lines.length,
      generateSeconds,
      withoutIndex,
      withIndex,
      before,
      empty,
      load: { before: loadBefore, after: os.loadavg() },
    };
  } finally {
    await postgres?.stop().catch(() => undefined);
    rmSync(home, { recursive: true, force: true });
  }
}
