import { z } from 'zod';
import { normaliseWords } from '../domain/envelope.js';
import { childrenAwaitingLeader } from '../registry/queries.js';
import { definePrimitive } from './define.js';

export const listPendingReviews = definePrimitive({
  name: 'list_pending_reviews',
  title: 'List pending reviews',
  description: [
    'Your direct children (members of teams you lead) waiting on you: a signalled review or a termination request, oldest first,',
    'with age_s and the report as summary. Answer each with terminate_child (approve) or send_message (rework). Read-only.',
  ].join(' '),
  inputSchema: z.strictObject({}),
  outputSchema: z.object({
    reviews: z.array(
      z.object({
        agent_id: z.string(),
        role: z.string(),
        review_pending_ts: z.number().nullable(),
        age_s: z.number().nullable(),
        summary: z.string(),
        name: z.string().nullable(),
        pending: z.enum(['review', 'termination']),
      }),
    ),
  }),
  annotations: { readOnlyHint: true, openWorldHint: false },
  allowedDuringReview: true,
  async handler(_input, { services, caller }) {
    const now = services.clock.now();
    const reviews = childrenAwaitingLeader(services.registry.state, caller)
      .map((child) => {
        const handoff = (child.review ?? child.termination_request)!;
        return {
          agent_id: child.agent_id,
          role: child.role ?? child.skill,
          review_pending_ts: handoff.since,
          age_s: Math.max(0, now - handoff.since),
          summary: normaliseWords(handoff.detail),
          name: child.name,
          pending: child.review ? ('review' as const) : ('termination' as const),
        };
      })
      .sort((a, b) => a.review_pending_ts - b.review_pending_ts);
    return { reviews };
  },
});
