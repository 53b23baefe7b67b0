import type { EventDraft } from '../events/catalogue.js';
import type { RunningAgent, StopCommand } from '../protocol/spawner.js';
import { USER, type AgentRecord } from '../registry/state.js';
import type { DomainContext } from './context.js';
import { spawnerTakes } from './revocation.js';
import { agentsOf, spawnerReport } from './spawners.js';

/**
 * Reconciliation (docs/spawner-protocol.md#reconciliation): what the server decides when a
 * spawner's heartbeat says which agent processes it really runs. Its registry may believe
 * otherwise after a restart, a reconnect, or reports that never arrived.
 */

/** Crash strikes after which the server stops relaunching an agent and escalates, as a spawner would. */
export const CRASH_STRIKES = 3;

export interface Reconciliation {
  /** One crash per agent believed running there that the spawner does not run, with any escalation. */
  drafts: EventDraft[];
  /** Agents whose crash goes back to this spawner as a launch (strikes 1 and 2; resumed or afresh by the state). */
  relaunch: string[];
  /** Processes the spawner runs for agents that are not its own (any more). */
  stop: Array<{ agent_id: string; reason: StopCommand['reason'] }>;
}

/**
 * `spawner`: its id and the tasks its token is limited to (null: any); `reported` is what it
 * runs; `startedAt(agent)` when this server recorded the agent's latest start (undefined:
 * before this server process), in clock seconds. An agent started less than one heartbeat
 * ago may be missing from a report sent just before its launch arrived: it is not absent
 * yet (the next report decides). An agent outside a limited spawner's tasks is answered as
 * one that does not exist: its report tells it nothing of other tasks.
 */
export function reconcile(
  ctx: DomainContext,
  { spawnerId, taskIds }: { spawnerId: string; taskIds: readonly string[] | null },
  reported: readonly RunningAgent[],
  now: number,
  startedAt: (agentId: string) => number | undefined,
): Reconciliation {
  const { state } = ctx;
  const out: Reconciliation = { drafts: [], relaunch: [], stop: [] };
  const runs = new Set(reported.map((r) => r.agent_id));
  for (const r of reported) {
    const agent = state.agents.get(r.agent_id);
    if (!agent || !spawnerTakes(taskIds, agent.task_id))
      out.stop.push({ agent_id: r.agent_id, reason: 'unknown_agent' });
    else if (agent.terminate_consumed) out.stop.push({ agent_id: r.agent_id, reason: 'terminated' });
    else if (agent.spawner_id !== spawnerId) out.stop.push({ agent_id: r.agent_id, reason: 'reassigned' });
  }
  const heartbeatS = ctx.config.spawnerHeartbeatS;
  for (const agent of agentsOf(state, spawnerId)) {
    // Not running yet (launched, `started` not in), or being terminated (its own flow ends it).
    if (!agent.running || agent.terminate_posted || runs.has(agent.agent_id)) continue;
    const since = startedAt(agent.agent_id);
    if (since !== undefined && now - since < heartbeatS) continue;
    const drafts = missingProcess(ctx, spawnerId, agent);
    out.drafts.push(...drafts);
    if (!drafts.some((d) => d.event === 'agent_completed' && d.stop_reason === 'crash_escalated'))
      out.relaunch.push(agent.agent_id);
  }
  return out;
}

/**
 * An agent believed running whose process is gone counts as a crash, under the spawner's
 * own policy: strikes 1 and 2 relaunch it (the reducer forgets the session at strike 2, so
 * that one starts afresh), strike 3 parks it and tells its leader (or the user, for the root).
 */
function missingProcess(ctx: DomainContext, spawnerId: string, agent: AgentRecord): EventDraft[] {
  const strike = agent.crash_strikes + 1;
  const base = { task_id: agent.task_id };
  const msg = 'its spawner no longer runs it (reconciliation)';
  const drafts: EventDraft[] = [
    {
      event: 'agent_crashed',
      ...base,
      caller_id: agent.agent_id,
      exception: 'ProcessMissing',
      msg,
      strike_count: strike,
      stderr: '',
    },
  ];
  if (strike < CRASH_STRIKES) {
    drafts.push({
      event: 'agent_completed',
      ...base,
      agent_id: agent.agent_id,
      terminated: false,
      stop_reason: 'crashed',
    });
    return drafts;
  }
  if (agent.leader_id === USER)
    drafts.push({
      event: 'root_crash_escalation',
      ...base,
      agent_id: agent.agent_id,
      crash_strikes: strike,
      stderr: '',
    });
  drafts.push({
    event: 'agent_completed',
    ...base,
    agent_id: agent.agent_id,
    terminated: false,
    stop_reason: 'crash_escalated',
  });
  // The same answer to an escalation as when a spawner reports one: [AGENT DOWN], or a question.
  return spawnerReport(ctx, spawnerId, agent.agent_id, drafts);
}
