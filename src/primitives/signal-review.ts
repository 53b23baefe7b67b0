import { z } from 'zod';
import type { EventDraft } from '../events/catalogue.js';
import { USER } from '../registry/state.js';
import { toLeaderDraft } from '../runtime/messages.js';
import { definePrimitive } from './define.js';
import { PrimitiveError } from './errors.js';

const ENVELOPES = ['[review required]', '[iteration ready]'];

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
  async handler({ detail }, ctx) {
    const { services, caller } = ctx;
    const { registry } = services;
    if (detail.trim().length === 0) {
      throw new PrimitiveError('envelope_missing', 'detail is empty; write a report starting with [REVIEW REQUIRED]', { reason: 'detail_empty' });
    }
    const lower = detail.toLowerCase();
    if (!ENVELOPES.some((marker) => lower.includes(marker))) {
      throw new PrimitiveError(
        'envelope_missing',
        'detail lacks the [REVIEW REQUIRED] (or [ITERATION READY]) envelope; add it with your deliverables, open questions and the leader\'s options',
        { reason: 'envelope_missing' },
      );
    }
    const team = caller.team_id ? registry.team(caller.team_id) : undefined;
    const allDone = team
      ? team.member_ids.every((id) => {
          if (id === caller.agent_id) return true;
          const m = registry.agent(id);
          return !m || m.terminate_consumed || m.review !== null || m.termination_request !== null;
        })
      : null;
    const drafts: EventDraft[] = [
      { event: 'status', task_id: caller.task_id, agent_id: caller.agent_id, state: 'review_pending', detail },
      { event: 'liveness_check', task_id: caller.task_id, agent_id: caller.agent_id, team_id: caller.team_id, all_done: allDone },
    ];
    // To the leader's inbox, or for the root, to the user gateway: in the same commit.
    if (caller.leader_id !== USER) drafts.push(toLeaderDraft(services, caller, 'review_report', detail));
    else drafts.push(...services.gateway.rootReviewDrafts(caller, detail));
    await registry.commit(drafts);
    return { recorded: true as const, review_pending: true as const };
  },
});
