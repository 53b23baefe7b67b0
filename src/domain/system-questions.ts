import type { EventDraft } from '../events/catalogue.js';
import { hasPendingSystemQuestion } from '../registry/queries.js';
import {
  BEIDOU,
  USER,
  type AgentRecord,
  type Answer,
  type QuestionItem,
  type QuestionOrigin,
  type QuestionRecord,
} from '../registry/state.js';
import { terminationDrafts } from './termination.js';
import { promptSummary } from './answers.js';
import type { DomainContext } from './context.js';
import { messageDrafts } from './messages.js';

/**
 * The server's own questions: the root's review and termination request, the watchdog's
 * escalations, an agent its spawner gave up on. They go straight to the user gateway with
 * `asker: "beidou"` and a subject agent, and each is committed together with what caused
 * it, so a crash cannot leave one without the other. Answering one applies its effect in
 * the same commit as the answer.
 */

function systemQuestion(
  ctx: DomainContext,
  origin: QuestionOrigin,
  subject: AgentRecord,
  questions: QuestionItem[],
  context: string | null,
  alongside: (qid: string) => EventDraft[] = () => [],
): EventDraft[] {
  const qid = ctx.ids.next('q');
  return [
    {
      event: 'question_asked',
      task_id: subject.task_id,
      qid,
      asker: BEIDOU,
      holder: null,
      prompt: promptSummary(questions),
      questions,
      context,
      origin,
      subject_agent_id: subject.agent_id,
    },
    ...alongside(qid),
  ];
}

/** A single free-text question whose answer is passed on to the subject as the user's words. */
function freeText(question: string, header: string): QuestionItem {
  return { question, header, multiSelect: false, options: [] };
}

function approveOrRework(question: string): QuestionItem {
  return {
    question,
    header: 'Root review',
    multiSelect: false,
    options: [
      {
        label: 'Approve',
        description: 'Accept the work: the root and every agent under it are terminated and the task is done.',
        value: 'approve',
      },
      {
        label: 'Rework',
        description: 'Send it back with your instructions (type them in the text).',
        value: 'rework',
        requires_text: true,
      },
    ],
  };
}

/** The root's signal_review becomes an Approve / Rework question at the gateway (one at a time). */
export function rootReviewQuestion(ctx: DomainContext, root: AgentRecord, detail: string): EventDraft[] {
  if (hasPendingSystemQuestion(ctx.state, 'root_review', root.agent_id)) return [];
  return systemQuestion(
    ctx,
    'root_review',
    root,
    [approveOrRework(`The root agent ${root.name} reports its work ready for review:\n\n${detail}`)],
    detail,
  );
}

/** The root's request_termination, likewise. */
export function rootTerminationQuestion(ctx: DomainContext, root: AgentRecord, detail: string): EventDraft[] {
  if (hasPendingSystemQuestion(ctx.state, 'root_termination', root.agent_id)) return [];
  const text = `The root agent ${root.name} reports the task complete and asks to end it.${detail ? `\n\n${detail}` : ''}`;
  return systemQuestion(ctx, 'root_termination', root, [approveOrRework(text)], detail || null);
}

/** Watchdog pass A, third strike: a review its leader does not answer goes to the user. */
export function reviewEscalation(
  ctx: DomainContext,
  child: AgentRecord,
  leader: AgentRecord,
  pending: 'review' | 'termination',
  ageS: number,
): EventDraft[] {
  const what = pending === 'review' ? 'review of its hand-off' : 'decision on its termination request';
  return systemQuestion(
    ctx,
    'review_escalation',
    leader,
    [
      freeText(
        `${child.name} (${child.agent_id}) has waited ${Math.round(ageS)} s for ${leader.name} (${leader.agent_id}) to give a ${what}; two pings went unanswered. What should ${leader.name} do? Your answer is sent to it.`,
        'Stuck review',
      ),
    ],
    (child.review ?? child.termination_request)?.detail ?? null,
    (qid) => [
      {
        event: 'review.escalated_to_user',
        task_id: child.task_id,
        agent_id: child.agent_id,
        leader_id: leader.agent_id,
        pending,
        qid,
      },
    ],
  );
}

/** Watchdog pass B, third strike: an idle leader (or root) goes to the user. */
export function idleEscalation(ctx: DomainContext, agent: AgentRecord, idleS: number): EventDraft[] {
  return systemQuestion(
    ctx,
    'liveness_escalation',
    agent,
    [
      freeText(
        `${agent.name} (${agent.agent_id}) and its team have been idle for ${Math.round(idleS)} s and did not react to two nudges. What should it do next? Your answer is sent to it.`,
        'Idle agent',
      ),
    ],
    null,
    (qid) => [
      { event: 'liveness.escalated_to_user', task_id: agent.task_id, agent_id: agent.agent_id, idle_s: idleS, qid },
    ],
  );
}

/** A root whose process the spawner gave up on (crash or contract strikes): the user decides. */
export function agentFailureQuestion(ctx: DomainContext, agent: AgentRecord, what: string): EventDraft[] {
  return systemQuestion(
    ctx,
    'agent_failure',
    agent,
    [
      freeText(
        `${agent.name} (${agent.agent_id}) stopped: ${what}. The spawner will not restart it on its own. What should happen? Your answer is sent to it as a message (a spawner resumes it when a message arrives).`,
        'Agent down',
      ),
    ],
    null,
  );
}

/** What answering one of the server's own questions does, in the same commit as the answer. */
export function answerEffects(
  ctx: DomainContext,
  q: QuestionRecord,
  answers: Answer[],
  answerText: string,
): EventDraft[] {
  const subject = liveSubject(ctx, q);
  if (!subject) return [];
  if (q.origin === 'root_review' || q.origin === 'root_termination') {
    const approve = (answers[0]?.selected_values ?? []).includes('approve');
    const reported: EventDraft = {
      event: 'completion.reported',
      task_id: q.task_id,
      agent_id: subject.agent_id,
      leader_id: USER,
      via: 'user_gateway',
      decision: approve ? 'approve' : 'rework',
    };
    if (approve) return [reported, ...terminationDrafts(ctx.state, USER, subject, 'root_approved')];
    return [reported, ...messageDrafts(ctx, USER, subject, answers[0]?.text ?? 'Rework requested.')];
  }
  // The watchdog's questions are single free-text ones: pass the user's words on as they are.
  return messageDrafts(ctx, USER, subject, answers[0]?.text ?? answerText);
}

/** Declining one of the server's own questions is sent back to its subject as the user's word, like a rework. */
export function declineEffects(ctx: DomainContext, q: QuestionRecord, reason: string): EventDraft[] {
  const subject = liveSubject(ctx, q);
  return subject ? messageDrafts(ctx, USER, subject, `The user declined to decide: ${reason}`) : [];
}

function liveSubject(ctx: DomainContext, q: QuestionRecord): AgentRecord | undefined {
  const subject = q.subject_agent_id ? ctx.state.agents.get(q.subject_agent_id) : undefined;
  return subject && !subject.terminate_consumed ? subject : undefined;
}
