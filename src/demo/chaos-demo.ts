import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PACKAGE_ROOT } from '../util/version.js';
import { seeded } from './chaos-processes.js';
import { recoveryLines } from './chaos-report.js';
import type { StoredEvent } from '../events/catalogue.js';
import { planFaults } from './chaos-faults.js';
import { runTeam, type TeamRunResult } from './chaos.js';
import { Story } from './story.js';
import { nextLines, watchLines } from './where.js';

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
export async function runChaosDemo(
  options: ChaosDemoOptions = {},
): Promise<TeamRunResult & { home: string; seed: number }> {
  const say = (line: string) => options.quiet || process.stdout.write(`${line}\n`);
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  const random = seeded(seed);
  const slow = (options.stepDelayMs ?? 0) > 0;
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-demo-'));
  say(`chaos    seed ${seed} (run it again with --seed ${seed}); home ${home}`);
  const faults = planFaults(random, ['server', 'spawner', 'agent', 'agent'], slow ? 3_000 : 500, slow ? 10_000 : 2_000);
  const names = new Map<string, string>();
  // The plain demo's story, with the relaunches and losses this run is about.
  const story = new Story({ alsoTell: ['agent_started', 'agent_completed'] });
  let taskId: string | null = null;
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
      onStart: ({ url, taskId: id }) => {
        taskId = id;
        say(`server    ${url} (a child process, killed and restarted on this port)`);
        if (slow)
          for (const line of watchLines(url, readFileSync(path.join(home, 'admin.token'), 'utf8').trim())) say(line);
        say(`task      ${id}\n`);
      },
      onEvent: (e) => {
        if (e.event === 'agent_spawned') names.set(e.agent_id, e.name);
        for (const line of story.add(e as unknown as StoredEvent)) say(line);
      },
      onFault: (f) => say(`${clock(f.atMs)}  *** kill ${f.target} (pid ${f.pid}) with SIGKILL`),
    });
    for (const line of story.end()) say(line);
    say('\nwhat was killed, and how each part recovered:');
    for (const line of recoveryLines(result)) say(`  ${line}`);
    const ended = result.events.find((e) => e.event === 'task_ended');
    say(
      `\ntask ${result.taskId}: ${ended ? `${ended.status} (${ended.reason})` : 'not ended'} after ${(result.durationMs / 1000).toFixed(1)} s and ${result.events.length} events`,
    );
    if (result.error) say(`  ${result.error}`);
    for (const s of result.stuck) say(`  stuck: ${s}`);
    for (const p of result.leftovers)
      say(`  left running after the end: ${names.get(p.agentId) ?? p.agentId} (pid ${p.pid})`);
    for (const q of result.unexpectedQuestions)
      say(`  a question reached the user unanswered: ${q.qid} ${q.origin} ${q.prompt}`);
    return { ...result, home, seed };
  } finally {
    if (!options.keepHome) rmSync(home, { recursive: true, force: true });
    if (taskId) {
      say('');
      for (const line of nextLines({ home, kept: options.keepHome === true, taskId, chaos: true })) say(line);
    }
  }
}

function clock(ms: number): string {
  return `+${(ms / 1000).toFixed(1)}s`.padStart(7);
}
