import type { EventDraft } from '../events/catalogue.js';
import { activePlan, childrenPendingReview } from '../registry/queries.js';
import { USER, type AgentRecord } from '../registry/state.js';
import { terminationDrafts } from './termination.js';
import type { DomainContext } from './context.js';
import { envelope, headerName, REVIEW_TAGS } from './envelope.js';
import { DomainError } from './errors.js';
import { assertContentSize } from './limits.js';
import { pendingReports, toLeaderDraft, withdrawnDrafts } from './messages.js';
import { planOutcomeDrafts } from './plans.js';
import { rootReviewQuestion, rootTerminationQuestion } from './system-questions.js';

/**
 * Hand-offs and their review: `signal_review` and `request_termination` hand work up;
 * `terminate_child` approves (or forces); a message from the leader is rework (see
 * messages.ts). While a direct child's review waits, the review gate keeps its leader to
 * reviewing, messaging, reading and answering.
 */

/** A closed review gate: the audit event to commit, and who waits (for the refusal's words). */
export interface ClosedGate {
  drafts: EventDraft[];
  pendingChildIds: string[];
  /** `name (id), … signalled review and waits on you` */
  waiting: string;
}

/**
 * The review gate, for one tool an agent is about to use (a Beidou tool not allowed during
 * a review, or one of Claude Code's own outside the reading set): null while it is open.
 */
export function reviewGate(
  ctx: Pick<DomainContext, 'state'>,
  caller: AgentRecord,
  toolName: string,
): ClosedGate | null {
  const pending = childrenPendingReview(ctx.state, caller);
  if (pending.length === 0) return null;
  const pendingChildIds = pending.map((c) => c.agent_id);
  return {
    drafts: [
      {
        event: 'review_gate.denied',
        task_id: caller.task_id,
        caller_id: caller.agent_id,
        tool_name: toolName,
        pending_child_ids: pendingChildIds,
      },
    ],
    pendingChildIds,
    waiting: `${pending.map((c) => `${c.name} (${c.agent_id})`).join(', ')} signalled review and waits on you`,
  };
}

/** The closed gate as a tool error, naming the two ways out. */
export function reviewGateError(gate: ClosedGate, toolName: string): DomainError {
  return new DomainError(
    'review_gate_blocked',
    `${gate.waiting}. First approve with terminate_child or send rework with send_message; until then only reading, messaging, reviewing and answering questions are allowed`,
    { pending_child_ids: gate.pendingChildIds, tool: toolName, ways_out: ['terminate_child', 'send_message'] },
  );
}

const ENVELOPES = REVIEW_TAGS.map((tag) => tag.toLowerCase());

/**
 * `signal_review`: the report to the leader's inbox, or for the root, a question to the user.
 * A report of the caller's still waiting in the leader's inbox is withdrawn in the same
 * commit (`undelivered`: the message ids no delivery has in hand, see `pendingReports`).
 */
export function signalReview(
  ctx: DomainContext,
  caller: AgentRecord,
  detail: string,
  undelivered?: ReadonlySet<string>,
): EventDraft[] {
  assertContentSize(ctx.config, 'detail', detail);
  if (detail.trim().length === 0) {
    throw new DomainError('envelope_missing', 'detail is empty; write a report starting with [REVIEW REQUIRED]', {
      reason: 'detail_empty',
    });
  }
  const lower = detail.toLowerCase();
  if (!ENVELOPES.some((marker) => lower.includes(marker))) {
    throw new DomainError(
      'envelope_missing',
      "detail lacks the [REVIEW REQUIRED] (or [ITERATION READY]) envelope; add it with your deliverables, open questions and the leader's options",
      { reason: 'envelope_missing' },
    );
  }
  const team = caller.team_id ? ctx.state.teams.get(caller.team_id) : undefined;
  const allDone = team
    ? team.member_ids.every((id) => {
        if (id === caller.agent_id) return true;
        const m = ctx.state.agents.get(id);
        return !m || m.terminate_consumed || m.review !== null || m.termination_request !== null;
      })
    : null;
  // In the same commit: the report to the leader (replacing an undelivered earlier one), or the root's question to the user.
  let handOver: EventDraft[];
  if (caller.leader_id === USER) handOver = rootReviewQuestion(ctx, caller, detail);
  else {
    const replaced = pendingReports(ctx.state, caller, undelivered);
    const report = toLeaderDraft(ctx, caller, 'review_report', detail, replaced);
    handOver = [...withdrawnDrafts({ agent_id: caller.leader_id, task_id: caller.task_id }, replaced), report];
  }
  return [
    { event: 'status', task_id: caller.task_id, agent_id: caller.agent_id, state: 'review_pending', detail },
    {
      event: 'liveness_check',
      task_id: caller.task_id,
      agent_id: caller.agent_id,
      team_id: caller.team_id,
      all_done: allDone,
    },
    ...handOver,
  ];
}

/** `request_termination`: refused while the caller's own plan has unfinished tasks. */
export function requestTermination(ctx: DomainContext, caller: AgentRecord, detail: string): EventDraft[] {
  assertContentSize(ctx.config, 'detail', detail);
  const plan = activePlan(ctx.state, caller);
  if (plan) {
    const unfinished = [...plan.tasks.values()].filter((t) => t.status !== 'done' && t.status !== 'failed');
    if (unfinished.length > 0) {
      throw new DomainError(
        'plan_incomplete',
        `your plan still has unfinished tasks: ${unfinished.map((t) => `${t.id} (${t.status})`).join(', ')}`,
        {
          plan_id: plan.plan_id,
          unfinished: unfinished.map((t) => ({ task_id: t.id, status: t.status })),
        },
      );
    }
  }
  const drafts: EventDraft[] = [
    { event: 'status', task_id: caller.task_id, agent_id: caller.agent_id, state: 'termination_requested', detail },
  ];
  if (caller.leader_id === USER) return [...drafts, ...rootTerminationQuestion(ctx, caller, detail)];
  const content = envelope(
    `[TERMINATION REQUESTED] ${headerName(caller.name)} (${headerName(caller.agent_id)}) reports its work complete and asks to be terminated (terminate_child to accept, send_message to reject).`,
    detail,
    { block: true },
  );
  return [...drafts, toLeaderDraft(ctx, caller, 'termination_request', content)];
}

/**
 * `terminate_child`: approval of a pending hand-off (its plan task done, dependents ready),
 * or with `force` an end without one (its plan task failed); either way the cascade.
 */
export function terminateChild(
  ctx: DomainContext,
  caller: AgentRecord,
  targetId: string,
  force: boolean,
): EventDraft[] {
  const { state } = ctx;
  const target = state.agents.get(targetId);
  if (!target || target.task_id !== caller.task_id) {
    throw new DomainError('unknown_agent', `no agent ${targetId} in your task; use list_peers with scope "children"`, {
      agent_id: targetId,
    });
  }
  const team = target.team_id ? state.teams.get(target.team_id) : undefined;
  if (!team || team.leader_id !== caller.agent_id || target.agent_id === caller.agent_id) {
    throw new DomainError('not_leader', `you do not lead ${target.name}'s team; only its own leader may terminate it`, {
      agent_id: targetId,
      leader_id: team?.leader_id ?? target.leader_id,
    });
  }
  if (target.terminate_posted) {
    throw new DomainError(
      'already_terminating',
      `${target.name} is already ${target.terminate_consumed ? 'terminated' : 'terminating'}; nothing to do`,
      {
        agent_id: targetId,
      },
    );
  }
  const pending = target.review !== null || target.termination_request !== null;
  if (!pending && !force) {
    throw new DomainError(
      'child_not_pending_review',
      `${target.name} has not signalled review; wait for its signal_review, send rework with send_message, or pass force: true`,
      { agent_id: targetId },
    );
  }
  const drafts: EventDraft[] = pending
    ? [
        { event: 'completion.approved', task_id: caller.task_id, agent_id: targetId, leader_id: caller.agent_id },
        ...planOutcomeDrafts(state, target, 'done', 'approved'),
      ]
    : [
        {
          event: 'terminate.forced',
          task_id: caller.task_id,
          caller_id: caller.agent_id,
          agent_id: targetId,
          team_id: target.team_id,
          reason: 'leader_force',
        },
        ...planOutcomeDrafts(state, target, 'failed', 'leader_force'),
      ];
  return [...drafts, ...terminationDrafts(state, caller.agent_id, target, pending ? 'leader' : 'leader_force')];
}
