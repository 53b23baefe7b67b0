import { z } from 'zod';
import { activePlanOrRefuse } from '../domain/plans.js';
import { readyTasks } from '../registry/queries.js';
import { definePrimitive } from './define.js';

export const listReady = definePrimitive({
  name: 'list_ready',
  title: 'List ready tasks',
  description:
    'The task ids of your active plan that are ready to spawn (all dependencies done, not yet spawned). Call it after approvals to see what became ready. Read-only. Error: no_active_plan.',
  inputSchema: z.strictObject({}),
  outputSchema: z.object({ ready: z.array(z.string()) }),
  annotations: { readOnlyHint: true, openWorldHint: false },
  async handler(_input, { services, caller }) {
    const plan = activePlanOrRefuse(services.domain, caller);
    return { ready: readyTasks(plan) };
  },
});
