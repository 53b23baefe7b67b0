import { z } from 'zod';
import * as reviews from '../domain/reviews.js';
import { definePrimitive } from './define.js';

export const signalReview = definePrimitive({
  name: 'signal_review',
  title: 'Signal review',
  description: [
    'Hand your deliverables to your leader for review. detail must contain the envelope [REVIEW REQUIRED] (or [ITERATION READY] for an',
    "intermediate iteration) with: deliverables and their paths, open questions, and the leader's options (approve with terminate_child,",
    'or rework by message). Then end your turn and wait: approval ends you; a message from your leader is rework.',
    "Calling it again replaces your earlier report in your leader's inbox if it has not been delivered yet: the leader sees one report per child.",
    'Errors: envelope_missing (details.reason detail_empty or envelope_missing), content_too_large (detail is over BEIDOU_MAX_CONTENT_CHARS;',
    "details.field, max, setting), inbox_full (your leader's inbox is at its cap; wait and retry).",
  ].join(' '),
  inputSchema: z.strictObject({
    detail: z.string().describe('The report, containing [REVIEW REQUIRED] or [ITERATION READY].'),
  }),
  outputSchema: z.object({ recorded: z.literal(true), review_pending: z.literal(true) }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  allowedDuringReview: true,
  async handler({ detail }, { services, caller }) {
    // Only a report no delivery has in hand (a spawner push in flight) can still be replaced.
    const leader = services.registry.agent(caller.leader_id);
    const undelivered = leader ? new Set(services.inboxes.peek(leader).map((m) => m.message_id)) : undefined;
    await services.registry.commit(reviews.signalReview(services.domain, caller, detail, undelivered), {
      writer: caller.agent_id,
    });
    return { recorded: true as const, review_pending: true as const };
  },
});
