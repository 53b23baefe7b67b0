import { z } from 'zod';
import * as plans from '../domain/plans.js';
import { definePrimitive } from './define.js';

export const removePlan = definePrimitive({
  name: 'remove_plan',
  title: 'Remove your plan',
  description: [
    'Remove your active plan so you can declare a new one (e.g. the user changed their mind). Your team stays.',
    'Refused with plan_in_use while any task is in flight (approve or force-terminate those agents first; details list them),',
    'and no_active_plan when you have none. The plan file is kept as {plan_id}.removed.json for audit (with a database, its row is marked removed).',
  ].join(' '),
  inputSchema: z.strictObject({}),
  outputSchema: z.object({ removed_plan_id: z.string() }),
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  async handler(_input, { services, caller }) {
    const { registry, locks, domain, plans: planStore, writeBudget } = services;
    return locks.plan.with(caller.agent_id, async () => {
      const { plan, drafts } = plans.removePlan(domain, caller);
      // Paid before the file is touched (a refusal after the rename would strand the plan).
      writeBudget.reserve(caller.agent_id, drafts);
      await planStore.markRemoved(plan);
      try {
        await registry.commit(drafts);
      } catch (err) {
        await planStore.unmarkRemoved(plan).catch(() => undefined);
        throw err;
      }
      return { removed_plan_id: plan.plan_id };
    });
  },
});
