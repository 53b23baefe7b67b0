import { z } from 'zod';
import * as routing from '../domain/questions.js';
import { definePrimitive } from './define.js';
import { nameField } from './fields.js';

export const escalateQuestion = definePrimitive({
  name: 'escalate_question',
  title: 'Escalate a question one hop',
  description: [
    'Pass an [INBOX QUESTION] you hold to your own leader (from the root: to the user). Returns at once; the answer goes to the',
    'original asker, not to you. new_holder is null when it reached the user. reason says why you cannot answer (audit).',
    'Errors: unknown_qid, not_holder, stale (already answered or escalated past you), invalid_input,',
    "inbox_full (your leader's inbox is at its cap; wait and retry).",
  ].join(' '),
  inputSchema: z.strictObject({
    qid: nameField().describe('The id from the [INBOX QUESTION] message.'),
    reason: z
      .string()
      .trim()
      .min(1, 'must explain why you cannot answer it')
      .describe('Why you cannot answer it yourself.'),
  }),
  outputSchema: z.object({ ok: z.literal(true), qid: z.string(), new_holder: z.string().nullable() }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  allowedDuringReview: true,
  async handler({ qid, reason }, { services, caller }) {
    const { newHolder, drafts } = routing.escalate(services.domain, caller, qid, reason);
    await services.registry.commit(drafts, { writer: caller.agent_id });
    return { ok: true as const, qid, new_holder: newHolder };
  },
});
