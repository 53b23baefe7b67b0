import { z } from 'zod';
import { DomainError } from '../domain/errors.js';
import * as plans from '../domain/plans.js';
import { readyTasks } from '../registry/queries.js';
import { definePrimitive } from './define.js';
import { nameField } from './fields.js';

export const spawnAgent = definePrimitive({
  name: 'spawn_agent',
  title: 'Spawn an agent for a plan task',
  description: [
    'Spawn one agent for a ready task of your active plan. Your first spawn creates your team (you lead it; team_created: true).',
    'The agent gets the task text as its first message, after a [TASK ASSIGNMENT] block with its plan_task_id and artifacts_path.',
    'Returns remaining_ready: other tasks you can spawn now. Errors: no_active_plan, unknown_task, task_not_ready (details.unmet_deps),',
    'task_not_pending (already in flight, done or failed), depth_exceeded (teams nest too deep: remove_plan and do it at a shallower level),',
    'unknown_skill, concurrent_spawn (one spawn at a time), limit_exceeded (details.limit: agents_per_task, the task has',
    'BEIDOU_MAX_AGENTS_PER_TASK agents; teams_per_leader, your first spawn would pass BEIDOU_MAX_TEAMS_PER_LEADER teams).',
  ].join(' '),
  inputSchema: z.strictObject({
    task_id: nameField().describe('Id of a ready task in your active plan.'),
  }),
  outputSchema: z.object({
    agent_id: z.string(),
    team_id: z.string(),
    task_id: z.string(),
    remaining_ready: z.array(z.string()),
    team_created: z.boolean(),
  }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async handler({ task_id: planTaskId }, { services, caller }) {
    const { registry, skills, locks, domain } = services;
    const locked = await locks.spawn.tryWith(`spawn_agent:${caller.agent_id}`, async () => {
      const spawned = plans.spawnForPlanTask(domain, caller, planTaskId, skills);
      await registry.commit(spawned.drafts, { writer: caller.agent_id });
      return {
        agent_id: spawned.agentId,
        team_id: spawned.teamId,
        task_id: planTaskId,
        // Read after the commit: the spawned task is in flight now.
        remaining_ready: readyTasks(spawned.plan),
        team_created: spawned.teamCreated,
      };
    });
    if (!locked.acquired) {
      throw new DomainError('concurrent_spawn', 'you already have a spawn_agent call in flight; wait for it to return');
    }
    return locked.value;
  },
});
