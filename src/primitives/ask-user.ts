import { z } from 'zod';
import { answerSchema, questionSchema } from '../events/catalogue.js';
import { normaliseWords } from '../domain/envelope.js';
import { DomainError } from '../domain/errors.js';
import * as routing from '../domain/questions.js';
import { questionHolder } from '../registry/queries.js';
import { USER, type QuestionRecord } from '../registry/state.js';
import { definePrimitive } from './define.js';

export const askUser = definePrimitive({
  name: 'ask_user',
  title: 'Ask the user (through your leader chain)',
  description: [
    'Ask 1-4 questions. They go to your leader first, who answers or escalates them one hop at a time; only what no leader can answer',
    'reaches the user (the root asks the user directly). Blocks until answered, with no timeout; progress notifications keep the call alive.',
    'If the call ends first, the question stays pending and its answer arrives in your inbox as [ANSWER qid] ...;',
    'asking the same question again (same questions and context) while it is pending waits for it instead of asking anew.',
    'Each question: question, header (at most 12 characters, may be empty), multiSelect, and options: none (free text) or 2-4',
    '{label, description, value?, requires_text?}. Returns answers[i] {selected_labels, selected_values, text} and answer_text.',
    'Errors: invalid_input (names the question index and field), user_declined, content_too_large (context, or all question texts',
    "together, over BEIDOU_MAX_CONTENT_CHARS; details.field), inbox_full (your leader's inbox is at its cap; wait and retry).",
  ].join(' '),
  inputSchema: z.strictObject({
    questions: z
      .array(questionSchema)
      .min(1, 'must hold 1 to 4 questions')
      .max(4, 'must hold 1 to 4 questions')
      .describe('1 to 4 questions.'),
    context: z.string().optional().describe('Shared background, shown verbatim.'),
  }),
  outputSchema: z.object({
    qid: z.string(),
    answers: z.array(answerSchema),
    answer_text: z.string(),
  }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  allowedDuringReview: true,
  async handler({ questions, context }, { services, caller, signal, progress, replyFlushed }) {
    const { registry, config, stopping } = services;
    // The same question asked again after its call ended waits for it (domain/questions.ts).
    const { qid, drafts, repeated } = routing.ask(services.domain, caller, questions, context ?? null, (q) =>
      services.questions.has(q),
    );
    // The waiter is in place before anyone can see the question, so a fast answer reaches
    // this call rather than the inbox.
    // `unasked` ends the wait of a question whose commit was refused (nothing would ever settle it).
    const unasked = new AbortController();
    const answer = services.questions.wait(qid, AbortSignal.any([signal, stopping, unasked.signal]));
    if (repeated)
      services.logger.info({ qid, agent: caller.agent_id }, `ask_user repeats pending question ${qid}: waiting for it`);
    else {
      try {
        await registry.commit(drafts, { writer: caller.agent_id });
      } catch (err) {
        unasked.abort();
        throw err;
      }
    }
    const where = () => {
      const holder = questionHolder(registry.state.questions.get(qid)!);
      return holder === USER ? 'the user' : `agent ${holder}`;
    };
    const tell = () => progress(`question ${qid} is waiting for ${where()}`).catch(() => undefined);
    await tell();
    const ticker = setInterval(tell, config.progressS * 1000);
    let answered: QuestionRecord | undefined;
    try {
      answered = await answer;
    } finally {
      clearInterval(ticker);
    }
    if (!answered) {
      // The call ended first (client gone or server stopping); the answer will go to the inbox.
      throw new DomainError(
        'gateway_unavailable',
        `the call ended before ${qid} was answered; its answer will arrive in your inbox as [ANSWER ${qid}]`,
        {
          qid,
          pending: true,
        },
      );
    }
    // The answer rides on this reply: if it never reaches the client (the stream dropped and
    // was not resumed in time), the answer goes to the inbox as if the call had ended first.
    void replyFlushed?.()
      .then((flushed) => {
        const late = flushed ? [] : routing.lateAnswer(services.domain, registry.state.questions.get(qid)!);
        if (late.length > 0) return registry.commit(late);
      })
      .catch(() => undefined);
    // Someone else's words: normalised as every delivery path has them (no invisible or control characters).
    if (answered.status === 'declined') {
      const reason = normaliseWords(answered.audit.at(-1)?.reason ?? '');
      throw new DomainError('user_declined', `the user declined to answer: ${reason}`, { qid, reason });
    }
    const answers = (answered.answers ?? []).map((a) => (a.text === null ? a : { ...a, text: normaliseWords(a.text) }));
    return { qid, answers, answer_text: normaliseWords(answered.answer_text ?? '') };
  },
});
