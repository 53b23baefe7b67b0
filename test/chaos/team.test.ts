import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { planFaults, type FaultPlan } from '../../src/demo/chaos-faults.js';
import { runTeam, type Answer, type Ev, type TeamRunResult } from '../../src/demo/chaos.js';
import { seeded } from '../../src/demo/chaos-processes.js';
import { removeHome, tempHome } from '../support/server.js';
import { deliveryFaults, planOutcome, questionFaults, taskFileSeqFaults } from '../support/team-checks.js';

/**
 * A scripted team (a root, two leaders, six workers; plans with dependencies; a question a
 * leader answers and one that climbs to the user; reviews, one of them reworked) runs through
 * two `beidou spawner`s with the command adapter, while the server, a spawner and several
 * agent processes are killed with SIGKILL at moments drawn from a seed. The task must end as
 * it does without faults, with every message delivered, every question answered once, no
 * agent `running` without a process, and every task file's `seq` gapless.
 */

const SCRIPT = path.resolve(import.meta.dirname, '../../examples/team-script.json');
const HEARTBEAT_S = 1;
const SEED = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));

/** The known outcome of examples/team-script.json: every plan task done, one rework. */
const EXPECTED_OUTCOME = {
  task: 'done:root_approved',
  plans: {
    root: { report: 'done', research: 'done' },
    alpha: { analyst: 'done', checker: 'done', scout: 'done' },
    beta: { drafter: 'done', editor: 'done', illustrator: 'done' },
  },
  roles: ['alpha', 'analyst', 'beta', 'checker', 'drafter', 'editor', 'illustrator', 'root', 'scout'],
  approvals: 8,
  reworks: 1,
  answers: ['Publish:user', 'Units:alpha'],
};

/** The user: says Yes to the analyst's question; nothing else of an agent's should reach it. */
function userAnswer(q: Ev): Answer[] | null {
  return q.questions?.[0]?.header === 'Publish' ? [{ selected_labels: ['Yes'], text: null }] : null;
}

describe('chaos: a scripted team under SIGKILL of the server, a spawner and agents', () => {
  const homes: string[] = [];
  beforeAll(() => {
    execFileSync('npx', ['tsc', '-b'], { cwd: path.resolve(import.meta.dirname, '../..'), stdio: 'inherit' });
  });
  afterAll(() => {
    for (const home of homes) removeHome(home);
  });

  const run = (
    faults: FaultPlan[],
    deadlineMs: number,
    random: () => number,
    agentEnv: Record<string, string> = {},
  ): Promise<TeamRunResult & { home: string }> => {
    const home = tempHome();
    homes.push(home);
    return runTeam({
      home,
      scriptFile: SCRIPT,
      task: 'Write a report on Polaris.',
      faults,
      random,
      heartbeatS: HEARTBEAT_S,
      deadlineMs,
      agentEnv,
      answer: userAnswer,
    }).then((r) => ({ ...r, home }));
  };

  it('runs to its known outcome without faults', { timeout: 60_000 }, async () => {
    const result = await run([], 45_000, seeded(1));
    expect(result.error, 'fault-free run').toBeNull();
    expect(planOutcome(result.events)).toEqual(EXPECTED_OUTCOME);
    expect(deliveryFaults(result)).toEqual([]);
    expect(questionFaults(result)).toEqual([]);
    expect(taskFileSeqFaults(result.home)).toEqual([]);
  });

  it('ends the same under faults, losing and doubling nothing, with nothing stuck', { timeout: 120_000 }, async () => {
    const random = seeded(SEED);
    const kinds = ['server', 'spawner', 'agent', 'agent', 'agent', 'outage+agent'] as const;
    const plan = planFaults(random, [...kinds], 400, 1_500);
    // Paced, so that the six faults land while agents are still at work (the harness also
    // holds the root's final approval until the last fault has landed).
    const result = await run(plan, 95_000, random, { BEIDOU_SCRIPT_DELAY_MS: '600' });
    const faults = result.faults.map((f) => `${f.kind}@${(f.atMs / 1000).toFixed(1)}s:${f.target}`).join(', ');
    const context = `CHAOS_SEED=${SEED} (faults: ${faults})`;
    console.log(`chaos-team ${context}; ${result.error ?? `done in ${result.durationMs} ms`}`);

    expect(result.faults.map((f) => f.kind).sort(), `${context}: every planned fault was injected`).toEqual(
      [...kinds].sort(),
    );
    expect(result.error, `${context}: ${unfinished(result)}; ${lastEvents(result.events)}`).toBeNull();
    expect(planOutcome(result.events), context).toEqual(EXPECTED_OUTCOME);
    expect(deliveryFaults(result), context).toEqual([]);
    expect(questionFaults(result), context).toEqual([]);
    expect(result.stuck, `${context}: agents running without a process`).toEqual([]);
    expect(result.leftovers, `${context}: agent processes left after the end`).toEqual([]);
    expect(taskFileSeqFaults(result.home), context).toEqual([]);
  });
});

/** The agents that had not ended, as the API showed them last. */
function unfinished(result: TeamRunResult): string {
  const open = result.agents.filter((a) => a.status !== 'terminated');
  return (
    'not ended: ' +
    open
      .map(
        (a) =>
          `${a.name} ${a.status} running=${a.running} inbox=${a.inbox_depth} review=${a.review ? 'pending' : 'none'}`,
      )
      .join('; ')
  );
}

function lastEvents(events: Ev[]): string {
  return (
    'last events: ' +
    events
      .slice(-25)
      .map((e) => `${e.seq}:${e.event}${e.agent_id ? `(${e.agent_id})` : ''}`)
      .join(' ')
  );
}
