import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import type { StoredEvent } from '../events/catalogue.js';
import { loadConfig } from '../config.js';
import { startServer } from '../server/server.js';
import { PACKAGE_ROOT } from '../util/version.js';

/**
 * `npm run demo`: a server and a spawner (command adapter) on a temp home run a three-agent
 * task with scripted agents to completion — plan, spawn, messages, a question answered by a
 * leader, reviews with a rework, approval, the user's final Approve and the cascade — then
 * print what happened, from the event log.
 */
export async function runDemo(options: { quiet?: boolean; keepHome?: boolean; stepDelayMs?: number } = {}): Promise<{ taskId: string; home: string; events: StoredEvent[] }> {
  const say = (line: string) => options.quiet || process.stdout.write(line + '\n');
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-demo-'));
  const server = await startServer(loadConfig({ port: '0', home }, { BEIDOU_SPAWNER_HEARTBEAT_S: '1' }), { logger: pino({ level: 'warn' }) });
  say(`server   ${server.url} (home ${home})`);
  if (options.stepDelayMs) say(`dashboard ${server.url}/ with the admin token ${server.adminToken}`);
  const api = async (method: string, route: string, body?: unknown) => {
    const res = await fetch(`${server.url}/api${route}`, {
      method,
      headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<any>;
  };
  const { token } = await api('POST', '/spawner-tokens', {});
  const agentCmd = `"${process.execPath}" "${path.join(PACKAGE_ROOT, 'examples', 'scripted-agent.mjs')}"`;
  const spawner = spawn(
    process.execPath,
    [path.join(PACKAGE_ROOT, 'dist', 'cli', 'main.js'), 'spawner', '--server', server.url, '--token', token, '--adapter', 'command', '--command', agentCmd, '--workdir', path.join(home, 'agents'), '--spool-dir', path.join(home, 'spool')],
    {
      env: {
        ...process.env,
        BEIDOU_SCRIPT: path.join(PACKAGE_ROOT, 'examples', 'demo-script.json'),
        BEIDOU_LOG_LEVEL: 'warn',
        ...(options.stepDelayMs ? { BEIDOU_SCRIPT_DELAY_MS: String(options.stepDelayMs) } : {}),
      },
      stdio: ['ignore', options.quiet ? 'ignore' : 'inherit', 'inherit'],
    },
  );
  try {
    const task = await api('POST', '/tasks', { task: 'Write a short report on Polaris, the North Star.', name: 'polaris report' });
    say(`task     ${task.task_id} (root ${task.root_agent_id})\n`);
    // Done when the task has ended and every agent's sentinel is consumed, as the durable
    // log says (the registry in memory can be a commit ahead of the disk).
    // The root was spawned before this subscription began: count it from the start.
    const spawned = new Set<string>([task.root_agent_id]);
    const consumed = new Set<string>();
    let ended = false;
    await new Promise<void>((resolve) => {
      const unsubscribe = server.services.registry.log.subscribe(task.task_id, (events) => {
        for (const e of events) {
          if (!options.quiet) say(`  ${String(e.seq).padStart(3)}  ${e.event}${describe(e)}`);
          if (e.event === 'agent_spawned') spawned.add(e.agent_id);
          if (e.event === 'terminate.consumed') consumed.add(e.agent_id);
          if (e.event === 'task_ended') ended = true;
          if (e.event === 'question_asked' && e.origin === 'root_review') {
            // The user at the gateway approves the root's hand-off.
            void api('POST', `/questions/${e.qid}/answer`, { answers: [{ selected_labels: ['Approve'], text: null }] });
          }
        }
        if (ended && [...spawned].every((id) => consumed.has(id))) {
          unsubscribe();
          resolve();
        }
      });
    });
    const events = server.services.registry.log.read(task.task_id, 0, 100_000);
    if (!options.quiet) summary(events, await api('GET', `/tasks/${task.task_id}`));
    return { taskId: task.task_id, home, events };
  } finally {
    spawner.kill('SIGTERM');
    await server.close();
    if (options.keepHome) say(`home kept: ${home}`);
    else rmSync(home, { recursive: true, force: true });
  }
}

function describe(e: StoredEvent): string {
  const f = e as unknown as Record<string, unknown>;
  const bits = ['agent_id', 'caller_id', 'to', 'plan_task_id', 'qid', 'state', 'reason', 'status', 'decision']
    .filter((k) => typeof f[k] === 'string')
    .map((k) => `${k}=${String(f[k])}`);
  return bits.length ? `  ${bits.join(' ')}` : '';
}

function summary(events: StoredEvent[], detail: any): void {
  const counts = new Map<string, number>();
  for (const e of events) counts.set(e.event, (counts.get(e.event) ?? 0) + 1);
  console.log(`\nsummary of task ${detail.task.task_id}: ${detail.task.status} after ${events.length} events`);
  for (const a of detail.agents) console.log(`  agent ${a.name.padEnd(18)} ${a.status.padEnd(11)} sent ${a.messages_sent}, received ${a.messages_delivered}`);
  const pick = ['plan_declared', 'agent_spawned', 'agent_started', 'send_message', 'inbox.posted', 'agent_input', 'question_asked', 'question_answered', 'status', 'review.acknowledged', 'completion.approved', 'task_done', 'task_ready', 'completion.reported', 'terminate.consumed'];
  console.log('  ' + pick.map((p) => `${p} ${counts.get(p) ?? 0}`).join(', '));
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
      if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed needs a whole number (got ${value ?? 'nothing'})`);
      flags.seed = seed;
    } else throw new Error(`unknown flag ${arg}; usage: npm run demo -- [--chaos] [--keep] [--slow] [--seed N]`);
  }
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
        runChaosDemo({ keepHome: flags.keep, stepDelayMs, ...(flags.seed === undefined ? {} : { seed: flags.seed }) }).then((r) => {
          if (r.error || r.stuck.length > 0 || r.leftovers.length > 0) process.exitCode = 1;
        }),
      )
    : runDemo({ keepHome: flags.keep, stepDelayMs });
  run.catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
