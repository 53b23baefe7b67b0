import type { EventDraft } from '../events/catalogue.js';
import { directChildren } from '../registry/queries.js';
import {
  BEIDOU,
  USER,
  type AgentRecord,
  type PendingHandoff,
  type QuestionRecord,
  type RegistryState,
  type TaskRecord,
} from '../registry/state.js';
import type { DomainContext } from './context.js';
import { headerName } from './envelope.js';
import { inboxPosted } from './messages.js';
import { idleEscalation, reviewEscalation } from './system-questions.js';

/**
 * The watchdog's decisions, one agent at a time (runtime/watchdog.ts runs them on a timer,
 * committing each before it decides the next, so each sees what the last one did). Pass A: a review or termination request pending past the ping
 * interval pings the leader, twice, then escalates to the user, then stays silent. Pass B:
 * a leader (or the root) idle past the nudge time — its whole subtree idle, no tool in
 * flight, no hand-off of its own pending, no question pending through it — is nudged the
 * same way. Progress (pings, nudges, escalations) is in events, so a restart resumes each
 * ladder instead of starting it over. docs/architecture.md says why each rule is there.
 */

/** Pings (pass A) or nudges (pass B) before the third strike escalates to the user. */
const PINGS_BEFORE_ESCALATION = 3;

/** Tool calls in flight and the last call of each agent (runtime only, not in events). */
export interface ActivityView {
  busy(agentId: string): boolean;
  lastCallAt(agentId: string): number;
}

/** The agents of a task a pass looks at: those not on their way out. */
export function liveAgents(state: RegistryState, task: TaskRecord): AgentRecord[] {
  const out: AgentRecord[] = [];
  for (const id of task.agent_ids) {
    const a = state.agents.get(id);
    if (a && !a.terminate_posted) out.push(a);
  }
  return out;
}

/**
 * Pass A for one child and one kind of hand-off: a ping to its leader, the escalation to
 * the user on the third strike, or nothing (null).
 */
export function reviewPing(
  ctx: DomainContext,
  child: AgentRecord,
  pending: 'review' | 'termination',
  now: number,
): EventDraft[] | null {
  const { state, config } = ctx;
  if (child.leader_id === USER) return null; // the root's hand-offs went to the gateway directly
  const leader = state.agents.get(child.leader_id);
  if (!leader || leader.terminate_posted) return null;
  const handoff: PendingHandoff | null = pending === 'review' ? child.review : child.termination_request;
  if (!handoff || handoff.escalated) return null;
  if (now - handoff.last_ping_at < config.reviewPingS) return null;
  if (handoff.pings + 1 >= PINGS_BEFORE_ESCALATION)
    return reviewEscalation(ctx, child, leader, pending, now - handoff.since);
  const what = pending === 'review' ? 'signalled review' : 'requested termination';
  return [
    inboxPosted(
      ctx,
      leader,
      BEIDOU,
      'system',
      `[REVIEW PENDING] ${headerName(child.name)} (${headerName(child.agent_id)}) ${what} ${Math.round(now - handoff.since)} s ago and is waiting on you. Approve with terminate_child or send rework with send_message (list_pending_reviews shows every pending hand-off).`,
    ),
    {
      event: 'completion.reping',
      task_id: child.task_id,
      agent_id: child.agent_id,
      leader_id: leader.agent_id,
      ping_count: handoff.pings + 1,
      pending,
    },
  ];
}

/** The task's pending questions, which pass B reads once per pass. */
export function pendingQuestions(state: RegistryState, task: TaskRecord): QuestionRecord[] {
  return task.question_ids
    .map((id) => state.questions.get(id))
    .filter((q) => q?.status === 'pending') as QuestionRecord[];
}

/** Pass B for one agent: a nudge, the escalation to the user on the third strike, or nothing (null). */
export function idleNudge(
  ctx: DomainContext,
  agent: AgentRecord,
  questions: readonly QuestionRecord[],
  now: number,
  activity: ActivityView,
): EventDraft[] | null {
  const { state, config } = ctx;
  const isRoot = agent.leader_id === USER;
  const children = directChildren(state, agent).filter((c) => !c.terminate_consumed);
  if (!isRoot && children.length === 0) return null;
  if (!agent.started) return null; // queued for a spawner that has not started it: nothing to nudge yet
  if (agent.review || agent.termination_request) return null;
  // A child's hand-off waiting on this leader is pass A's to chase, not a second ladder.
  if (children.some((c) => c.review || c.termination_request)) return null;
  // A tool call since the last nudge is activity too (read-only calls leave no event).
  const calledSinceNudge = activity.lastCallAt(agent.agent_id) > (agent.last_nudge_at ?? 0);
  const nudges = calledSinceNudge ? 0 : agent.nudges;
  if (agent.nudge_escalated && !calledSinceNudge) return null;
  if (questions.some((q) => q.asker === agent.agent_id || q.chain.includes(agent.agent_id))) return null;
  const team = subtree(state, agent);
  // A tool in flight: an MCP call to us, or one its process runs (drained, unfinished).
  if (team.some((a) => activity.busy(a.agent_id) || a.open_tool_uses.size > 0)) return null;
  // A leader waiting on children that are still working is not idle.
  const lastActive = Math.max(...team.map((a) => Math.max(a.last_activity_at, activity.lastCallAt(a.agent_id))));
  const since = Math.max(lastActive, agent.last_nudge_at ?? 0);
  if (now - since < config.idleNudgeS) return null;
  const idleS = now - lastActive;
  if (nudges + 1 >= PINGS_BEFORE_ESCALATION) return idleEscalation(ctx, agent, idleS);
  return [
    inboxPosted(
      ctx,
      agent,
      BEIDOU,
      'system',
      `[LIVENESS] You and your team have been idle for ${Math.round(idleS)} s. Check list_pending_reviews and list_ready, answer what waits on you, or hand your work up with signal_review.`,
    ),
    {
      event: 'liveness.nudge',
      task_id: agent.task_id,
      agent_id: agent.agent_id,
      nudge_count: nudges + 1,
      idle_s: idleS,
    },
  ];
}

/** The agent and every live agent below it. */
function subtree(state: RegistryState, root: AgentRecord): AgentRecord[] {
  const out: AgentRecord[] = [];
  const visit = (a: AgentRecord) => {
    out.push(a);
    for (const c of directChildren(state, a)) if (!c.terminate_consumed) visit(c);
  };
  visit(root);
  return out;
}
