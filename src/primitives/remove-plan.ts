import { z } from 'zod';
import { activePlan } from '../registry/queries.js';
import { markPlanFileRemoved } from '../runtime/plan-files.js';
import { definePrimitive } from './define.js';
import { PrimitiveError } from './errors.js';

export const removePlan = definePrimitive({
  name: 'remove_plan',
  title: 'Remove your plan',
  description: [
    'Remove your active plan so you can declare a new one (e.g. the user changed their mind). Your team stays.',
    'Refused with plan_in_use while any task is in flight (approve or force-terminate those agents first; details list them),',
    'and no_active_plan when you have none. The plan file is kept as {plan_id}.removed.json for audit.',
  ].join(' '),
  inputSchema: z.strictObject({}),
  outputSchema: z.object({ removed_plan_id: z.string() }),
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  async handler(_input, { services, caller }) {
    const { registry, locks } = services;
    return locks.plan.with(caller.agent_id, async () => {
      const plan = activePlan(registry.state, caller);
      if (!plan) throw new PrimitiveError('no_active_plan', 'you have no active plan');
      const inFlight = [...plan.tasks.values()].filter((t) => t.status === 'in_flight');
      if (inFlight.length > 0) {
        throw new PrimitiveError(
          'plan_in_use',
          `tasks ${inFlight.map((t) => t.id).join(', ')} are in flight; approve (terminate_child) or force-terminate their agents first`,
          { in_flight: inFlight.map((t) => ({ task_id: t.id, agent_id: t.agent_id })) },
        );
      }
      markPlanFileRemoved(plan.plan_path);
      await registry.commit([{ event: 'plan_removed', task_id: caller.task_id, plan_id: plan.plan_id, owner_agent_id: caller.agent_id }]);
      return { removed_plan_id: plan.plan_id };
    });
  },
});
