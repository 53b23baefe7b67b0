import { z } from 'zod';
import * as reviews from '../domain/reviews.js';
import { definePrimitive } from './define.js';

export const signalReview = definePrimitive({
  name: 'signal_review',
  title: 'Signal review',
  description: [
    'Hand your deliverables to your leader for review. detail must contain the envelope [REVIEW REQUIRED] (or [ITERATION READY] for an',
    'intermediate iteration) with: deliverables and their paths, open questions, and the leader\'s options (approve with terminate_child,',
    'or rework by message). Then end your turn and wait: approval ends you; a message from your leader is rework.',
    'Calling it again replaces the pending report. Error: envelope_missing (details.reason detail_empty or envelope_missing).',
  ].join(' '),
  inputSchema: z.strictObject({
    detail: z.string().describe('The report, containing [REVIEW REQUIRED] or [ITERATION READY].'),
  }),
  outputSchema: z.object({ recorded: z.literal(true), review_pending: z.literal(true) }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  allowedDuringReview: true,
  async handler({ detail }, { services, caller }) {
    await services.registry.commit(reviews.signalReview(services.domain, caller, detail));
    return { recorded: true as const, review_pending: true as const };
  },
});
