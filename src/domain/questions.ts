import type { EventDraft } from '../events/catalogue.js';
import { questionHolder } from '../registry/queries.js';
import { BEIDOU, USER, type AgentRecord, type QuestionItem, type QuestionRecord } from '../registry/state.js';
import { promptSummary, renderAnswerText, validateAnswers, type AnswerInput } from './answers.js';
import type { DomainContext } from './context.js';
import { DomainError } from './errors.js';
import { envelope, headerName, inlineWords, quoteLines } from './envelope.js';
import { assertContentSize, assertInboxRoom, assertPendingQuestions } from './limits.js';
import { inboxPosted } from './messages.js';
import { answerEffects, declineEffects } from './system-questions.js';

/**
 * Question routing. A question climbs the leader chain: it goes to the asker's leader as an
 * `[INBOX QUESTION]` message; each holder answers or escalates it one hop; the root's
 * leader is the user gateway. When an answer finds no blocked `ask_user` call waiting for
 * it, it goes to the asker's inbox as `[ANSWER qid] ...`. The server's own questions
 * (`asker: "beidou"`, see system-questions.ts) have effects instead of an asker.
 */

/**
 * An agent's question: to its leader's inbox, or to the gateway when its leader is the user.
 * The caller puts the asker's waiter in place for `qid` before it commits the drafts.
 *
 * Asked again while the same question (the same questions and context) of the same asker
 * is pending and no call waits for it (`waiting`): its call ended (a dropped connection,
 * a restart, a failover to another replica) and the client asks again. Then no question is
 * asked: the call waits for the pending one (`repeated`, no drafts), so its holder and the
 * user see it once and its answer comes back on this call.
 */
export function ask(
  ctx: DomainContext,
  asker: AgentRecord,
  questions: QuestionItem[],
  context: string | null,
  waiting: (qid: string) => boolean = () => false,
): { qid: string; drafts: EventDraft[]; repeated: boolean } {
  assertContentSize(ctx.config, 'context', context);
  assertContentSize(ctx.config, 'questions', questionsText(questions));
  const same = pendingRepeat(ctx, asker, questions, context, waiting);
  if (same) return { qid: same.qid, drafts: [], repeated: true };
  assertPendingQuestions(ctx, asker);
  const qid = ctx.ids.next('q');
  const holder = asker.leader_id === USER ? null : asker.leader_id;
  const drafts: EventDraft[] = [
    {
      event: 'question_asked',
      task_id: asker.task_id,
      qid,
      asker: asker.agent_id,
      holder,
      prompt: promptSummary(questions),
      questions,
      context,
      origin: 'ask_user',
      subject_agent_id: null,
    },
  ];
  if (holder)
    drafts.push(
      inboxQuestion(ctx, qid, { agent_id: holder, task_id: asker.task_id }, asker, questions, context, asker.agent_id),
    );
  return { qid, drafts, repeated: false };
}

/** The asker's own pending `ask_user` question equal to this one that no call waits for, oldest first. */
function pendingRepeat(
  ctx: DomainContext,
  asker: AgentRecord,
  questions: QuestionItem[],
  context: string | null,
  waiting: (qid: string) => boolean,
): QuestionRecord | null {
  const wanted = canonical(questions);
  for (const q of ctx.state.questions.values()) {
    if (
      q.asker !== asker.agent_id ||
      q.status !== 'pending' ||
      q.origin !== 'ask_user' ||
      q.context !== context ||
      waiting(q.qid)
    )
      continue;
    if (canonical(q.questions) === wanted) return q;
  }
  return null;
}

/** JSON with every object's keys sorted: the same questions compare equal whatever their key order. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : v,
  );
}

/** One hop up: to the holder's leader, or to the user gateway from the root (`newHolder` null). */
export function escalate(
  ctx: DomainContext,
  by: AgentRecord,
  qid: string,
  reason: string,
): { newHolder: string | null; drafts: EventDraft[] } {
  const q = questionOrRefuse(ctx, qid, by);
  const holder = questionHolder(q);
  if (holder !== by.agent_id) {
    if (q.status !== 'pending' || q.chain.includes(by.agent_id)) {
      throw new DomainError(
        'stale',
        `question ${qid} is no longer yours to escalate (it is ${q.status === 'pending' ? `with ${holder}` : q.status})`,
        {
          qid,
          status: q.status,
        },
      );
    }
    throw new DomainError('not_holder', `question ${qid} is held by ${holder}, not you`, { qid, holder });
  }
  refuseSettled(q);
  const next = by.leader_id === USER ? null : by.leader_id;
  const drafts: EventDraft[] = [
    { event: 'question_escalated', task_id: q.task_id, qid, by: by.agent_id, new_holder: next, reason },
  ];
  const asker = ctx.state.agents.get(q.asker);
  if (next && asker)
    drafts.push(
      inboxQuestion(ctx, qid, { agent_id: next, task_id: q.task_id }, asker, q.questions, q.context, BEIDOU, by),
    );
  return { newHolder: next, drafts };
}

/**
 * Answers a pending question, by its holder (an agent) or the user. `askerWaiting` says a
 * blocked `ask_user` call will take the answer; otherwise the asker's inbox gets it. The
 * server's own questions apply their effect in the same commit.
 */
export function answer(
  ctx: DomainContext,
  by: AgentRecord | typeof USER,
  qid: string,
  input: AnswerInput[],
  reason: string | null,
  askerWaiting: boolean,
): EventDraft[] {
  const q = questionOrRefuse(ctx, qid, by);
  const byId = by === USER ? USER : by.agent_id;
  if (by !== USER) {
    const holder = questionHolder(q);
    if (holder !== by.agent_id) {
      throw new DomainError(
        'not_holder',
        `question ${qid} is held by ${holder}; only the agent it was last routed to may answer`,
        { qid, holder },
      );
    }
  }
  refuseSettled(q);
  for (const [i, a] of input.entries()) assertContentSize(ctx.config, `answers[${i}].text`, a.text);
  const answers = validateAnswers(q.questions, input);
  const answerText = renderAnswerText(q.questions, answers);
  const drafts: EventDraft[] = [
    {
      event: 'question_answered',
      task_id: q.task_id,
      qid,
      asker: q.asker,
      chain_len: q.chain.length,
      answers,
      answer_text: answerText,
      by: byId,
      reason,
    },
  ];
  const asker = ctx.state.agents.get(q.asker);
  if (q.asker === BEIDOU) drafts.push(...answerEffects(ctx, q, answers, answerText));
  else if (asker && !asker.terminate_consumed && !askerWaiting)
    drafts.push(inboxPosted(ctx, asker, byId, 'answer', envelope(`[ANSWER ${qid}]`, answerText)));
  return drafts;
}

/** The user refuses a question: the asker's call fails with `user_declined`, or its inbox is told. */
export function decline(ctx: DomainContext, qid: string, reason: string, askerWaiting: boolean): EventDraft[] {
  const q = questionOrRefuse(ctx, qid, USER);
  refuseSettled(q);
  const drafts: EventDraft[] = [{ event: 'question_declined', task_id: q.task_id, qid, asker: q.asker, reason }];
  const asker = ctx.state.agents.get(q.asker);
  if (q.asker === BEIDOU) drafts.push(...declineEffects(ctx, q, reason));
  else if (asker && !asker.terminate_consumed && !askerWaiting) {
    drafts.push(inboxPosted(ctx, asker, USER, 'answer', declinedText(qid, reason)));
  }
  return drafts;
}

/**
 * A settled question whose blocked call ended before the answer was durable: the answer
 * relied on that call, so it goes to the asker's inbox instead (none if the asker is gone).
 */
export function lateAnswer(ctx: DomainContext, q: QuestionRecord): EventDraft[] {
  const asker = ctx.state.agents.get(q.asker);
  if (!asker || asker.terminate_consumed || q.status === 'pending') return [];
  const text =
    q.status === 'answered'
      ? envelope(`[ANSWER ${q.qid}]`, q.answer_text ?? '')
      : declinedText(q.qid, q.audit.at(-1)?.reason ?? '');
  return [inboxPosted(ctx, asker, q.answered_by ?? USER, 'answer', text)];
}

/** `[ANSWER qid] The user declined to answer: <reason>`, the reason set apart as the user's words. */
function declinedText(qid: string, reason: string): string {
  return envelope(`[ANSWER ${qid}] The user declined to answer:`, reason);
}

/**
 * The question, else `unknown_qid`. To an agent, a question of another task is one that does
 * not exist, in the same words: another answer would tell it which ids exist elsewhere.
 */
function questionOrRefuse(ctx: DomainContext, qid: string, by: AgentRecord | typeof USER): QuestionRecord {
  const q = ctx.state.questions.get(qid);
  if (by !== USER && (!q || q.task_id !== by.task_id))
    throw new DomainError('unknown_qid', `no question ${qid} in your task`, { qid });
  if (!q) throw new DomainError('unknown_qid', `no question ${qid}`, { qid });
  return q;
}

function refuseSettled(q: QuestionRecord): void {
  if (q.status !== 'pending')
    throw new DomainError('stale', `question ${q.qid} was already ${q.status}`, { qid: q.qid, status: q.status });
}

/** The `[INBOX QUESTION qid]` message a holder receives, with the two ways to act on it. */
function inboxQuestion(
  ctx: DomainContext,
  qid: string,
  to: { agent_id: string; task_id: string },
  asker: AgentRecord,
  questions: QuestionItem[],
  context: string | null,
  from: string,
  escalatedBy?: AgentRecord,
): EventDraft {
  const by = escalatedBy ? `, escalated by ${headerName(escalatedBy.name)} (${headerName(escalatedBy.agent_id)})` : '';
  // The asker's words (context, each question, its header and labels) are set apart: none begins a line.
  const lines = [
    `[INBOX QUESTION ${qid}] from ${headerName(asker.name)} (${headerName(asker.agent_id)})${by}`,
    ...(context ? [envelope('Context:', context)] : []),
    ...questions.map((q, i) => {
      // The header in quotes, not brackets (a bracketed header would read as a tag); headerName keeps it inside them.
      const line = (what: string) => `${i + 1}. (${q.header ? `header "${headerName(q.header)}", ` : ''}${what})`;
      if (q.options.length === 0) return envelope(line('free text'), q.question);
      const choose = q.multiSelect ? 'choose any' : 'choose one';
      // Labels of nothing but letters, digits, blanks and `._:@-` sit in the line; else all go quoted below.
      const plain = q.options.every((o) => headerName(o.label) === o.label);
      if (plain) return envelope(line(`${choose}: ${q.options.map((o) => o.label).join(' / ')}`), q.question);
      const labels = quoteLines(q.options.map((o) => inlineWords(o.label)).join('\n'));
      return `${envelope(line(`${choose} of the labels below`), q.question)}\nLabels, as written:\n${labels}`;
    }),
    `Answer with mcp__beidou__answer_question {qid: "${qid}", answers: [...], reason} if you can; otherwise mcp__beidou__escalate_question {qid: "${qid}", reason}.`,
  ];
  const content = lines.join('\n');
  // Written on the asker's behalf: it counts against the holder's inbox like a message would.
  const holder = ctx.state.agents.get(to.agent_id);
  if (holder) assertInboxRoom(ctx, holder, content);
  return inboxPosted(ctx, to, from, 'question', content);
}

/** Every text of a question set, as one string: what its size is measured on. */
function questionsText(questions: readonly QuestionItem[]): string {
  return questions
    .flatMap((q) => [q.question, q.header, ...q.options.flatMap((o) => [o.label, o.description, o.value ?? ''])])
    .join('');
}
