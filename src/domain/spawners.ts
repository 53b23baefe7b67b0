import type { EventDraft } from '../events/catalogue.js';
import { BEIDOU, USER, type AgentRecord, type RegistryState } from '../registry/state.js';
import type { DomainContext } from './context.js';
import { headerName } from './envelope.js';
import { inboxPosted } from './messages.js';
import { agentFailureQuestion } from './system-questions.js';

/**
 * What the server decides when a spawner reports: which agents it runs is in events
 * (`launch.assigned`, `agent_started`, `agent_completed`, `spawner.lost`), so a restarted
 * server knows it. docs/spawner-protocol.md has the protocol these answer.
 */

/** A spawner spoke for an agent it does not run (or may no longer start): 409 `not_your_agent`. */
export class NotYourAgent extends Error {
  constructor(
    readonly agentId: string,
    why = 'is not assigned to this spawner',
  ) {
    super(`agent ${agentId} ${why}`);
  }
}

export function agentsOf(state: RegistryState, spawnerId: string): AgentRecord[] {
  const out: AgentRecord[] = [];
  for (const a of state.agents.values()) if (a.spawner_id === spawnerId) out.push(a);
  return out;
}

export function ownAgent(state: RegistryState, spawnerId: string, agentId: string): AgentRecord {
  const agent = state.agents.get(agentId);
  if (!agent || agent.spawner_id !== spawnerId) throw new NotYourAgent(agentId);
  return agent;
}

/** A queued launch the scheduler may give to a spawner now. */
export function schedulable(state: RegistryState, a: AgentRecord): boolean {
  if (!a.launch || a.spawner_id || a.terminate_posted) return false;
  if (state.tasks.get(a.task_id)?.status !== 'running') return false;
  return !a.parked || a.inbox.size > 0;
}

/** Whether a launch continues the agent's session: it ran before and has one (a second crash strike forgets it). */
export function resumable(agent: AgentRecord): boolean {
  return agent.started && agent.session_id !== null;
}

export function launchAssigned(agent: AgentRecord, spawnerId: string): EventDraft {
  const resume = resumable(agent);
  return {
    event: 'launch.assigned',
    task_id: agent.task_id,
    agent_id: agent.agent_id,
    spawner_id: spawnerId,
    resume,
    session_id: resume ? agent.session_id : null,
  };
}

/**
 * A spawner that missed three heartbeats loses its agents (another resumes them). A
 * sentinel it never acknowledged is consumed now: nobody runs that agent any more.
 */
export function spawnerLost(state: RegistryState, spawnerId: string): EventDraft[] {
  const byTask = new Map<string, AgentRecord[]>();
  for (const a of agentsOf(state, spawnerId)) byTask.set(a.task_id, [...(byTask.get(a.task_id) ?? []), a]);
  const drafts: EventDraft[] = [];
  for (const [taskId, agents] of byTask) {
    drafts.push({
      event: 'spawner.lost',
      task_id: taskId,
      spawner_id: spawnerId,
      agent_ids: agents.map((a) => a.agent_id),
    });
    for (const a of agents) {
      if (a.terminate_posted && !a.terminate_consumed)
        drafts.push({ event: 'terminate.consumed', task_id: taskId, agent_id: a.agent_id, via: 'server' });
    }
  }
  return drafts;
}

/** The spawner started the agent's process; refused for an agent being terminated (end it instead). */
export function agentStarted(
  state: RegistryState,
  spawnerId: string,
  agentId: string,
  sessionId: string | null,
  resumed: boolean,
): EventDraft[] {
  const agent = ownAgent(state, spawnerId, agentId);
  if (agent.terminate_posted) throw new NotYourAgent(agentId, 'is being terminated; end its process');
  return [
    {
      event: 'agent_started',
      task_id: agent.task_id,
      agent_id: agentId,
      team_id: agent.team_id,
      role: agent.role,
      name: agent.name,
      template: agent.skill,
      model_requested: agent.launch?.model ?? agent.model,
      session_id: sessionId,
      resumed,
      spawner_id: spawnerId,
    },
  ];
}

/** The spawner ended the agent's process after a terminate command (a repeated ack is nothing). */
export function terminationAcknowledged(state: RegistryState, spawnerId: string, agentId: string): EventDraft[] {
  if (state.agents.get(agentId)?.terminate_consumed) return [];
  const agent = ownAgent(state, spawnerId, agentId);
  const drafts: EventDraft[] = [
    { event: 'terminate.consumed', task_id: agent.task_id, agent_id: agentId, via: 'spawner' },
  ];
  if (agent.running)
    drafts.unshift({
      event: 'agent_completed',
      task_id: agent.task_id,
      agent_id: agentId,
      terminated: true,
      stop_reason: 'end_turn',
    });
  return drafts;
}

/**
 * Drained events, validated. An escalation (the spawner gave up on the agent) is answered
 * in the same commit: a message to the leader, or for the root a question to the user.
 * Nobody needs telling that an agent already being terminated has stopped.
 */
export function spawnerReport(
  ctx: DomainContext,
  spawnerId: string,
  agentId: string,
  drafts: EventDraft[],
): EventDraft[] {
  const agent = ownAgent(ctx.state, spawnerId, agentId);
  if (agent.terminate_posted) return drafts;
  const escalations = drafts.flatMap((d) =>
    d.event === 'agent_completed' &&
    (d.stop_reason === 'crash_escalated' || d.stop_reason === 'contract_violation_escalated')
      ? agentDown(
          ctx,
          agent,
          d.stop_reason === 'crash_escalated'
            ? 'it crashed three times in a row'
            : 'it exited on its own three times in a row',
        )
      : [],
  );
  return [...drafts, ...escalations];
}

function agentDown(ctx: DomainContext, agent: AgentRecord, what: string): EventDraft[] {
  if (agent.leader_id === USER) return agentFailureQuestion(ctx, agent, what);
  return [
    inboxPosted(
      ctx,
      { agent_id: agent.leader_id, task_id: agent.task_id },
      BEIDOU,
      'system',
      `[AGENT DOWN] ${headerName(agent.name)} (${headerName(agent.agent_id)}) stopped: ${what}. It will not be restarted on its own. Message it to have it resumed, or end it with terminate_child (force: true).`,
    ),
  ];
}

/** The highest spool sequence committed for a spawner (0: none yet). */
export function spoolHighWater(state: RegistryState, spawnerId: string): number {
  return state.spool_hwm.get(spawnerId) ?? 0;
}

/**
 * The mark committed with a report sent from a spawner's spool (in the same commit, so the
 * report and its mark cannot be separated by a crash); nothing for an unknown agent, whose
 * report is refused anyway.
 */
export function spooledMark(
  state: RegistryState,
  spawnerId: string,
  agentId: string,
  seq: number | null,
): EventDraft[] {
  const agent = state.agents.get(agentId);
  if (seq === null || !agent) return [];
  return [{ event: 'spawner.spooled', task_id: agent.task_id, spawner_id: spawnerId, spool_seq: seq }];
}
