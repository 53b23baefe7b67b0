import { z } from 'zod';
import * as reviews from '../domain/reviews.js';
import { definePrimitive } from './define.js';

export const requestTermination = definePrimitive({
  name: 'request_termination',
  title: 'Request termination',
  description: [
    "Declare that your whole lifecycle's work is complete and ask your leader to terminate you. Usually the last call you make:",
    'afterwards end your turn and call no more tools. Your leader either terminates you or messages you (rejected: keep working).',
    'It does not signal a review; call signal_review first if you want one. Errors: plan_incomplete (your plan still has tasks not done or failed),',
    "content_too_large (detail is over BEIDOU_MAX_CONTENT_CHARS), inbox_full (your leader's inbox is at its cap; wait and retry).",
  ].join(' '),
  inputSchema: z.strictObject({
    detail: z.string().optional().describe('Optional summary of the completed work.'),
  }),
  outputSchema: z.object({ recorded: z.literal(true), termination_requested: z.literal(true) }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async handler({ detail }, { services, caller }) {
    await services.registry.commit(reviews.requestTermination(services.domain, caller, detail ?? ''), {
      writer: caller.agent_id,
    });
    return { recorded: true as const, termination_requested: true as const };
  },
});
