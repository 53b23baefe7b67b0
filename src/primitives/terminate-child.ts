import { z } from 'zod';
import type { EventDraft } from '../events/catalogue.js';
import { planOutcomeDrafts, terminationDrafts } from '../runtime/agents.js';
import { definePrimitive } from './define.js';
import { PrimitiveError } from './errors.js';

export const terminateChild = definePrimitive({
  name: 'terminate_child',
  title: 'Terminate a child (approve)',
  description: [
    'Approve a direct child\'s hand-off: ends the agent (and, depth-first, every team it leads) and marks its plan task done, which may make',
    'other tasks ready (see list_ready). Allowed only when the child signalled review or requested termination, unless force: true, which',
    'ends it anyway and marks its plan task failed (audited; use sparingly). Only for members of teams you lead, never deeper.',
    'Errors: unknown_agent, not_leader, already_terminating, child_not_pending_review (wait for signal_review, send rework, or force).',
  ].join(' '),
  inputSchema: z.strictObject({
    agent_id: z.string().min(1, 'must be an agent id').describe('The child to terminate.'),
    force: z.boolean().default(false).describe('Terminate even without a pending review (marks its plan task failed).'),
  }),
  outputSchema: z.object({ sentinel_posted: z.literal(true) }),
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  allowedDuringReview: true,
  async handler({ agent_id: targetId, force }, { services, caller }) {
    const { registry } = services;
    const target = registry.agent(targetId);
    if (!target || target.task_id !== caller.task_id) {
      throw new PrimitiveError('unknown_agent', `no agent ${targetId} in your task; use list_peers with scope "children"`, { agent_id: targetId });
    }
    const team = target.team_id ? registry.team(target.team_id) : undefined;
    if (!team || team.leader_id !== caller.agent_id || target.agent_id === caller.agent_id) {
      throw new PrimitiveError('not_leader', `you do not lead ${target.name}'s team; only its own leader may terminate it`, {
        agent_id: targetId,
        leader_id: team?.leader_id ?? target.leader_id,
      });
    }
    if (target.terminate_posted) {
      throw new PrimitiveError('already_terminating', `${target.name} is already ${target.terminate_consumed ? 'terminated' : 'terminating'}; nothing to do`, {
        agent_id: targetId,
      });
    }
    const pending = target.review !== null || target.termination_request !== null;
    if (!pending && !force) {
      throw new PrimitiveError(
        'child_not_pending_review',
        `${target.name} has not signalled review; wait for its signal_review, send rework with send_message, or pass force: true`,
        { agent_id: targetId },
      );
    }
    const state = registry.state;
    const drafts: EventDraft[] = [];
    if (pending) {
      drafts.push({ event: 'completion.approved', task_id: caller.task_id, agent_id: targetId, leader_id: caller.agent_id });
      drafts.push(...planOutcomeDrafts(state, target, 'done', 'approved'));
    } else {
      drafts.push({ event: 'terminate.forced', task_id: caller.task_id, caller_id: caller.agent_id, agent_id: targetId, team_id: target.team_id, reason: 'leader_force' });
      drafts.push(...planOutcomeDrafts(state, target, 'failed', 'leader_force'));
    }
    drafts.push(...terminationDrafts(state, caller.agent_id, target, pending ? 'leader' : 'leader_force'));
    await registry.commit(drafts);
    return { sentinel_posted: true as const };
  },
});
