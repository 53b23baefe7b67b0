import { z } from 'zod';
import * as reviews from '../domain/reviews.js';
import { definePrimitive } from './define.js';
import { nameField } from './fields.js';

export const terminateChild = definePrimitive({
  name: 'terminate_child',
  title: 'Terminate a child (approve)',
  description: [
    "Approve a direct child's hand-off: ends the agent (and, depth-first, every team it leads) and marks its plan task done, which may make",
    'other tasks ready (see list_ready). Allowed only when the child signalled review or requested termination, unless force: true, which',
    'ends it anyway and marks its plan task failed (audited; use sparingly). Only for members of teams you lead, never deeper.',
    'Errors: unknown_agent, not_leader, already_terminating, child_not_pending_review (wait for signal_review, send rework, or force).',
  ].join(' '),
  inputSchema: z.strictObject({
    agent_id: nameField().describe('The child to terminate.'),
    force: z.boolean().default(false).describe('Terminate even without a pending review (marks its plan task failed).'),
  }),
  outputSchema: z.object({ sentinel_posted: z.literal(true) }),
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  allowedDuringReview: true,
  async handler({ agent_id: targetId, force }, { services, caller }) {
    await services.registry.commit(reviews.terminateChild(services.domain, caller, targetId, force), {
      writer: caller.agent_id,
    });
    return { sentinel_posted: true as const };
  },
});
