import { z } from 'zod';
import type { EventDraft } from '../events/catalogue.js';
import { activePlan } from '../registry/queries.js';
import { USER } from '../registry/state.js';
import { toLeaderDraft } from '../runtime/messages.js';
import { definePrimitive } from './define.js';
import { PrimitiveError } from './errors.js';

export const requestTermination = definePrimitive({
  name: 'request_termination',
  title: 'Request termination',
  description: [
    'Declare that your whole lifecycle\'s work is complete and ask your leader to terminate you. Usually the last call you make:',
    'afterwards end your turn and call no more tools. Your leader either terminates you or messages you (rejected: keep working).',
    'It does not signal a review; call signal_review first if you want one. Error: plan_incomplete (your plan still has tasks not done or failed).',
  ].join(' '),
  inputSchema: z.strictObject({
    detail: z.string().optional().describe('Optional summary of the completed work.'),
  }),
  outputSchema: z.object({ recorded: z.literal(true), termination_requested: z.literal(true) }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async handler({ detail }, { services, caller }) {
    const { registry } = services;
    const plan = activePlan(registry.state, caller);
    if (plan) {
      const unfinished = [...plan.tasks.values()].filter((t) => t.status !== 'done' && t.status !== 'failed');
      if (unfinished.length > 0) {
        throw new PrimitiveError('plan_incomplete', `your plan still has unfinished tasks: ${unfinished.map((t) => `${t.id} (${t.status})`).join(', ')}`, {
          plan_id: plan.plan_id,
          unfinished: unfinished.map((t) => ({ task_id: t.id, status: t.status })),
        });
      }
    }
    const text = detail ?? '';
    const drafts: EventDraft[] = [{ event: 'status', task_id: caller.task_id, agent_id: caller.agent_id, state: 'termination_requested', detail: text }];
    if (caller.leader_id !== USER) {
      const content = `[TERMINATION REQUESTED] ${caller.name} reports its work complete and asks to be terminated (terminate_child to accept, send_message to reject).${text ? `\n\n${text}` : ''}`;
      drafts.push(toLeaderDraft(services, caller, 'termination_request', content));
    }
    if (caller.leader_id === USER) drafts.push(...services.gateway.rootTerminationDrafts(caller, text));
    await registry.commit(drafts);
    return { recorded: true as const, termination_requested: true as const };
  },
});
