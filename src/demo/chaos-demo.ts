import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PACKAGE_ROOT } from '../util/version.js';
import { seeded } from './chaos-processes.js';
import { recoveryLines } from './chaos-report.js';
import { planFaults, runTeam, type Ev, type TeamRunResult } from './chaos.js';

export interface ChaosDemoOptions {
  seed?: number;
  keepHome?: boolean;
  /** Milliseconds each scripted agent waits before each step (`--slow`). */
  stepDelayMs?: number;
  quiet?: boolean;
}

/**
 * `npm run demo -- --chaos`: the demo's task through a server and two spawners run as
 * processes, while the server, a spawner and two agents are killed with SIGKILL at seeded
 * moments; then what was killed, when, and how each part recovered, from the events.
 */
export async function runChaosDemo(options: ChaosDemoOptions = {}): Promise<TeamRunResult & { home: string; seed: number }> {
  const say = (line: string) => options.quiet || process.stdout.write(line + '\n');
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  const random = seeded(seed);
  const slow = (options.stepDelayMs ?? 0) > 0;
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-demo-'));
  say(`chaos    seed ${seed} (run it again with --seed ${seed}); home ${home}`);
  const faults = planFaults(random, ['server', 'spawner', 'agent', 'agent'], slow ? 3_000 : 500, slow ? 10_000 : 2_000);
  const names = new Map<string, string>();
  try {
    const result = await runTeam({
      home,
      scriptFile: path.join(PACKAGE_ROOT, 'examples', 'demo-script.json'),
      task: 'Write a short report on Polaris, the North Star.',
      faults,
      random,
      heartbeatS: 1,
      deadlineMs: slow ? 30 * 60_000 : 120_000,
      agentEnv: slow ? { BEIDOU_SCRIPT_DELAY_MS: String(options.stepDelayMs) } : {},
      answer: () => null,
      onStart: ({ url, taskId }) => {
        say(`server   ${url} (a child process, killed and restarted on this port)`);
        if (slow) say(`dashboard ${url}/ with the admin token in ${path.join(home, 'admin.token')}`);
        say(`task     ${taskId}\n`);
      },
      onEvent: (e, ms) => {
        if (e.event === 'agent_spawned') names.set(e.agent_id, e.name);
        if (e.event !== 'assistant_text') say(`  ${clock(ms)} ${String(e.seq).padStart(4)}  ${e.event}${describe(e, names)}`);
      },
      onFault: (f) => say(`  ${clock(f.atMs)}  *** kill ${f.target} (pid ${f.pid})`),
    });
    say('\nwhat was killed, and how each part recovered:');
    for (const line of recoveryLines(result)) say(`  ${line}`);
    const ended = result.events.find((e) => e.event === 'task_ended');
    say(`\ntask ${result.taskId}: ${ended ? `${ended.status} (${ended.reason})` : 'not ended'} after ${(result.durationMs / 1000).toFixed(1)} s and ${result.events.length} events`);
    if (result.error) say(`  ${result.error}`);
    for (const s of result.stuck) say(`  stuck: ${s}`);
    for (const p of result.leftovers) say(`  left running after the end: ${names.get(p.agentId) ?? p.agentId} (pid ${p.pid})`);
    for (const q of result.unexpectedQuestions) say(`  a question reached the user unanswered: ${q.qid} ${q.origin} ${q.prompt}`);
    return { ...result, home, seed };
  } finally {
    if (options.keepHome) say(`home kept: ${home} (beidou serve --home ${home} to look at it again)`);
    else rmSync(home, { recursive: true, force: true });
  }
}

function clock(ms: number): string {
  return `+${(ms / 1000).toFixed(1)}s`.padStart(7);
}

function describe(e: Ev, names: Map<string, string>): string {
  const bits = ['agent_id', 'caller_id', 'to', 'plan_task_id', 'qid', 'state', 'reason', 'status', 'msg', 'strike_count', 'resumed', 'spawner_id']
    .filter((k) => e[k] !== undefined && e[k] !== null && typeof e[k] !== 'object')
    .map((k) => `${k}=${typeof e[k] === 'string' ? (names.get(e[k]) ?? e[k]) : String(e[k])}`);
  return bits.length ? `  ${bits.join(' ')}` : '';
}
