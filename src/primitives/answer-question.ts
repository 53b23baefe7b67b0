import { z } from 'zod';
import * as routing from '../domain/questions.js';
import { definePrimitive } from './define.js';
import { nameField } from './fields.js';

export const answerQuestion = definePrimitive({
  name: 'answer_question',
  title: 'Answer a question you hold',
  description: [
    "Answer an [INBOX QUESTION] routed to you: the asker's ask_user returns with your answers and the user is never asked.",
    'Give one answer per sub-question, in order: {selected_labels: [...], text: string | null}; for free text or "Other", leave',
    'selected_labels empty and put the answer in text. reason says why you could answer (audit). Errors: unknown_qid, not_holder',
    '(only the agent it was last routed to may answer), answer_count_mismatch, stale (already answered), invalid_input,',
    'content_too_large (an answers[i].text over BEIDOU_MAX_CONTENT_CHARS).',
  ].join(' '),
  inputSchema: z.strictObject({
    qid: nameField().describe('The id from the [INBOX QUESTION] message.'),
    answers: z
      .array(
        z.strictObject({
          selected_labels: z.array(z.string()).default([]),
          text: z.string().nullable().default(null),
        }),
      )
      .min(1, 'must hold one answer per sub-question')
      .describe('One entry per sub-question, in order.'),
    reason: z
      .string()
      .trim()
      .min(1, 'must explain why you can answer this yourself')
      .describe('Why you can answer it directly.'),
  }),
  outputSchema: z.object({ ok: z.literal(true), qid: z.string() }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  allowedDuringReview: true,
  async handler({ qid, answers, reason }, { services, caller }) {
    await services.registry.commit(
      routing.answer(services.domain, caller, qid, answers, reason, services.questions.has(qid)),
      { writer: caller.agent_id },
    );
    return { ok: true as const, qid };
  },
});
