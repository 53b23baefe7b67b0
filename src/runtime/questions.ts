import type { EventDraft, StoredEvent } from '../events/catalogue.js';
import { PrimitiveError } from '../primitives/errors.js';
import type { Registry } from '../registry/registry.js';
import { BEIDOU, USER, type AgentRecord, type Answer, type QuestionItem, type QuestionOrigin, type QuestionRecord } from '../registry/state.js';
import type { IdSource } from '../util/ids.js';
import { promptSummary, renderAnswerText, validateAnswers, type AnswerInput } from './answers.js';
import { terminationDrafts } from './agents.js';

/**
 * Questions and the user gateway. A question climbs the leader chain: it goes to the asker's
 * leader as an `[INBOX QUESTION]` message; each holder answers or escalates one hop; the
 * root's leader is the user gateway (`/api/questions/pending`). Questions are events, so
 * they survive the call ending and a restart. Blocked `ask_user` calls wait here; when an
 * answer finds no waiter, it goes to the asker's inbox as `[ANSWER qid] ...`.
 *
 * The server's own questions (the root's review, watchdog escalations) go to the user
 * directly, with `asker: "beidou"`, and their answers have effects instead of a waiter.
 */
export class Questions {
  private readonly waiters = new Map<string, Set<(q: QuestionRecord) => void>>();

  constructor(
    private readonly registry: Registry,
    private readonly ids: IdSource,
  ) {
    // An answer reaches the blocked call only once it is on disk: a reply is an acknowledgement.
    registry.observeDurable((events) => this.onCommitted(events));
  }

  private onCommitted(events: readonly StoredEvent[]): void {
    for (const e of events) {
      if (e.event !== 'question_answered' && e.event !== 'question_declined') continue;
      const set = this.waiters.get(e.qid);
      const q = this.registry.state.questions.get(e.qid);
      if (!set || !q) continue;
      this.waiters.delete(e.qid);
      for (const resolve of set) resolve(q);
    }
  }

  get(qid: string): QuestionRecord | undefined {
    return this.registry.state.questions.get(qid);
  }

  /** Questions at the user gateway, oldest first. */
  pendingAtGateway(): QuestionRecord[] {
    return [...this.registry.state.questions.values()].filter((q) => q.status === 'pending' && q.chain.at(-1) === USER);
  }

  holder(q: QuestionRecord): string {
    return q.chain.at(-1)!;
  }

  /**
   * An agent's question: to its leader's inbox, or to the gateway when its leader is the
   * user. The asker's waiter is in place before anyone can see the question, so a fast
   * answer reaches the call rather than the inbox.
   */
  async ask(
    asker: AgentRecord,
    questions: QuestionItem[],
    context: string | null,
    signal: AbortSignal,
  ): Promise<{ question: QuestionRecord; answered: Promise<QuestionRecord | undefined> }> {
    const qid = this.ids.next('q');
    const answered = this.wait(qid, signal);
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
    if (holder) drafts.push(this.inboxQuestion(asker.task_id, qid, holder, asker, questions, context, asker.agent_id));
    await this.registry.commit(drafts);
    return { question: this.get(qid)!, answered };
  }

  private inboxQuestion(
    taskId: string,
    qid: string,
    to: string,
    asker: AgentRecord,
    questions: QuestionItem[],
    context: string | null,
    from: string,
    escalatedBy?: AgentRecord,
  ): EventDraft {
    const lines = [
      `[INBOX QUESTION ${qid}] from ${asker.name} (${asker.agent_id})${escalatedBy ? `, escalated by ${escalatedBy.name} (${escalatedBy.agent_id})` : ''}`,
      ...(context ? [`Context: ${context}`] : []),
      ...questions.map((q, i) => {
        const options = q.options.length === 0 ? 'free text' : q.options.map((o) => o.label).join(' / ') + (q.multiSelect ? ' (choose any)' : ' (choose one)');
        return `${i + 1}. ${q.header ? `[${q.header}] ` : ''}${q.question} — ${options}`;
      }),
      `Answer with mcp__beidou__answer_question {qid: "${qid}", answers: [...], reason} if you can; otherwise mcp__beidou__escalate_question {qid: "${qid}", reason}.`,
    ];
    return { event: 'inbox.posted', task_id: taskId, to, from, kind: 'question', content: lines.join('\n'), message_id: this.ids.next('msg') };
  }

  private pendingOr404(qid: string): QuestionRecord {
    const q = this.get(qid);
    if (!q) throw new PrimitiveError('unknown_qid', `no question ${qid}`, { qid });
    return q;
  }

  /** One hop up: to the holder's leader, or to the user gateway from the root. */
  async escalate(by: AgentRecord, qid: string, reason: string): Promise<string | null> {
    const q = this.pendingOr404(qid);
    if (q.task_id !== by.task_id) throw new PrimitiveError('unknown_qid', `no question ${qid} in your task`, { qid });
    if (this.holder(q) !== by.agent_id) {
      if (q.status !== 'pending' || q.chain.includes(by.agent_id)) {
        throw new PrimitiveError('stale', `question ${qid} is no longer yours to escalate (it is ${q.status === 'pending' ? `with ${this.holder(q)}` : q.status})`, {
          qid,
          status: q.status,
        });
      }
      throw new PrimitiveError('not_holder', `question ${qid} is held by ${this.holder(q)}, not you`, { qid, holder: this.holder(q) });
    }
    if (q.status !== 'pending') throw new PrimitiveError('stale', `question ${qid} was already ${q.status}`, { qid, status: q.status });
    const next = by.leader_id === USER ? null : by.leader_id;
    const drafts: EventDraft[] = [{ event: 'question_escalated', task_id: q.task_id, qid, by: by.agent_id, new_holder: next, reason }];
    const asker = this.registry.agent(q.asker);
    if (next && asker) drafts.push(this.inboxQuestion(q.task_id, qid, next, asker, q.questions, q.context, BEIDOU, by));
    await this.registry.commit(drafts);
    return next;
  }

  /**
   * Answers a pending question, by its holder (an agent) or the user. The asker's blocked
   * call gets the answer; with no call waiting, the asker's inbox does.
   */
  async answer(by: AgentRecord | typeof USER, qid: string, input: AnswerInput[], reason: string | null): Promise<QuestionRecord> {
    const q = this.pendingOr404(qid);
    const byId = by === USER ? USER : by.agent_id;
    if (by !== USER) {
      if (q.task_id !== by.task_id) throw new PrimitiveError('unknown_qid', `no question ${qid} in your task`, { qid });
      if (this.holder(q) !== by.agent_id) {
        throw new PrimitiveError('not_holder', `question ${qid} is held by ${this.holder(q)}; only the agent it was last routed to may answer`, {
          qid,
          holder: this.holder(q),
        });
      }
    }
    if (q.status !== 'pending') throw new PrimitiveError('stale', `question ${qid} was already ${q.status}`, { qid, status: q.status });
    const answers = validateAnswers(q.questions, input);
    const answerText = renderAnswerText(q.questions, answers);
    const drafts: EventDraft[] = [
      { event: 'question_answered', task_id: q.task_id, qid, asker: q.asker, chain_len: q.chain.length, answers, answer_text: answerText, by: byId, reason },
    ];
    const asker = this.registry.agent(q.asker);
    if (q.asker === BEIDOU) drafts.push(...this.effects(q, answers, answerText));
    else if (asker && !asker.terminate_consumed && !this.waiters.has(qid)) {
      drafts.push({
        event: 'inbox.posted',
        task_id: q.task_id,
        to: asker.agent_id,
        from: byId,
        kind: 'answer',
        content: `[ANSWER ${qid}] ${answerText}`,
        message_id: this.ids.next('msg'),
      });
    }
    await this.registry.commit(drafts);
    return this.get(qid)!;
  }

  /** The user refuses a question: the asker's call fails with `user_declined`. */
  async decline(qid: string, reason: string): Promise<void> {
    const q = this.pendingOr404(qid);
    if (q.status !== 'pending') throw new PrimitiveError('stale', `question ${qid} was already ${q.status}`, { qid, status: q.status });
    const drafts: EventDraft[] = [{ event: 'question_declined', task_id: q.task_id, qid, asker: q.asker, reason }];
    const asker = this.registry.agent(q.asker);
    const subject = q.subject_agent_id ? this.registry.agent(q.subject_agent_id) : undefined;
    if (q.asker === BEIDOU && subject && !subject.terminate_consumed) {
      // Declining the server's own question (a root review, an escalation) is sent back as
      // the user's word, like a rework.
      drafts.push(...this.userMessage(subject, `The user declined to decide: ${reason}`));
    } else if (asker && !asker.terminate_consumed && !this.waiters.has(qid)) {
      drafts.push({
        event: 'inbox.posted',
        task_id: q.task_id,
        to: asker.agent_id,
        from: USER,
        kind: 'answer',
        content: `[ANSWER ${qid}] The user declined to answer: ${reason}`,
        message_id: this.ids.next('msg'),
      });
    }
    await this.registry.commit(drafts);
  }

  /** Waits for the question to be answered or declined; resolves undefined if the signal aborts first. */
  private wait(qid: string, signal: AbortSignal): Promise<QuestionRecord | undefined> {
    const q = this.get(qid);
    if (q && q.status !== 'pending') return Promise.resolve(q);
    return new Promise((resolve) => {
      let set = this.waiters.get(qid);
      if (!set) this.waiters.set(qid, (set = new Set()));
      const done = (answered?: QuestionRecord) => {
        signal.removeEventListener('abort', onAbort);
        set.delete(done);
        if (set.size === 0 && this.waiters.get(qid) === set) this.waiters.delete(qid);
        resolve(answered);
      };
      const onAbort = () => {
        done(undefined);
        // Answered while this call waited, but the call ended before the answer was durable:
        // the answer relied on this call, so it goes to the inbox instead.
        const answered = this.get(qid);
        if (answered && answered.status !== 'pending') void this.deliverLate(answered);
      };
      if (signal.aborted) return done(undefined);
      signal.addEventListener('abort', onAbort, { once: true });
      set.add(done);
    });
  }

  private async deliverLate(q: QuestionRecord): Promise<void> {
    const asker = this.registry.agent(q.asker);
    if (!asker || asker.terminate_consumed) return;
    const text = q.status === 'answered' ? (q.answer_text ?? '') : `The user declined to answer: ${q.audit.at(-1)?.reason ?? ''}`;
    await this.registry
      .commit([
        { event: 'inbox.posted', task_id: q.task_id, to: asker.agent_id, from: q.answered_by ?? USER, kind: 'answer', content: `[ANSWER ${q.qid}] ${text}`, message_id: this.ids.next('msg') },
      ])
      .catch(() => undefined);
  }

  // ---- the server's own questions (straight to the user gateway) ----

  /**
   * The drafts of one of the server's own questions, to commit together with what caused
   * it: a crash between the cause and the question must not leave one without the other.
   */
  private systemQuestionDrafts(
    taskId: string,
    origin: QuestionOrigin,
    subject: AgentRecord,
    questions: QuestionItem[],
    context: string | null,
    alongside: (qid: string) => EventDraft[] = () => [],
  ): EventDraft[] {
    const qid = this.ids.next('q');
    return [
      { event: 'question_asked', task_id: taskId, qid, asker: BEIDOU, holder: null, prompt: promptSummary(questions), questions, context, origin, subject_agent_id: subject.agent_id },
      ...alongside(qid),
    ];
  }

  private async systemQuestion(...args: Parameters<Questions['systemQuestionDrafts']>): Promise<void> {
    await this.registry.commit(this.systemQuestionDrafts(...args));
  }

  private hasPending(origin: QuestionOrigin, subjectId: string): boolean {
    for (const q of this.registry.state.questions.values()) {
      if (q.status === 'pending' && q.origin === origin && q.subject_agent_id === subjectId) return true;
    }
    return false;
  }

  /** The root's signal_review becomes an Approve / Rework question at the gateway. */
  rootReviewDrafts(root: AgentRecord, detail: string): EventDraft[] {
    if (this.hasPending('root_review', root.agent_id)) return [];
    return this.systemQuestionDrafts(root.task_id, 'root_review', root, [approveOrRework(`The root agent ${root.name} reports its work ready for review:\n\n${detail}`)], detail);
  }

  /** The root's request_termination, likewise. */
  rootTerminationDrafts(root: AgentRecord, detail: string): EventDraft[] {
    if (this.hasPending('root_termination', root.agent_id)) return [];
    const text = `The root agent ${root.name} reports the task complete and asks to end it.${detail ? `\n\n${detail}` : ''}`;
    return this.systemQuestionDrafts(root.task_id, 'root_termination', root, [approveOrRework(text)], detail || null);
  }

  /** Watchdog pass A, third strike: a review its leader does not answer goes to the user. */
  async escalateReview(child: AgentRecord, leader: AgentRecord, pending: 'review' | 'termination', ageS: number): Promise<void> {
    const what = pending === 'review' ? 'review of its hand-off' : 'decision on its termination request';
    await this.systemQuestion(
      child.task_id,
      'review_escalation',
      leader,
      [
        {
          question: `${child.name} (${child.agent_id}) has waited ${Math.round(ageS)} s for ${leader.name} (${leader.agent_id}) to give a ${what}; two pings went unanswered. What should ${leader.name} do? Your answer is sent to it.`,
          header: 'Stuck review',
          multiSelect: false,
          options: [],
        },
      ],
      (child.review ?? child.termination_request)?.detail ?? null,
      (qid) => [{ event: 'review.escalated_to_user', task_id: child.task_id, agent_id: child.agent_id, leader_id: leader.agent_id, pending, qid }],
    );
  }

  /** Watchdog pass B, third strike: an idle leader (or root) goes to the user. */
  async escalateIdle(agent: AgentRecord, idleS: number): Promise<void> {
    await this.systemQuestion(
      agent.task_id,
      'liveness_escalation',
      agent,
      [
        {
          question: `${agent.name} (${agent.agent_id}) and its team have been idle for ${Math.round(idleS)} s and did not react to two nudges. What should it do next? Your answer is sent to it.`,
          header: 'Idle agent',
          multiSelect: false,
          options: [],
        },
      ],
      null,
      (qid) => [{ event: 'liveness.escalated_to_user', task_id: agent.task_id, agent_id: agent.agent_id, idle_s: idleS, qid }],
    );
  }

  /** A root whose process the spawner gave up on (crash or contract strikes): the user decides. */
  agentFailureDrafts(agent: AgentRecord, what: string): EventDraft[] {
    return this.systemQuestionDrafts(
      agent.task_id,
      'agent_failure',
      agent,
      [
        {
          question: `${agent.name} (${agent.agent_id}) stopped: ${what}. The spawner will not restart it on its own. What should happen? Your answer is sent to it as a message (a spawner resumes it when a message arrives).`,
          header: 'Agent down',
          multiSelect: false,
          options: [],
        },
      ],
      null,
    );
  }

  /** What answering one of the server's own questions does, in the same commit as the answer. */
  private effects(q: QuestionRecord, answers: Answer[], answerText: string): EventDraft[] {
    const values = answers[0]?.selected_values ?? [];
    const subject = q.subject_agent_id ? this.registry.agent(q.subject_agent_id) : undefined;
    if (!subject || subject.terminate_consumed) return [];
    const state = this.registry.state;
    if (q.origin === 'root_review' || q.origin === 'root_termination') {
      const approve = values.includes('approve');
      const reported: EventDraft = {
        event: 'completion.reported',
        task_id: q.task_id,
        agent_id: subject.agent_id,
        leader_id: USER,
        via: 'user_gateway',
        decision: approve ? 'approve' : 'rework',
      };
      if (approve) return [reported, ...terminationDrafts(state, USER, subject, 'root_approved')];
      return [reported, ...this.userMessage(subject, answers[0]?.text ?? 'Rework requested.')];
    }
    // The watchdog's questions are single free-text ones: pass the user's words on as they are.
    return this.userMessage(subject, answers[0]?.text ?? answerText);
  }

  private userMessage(to: AgentRecord, content: string): EventDraft[] {
    const drafts: EventDraft[] = [
      { event: 'send_message', task_id: to.task_id, caller_id: USER, to: to.agent_id, content, message_id: this.ids.next('msg') },
    ];
    if (to.review || to.termination_request) drafts.push({ event: 'review.acknowledged', task_id: to.task_id, agent_id: to.agent_id, by: USER });
    return drafts;
  }
}

function approveOrRework(question: string): QuestionItem {
  return {
    question,
    header: 'Root review',
    multiSelect: false,
    options: [
      { label: 'Approve', description: 'Accept the work: the root and every agent under it are terminated and the task is done.', value: 'approve' },
      { label: 'Rework', description: 'Send it back with your instructions (type them in the text).', value: 'rework', requires_text: true },
    ],
  };
}
