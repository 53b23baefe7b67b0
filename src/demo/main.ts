import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import type { StoredEvent } from '../events/catalogue.js';
import { loadConfig } from '../config.js';
import { startServer } from '../server/server.js';
import { PACKAGE_ROOT } from '../util/version.js';
import { Story, summaryLines, type CostStats } from './story.js';
import { nextLines, watchLines } from './where.js';

export interface DemoOptions {
  /** Print nothing (the tests that read the events instead). */
  quiet?: boolean;
  keepHome?: boolean;
  /** Milliseconds each scripted agent waits before each step (`--slow`). */
  stepDelayMs?: number;
  /** Stops the run early (Ctrl-C): the spawner and server are stopped, the home deleted unless kept. */
  signal?: AbortSignal;
}

/**
 * `npm run demo`: a server and a spawner (command adapter) on a temp home run a three-agent
 * task with scripted agents to completion — plan, spawn, messages, a question answered by a
 * leader, reviews with a rework, approval, the user's final Approve and the cascade — told
 * as a story from the task's first event as it happens, then a summary and where to look next.
 */
export async function runDemo(
  options: DemoOptions = {},
): Promise<{ taskId: string; home: string; events: StoredEvent[] }> {
  const say = (line: string) => options.quiet || process.stdout.write(`${line}\n`);
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-demo-'));
  const server = await startServer(loadConfig({ port: '0', home }, { BEIDOU_SPAWNER_HEARTBEAT_S: '1' }), {
    logger: pino({ level: 'warn' }),
  });
  say('beidou demo: scripted agents run a three-agent task through a real server and spawner');
  say(`server    ${server.url} (home ${home})`);
  if (options.stepDelayMs) for (const line of watchLines(server.url, server.adminToken)) say(line);
  // T: the fields of the JSON reply this call reads.
  const api = async <T = unknown>(method: string, route: string, body?: unknown) => {
    const res = await fetch(`${server.url}/api${route}`, {
      method,
      headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<T>;
  };
  const { token } = await api<{ token: string }>('POST', '/spawner-tokens', {});
  const agentCmd = `"${process.execPath}" "${path.join(PACKAGE_ROOT, 'examples', 'scripted-agent.mjs')}"`;
  const spawner = spawn(
    process.execPath,
    [
      path.join(PACKAGE_ROOT, 'dist', 'cli', 'main.js'),
      'spawner',
      '--server',
      server.url,
      '--token',
      token,
      '--adapter',
      'command',
      '--command',
      agentCmd,
      '--workdir',
      path.join(home, 'agents'),
      '--spool-dir',
      path.join(home, 'spool'),
      // Agents get only the variables the spawner allows: the script's are named.
      '--pass-env',
      'BEIDOU_SCRIPT',
      '--pass-env',
      'BEIDOU_SCRIPT_DELAY_MS',
    ],
    {
      env: {
        ...process.env,
        BEIDOU_SCRIPT: path.join(PACKAGE_ROOT, 'examples', 'demo-script.json'),
        BEIDOU_LOG_LEVEL: 'warn',
        ...(options.stepDelayMs ? { BEIDOU_SCRIPT_DELAY_MS: String(options.stepDelayMs) } : {}),
      },
      // Its banner would interrupt the story; its warnings still show.
      stdio: ['ignore', 'ignore', options.quiet ? 'ignore' : 'inherit'],
    },
  );
  let taskId: string | null = null;
  let finished = false;
  try {
    const task = await api<{ task_id: string }>('POST', '/tasks', {
      task: 'Write a short report on Polaris, the North Star.',
      name: 'polaris report',
    });
    taskId = task.task_id as string;
    say(`task      ${task.task_id} "polaris report"\n`);
    const story = new Story();
    const spawned = new Set<string>();
    const consumed = new Set<string>();
    let ended = false;
    let lastSeq = 0;
    const take = (e: StoredEvent) => {
      if (e.seq <= lastSeq) return; // in the backlog and in a batch the subscription brought
      lastSeq = e.seq;
      for (const line of story.add(e)) say(line);
      if (e.event === 'agent_spawned') spawned.add(e.agent_id);
      if (e.event === 'terminate.consumed') consumed.add(e.agent_id);
      if (e.event === 'task_ended') ended = true;
      if (e.event === 'question_asked' && e.origin === 'root_review') {
        // The user at the gateway approves the root's hand-off.
        void api('POST', `/questions/${e.qid}/answer`, { answers: [{ selected_labels: ['Approve'], text: null }] });
      }
    };
    // Done when the task has ended and every agent's sentinel is consumed, as the durable
    // log says (the registry in memory can be a commit ahead of the disk).
    await new Promise<void>((resolve, reject) => {
      const log = server.services.registry.log;
      const check = () => {
        if (!ended || ![...spawned].every((id) => consumed.has(id))) return;
        unsubscribe();
        resolve();
      };
      // Subscribed first, then the backlog read from seq 0 in the same tick: every event is
      // either in the backlog or in a later batch (or both, which `take` skips).
      const unsubscribe = log.subscribe(task.task_id, (events) => {
        events.forEach(take);
        check();
      });
      log.read(task.task_id, 0, 100_000).forEach(take);
      check();
      options.signal?.addEventListener(
        'abort',
        () => {
          unsubscribe();
          reject(new DemoStopped());
        },
        { once: true },
      );
    });
    for (const line of story.end()) say(line);
    const events = server.services.registry.log.read(task.task_id, 0, 100_000);
    const detail = await api<{ stats: CostStats }>('GET', `/tasks/${task.task_id}`);
    say('\nsummary');
    for (const line of summaryLines(events, detail.stats)) say(line);
    finished = true;
    return { taskId: task.task_id, home, events };
  } finally {
    spawner.kill('SIGTERM');
    await server.close();
    if (!options.keepHome) rmSync(home, { recursive: true, force: true });
    if (finished) {
      say('');
      for (const line of nextLines({ home, kept: options.keepHome === true, taskId: taskId! })) say(line);
    } else if (options.keepHome) say(`home kept: ${home}`);
  }
}

/** The run was stopped before the task ended (Ctrl-C). */
export class DemoStopped extends Error {
  constructor() {
    super('the demo was stopped before the task ended');
  }
}

export interface DemoFlags {
  chaos: boolean;
  keep: boolean;
  slow: boolean;
  seed: number | undefined;
}

/** `--chaos`, `--keep`, `--slow` and `--seed N`, each on its own or together. */
export function parseDemoFlags(argv: readonly string[]): DemoFlags {
  const flags: DemoFlags = { chaos: false, keep: false, slow: false, seed: undefined };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--chaos') flags.chaos = true;
    else if (arg === '--keep') flags.keep = true;
    else if (arg === '--slow') flags.slow = true;
    else if (arg === '--seed' || arg.startsWith('--seed=')) {
      const value = arg === '--seed' ? argv[++i] : arg.slice('--seed='.length);
      const seed = Number(value);
      if (!Number.isInteger(seed) || seed < 0)
        throw new Error(`--seed needs a whole number (got ${value ?? 'nothing'})`);
      flags.seed = seed;
    } else throw new Error(`unknown flag ${arg}; usage: npm run demo -- [--chaos] [--keep] [--slow] [--seed N]`);
  }
  if (flags.seed !== undefined && !flags.chaos)
    throw new Error('--seed replays a chaos run: give --chaos too (the plain demo draws nothing at random)');
  return flags;
}

/** How long a scripted agent waits before each step with --slow: slow enough to follow in the dashboard. */
const SLOW_STEP_MS = 1_500;

if (import.meta.url === `file://${process.argv[1]}`) {
  let flags: DemoFlags;
  try {
    flags = parseDemoFlags(process.argv.slice(2));
  } catch (err) {
    console.error((err as Error).message);
    process.exit(2);
  }
  const stepDelayMs = flags.slow ? SLOW_STEP_MS : 0;
  const run = flags.chaos
    ? import('./chaos-demo.js').then(({ runChaosDemo }) =>
        runChaosDemo({
          keepHome: flags.keep,
          stepDelayMs,
          ...(flags.seed === undefined ? {} : { seed: flags.seed }),
        }).then((r) => {
          if (r.error || r.stuck.length > 0 || r.leftovers.length > 0) process.exitCode = 1;
        }),
      )
    : runPlain(flags.keep, stepDelayMs);
  run.catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}

/** The plain demo; Ctrl-C (or SIGTERM) stops it cleanly: no spawner, agent or scratch home left behind. */
async function runPlain(keepHome: boolean, stepDelayMs: number): Promise<void> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await runDemo({ keepHome, stepDelayMs, signal: stop.signal });
  } catch (err) {
    if (!(err instanceof DemoStopped)) throw err;
    console.log(`\nstopped: ${err.message}`);
    process.exitCode = 130;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
