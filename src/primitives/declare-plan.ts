import { z } from 'zod';
import * as plans from '../domain/plans.js';
import type { PlanTaskSpec } from '../registry/plan-graph.js';
import { definePrimitive } from './define.js';
import { nameField } from './fields.js';

/** The longest model name a plan task may carry (real ones are ~40 characters). */
const MAX_MODEL_CHARS = 256;

/** Dependencies one plan task may list. */
export const MAX_DEPENDENCIES = 50;

const taskSpecSchema = z.strictObject({
  id: nameField().describe('Your id for this task, unique in the plan; used by spawn_agent and depends_on.'),
  role: nameField().describe('Display name of the agent that will run it.'),
  skill: z.string().min(1, 'must name a skill').describe('Skill name, e.g. "worker".'),
  task: z.string().min(1, 'must not be empty').describe('The first message the agent receives; self-contained.'),
  description: z.string().default('').describe('Substituted into {role_description}.'),
  model: z.string().min(1).max(MAX_MODEL_CHARS).optional().describe('Model override.'),
  // Bounded so that the largest plan the defaults allow stays a short request (docs/performance.md).
  depends_on: z
    .array(z.string())
    .max(MAX_DEPENDENCIES, `must list at most ${MAX_DEPENDENCIES} tasks`)
    .default([])
    .describe(
      `Ids of tasks in this plan that must be done first (any other is unknown_dep); at most ${MAX_DEPENDENCIES}.`,
    ),
});

const planTaskView = z.object({
  id: z.string(),
  role: z.string(),
  skill: z.string(),
  depends_on: z.array(z.string()),
  status: z.enum(['ready', 'blocked', 'in_flight', 'done', 'failed']),
});

export const declarePlan = definePrimitive({
  name: 'declare_plan',
  title: 'Declare a plan',
  description: [
    'Declare the DAG of tasks you will spawn agents for. Pure data: validates, persists and computes readiness; it creates no team and no agent.',
    'Then call spawn_agent for each ready task. One active plan per agent: call remove_plan first to replan.',
    'Errors (nothing is written on error): empty_plan, duplicate_task_id, self_dep, unknown_dep, cycle_detected (details.chain names the cycle),',
    'unknown_skill, plan_already_declared, limit_exceeded (details.limit plan_tasks: more tasks than BEIDOU_MAX_PLAN_TASKS).',
  ].join(' '),
  inputSchema: z.strictObject({
    tasks: z.array(taskSpecSchema).describe('One entry per node of the DAG.'),
  }),
  outputSchema: z.object({
    plan_id: z.string(),
    plan_path: z.string(),
    tasks: z.array(planTaskView),
  }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async handler(input, { services, caller }) {
    const { registry, skills, locks, domain, plans: planStore } = services;
    return locks.plan.with(caller.agent_id, async () => {
      const specs: PlanTaskSpec[] = input.tasks.map((t) => ({ ...t, model: t.model ?? null }));
      const plan = plans.declarePlan(domain, caller, specs, skills, (taskId, planId) =>
        planStore.location(taskId, planId),
      );
      // Paid first, then the copy: if either is refused, nothing changes; a commit that
      // fails after the copy takes the copy back. (The plan lock keeps the caller's own
      // declare_plan and remove_plan calls in order meanwhile.)
      services.writeBudget.reserve(caller.agent_id, plan.drafts);
      const copy = {
        taskId: caller.task_id,
        planId: plan.planId,
        ownerAgentId: caller.agent_id,
        location: plan.file,
        text: plan.text,
      };
      await planStore.save(copy);
      try {
        await registry.commit(plan.drafts);
      } catch (err) {
        await planStore.discard(copy).catch(() => undefined);
        throw err;
      }
      return {
        plan_id: plan.planId,
        plan_path: plan.file,
        tasks: plan.tasks.map(({ id, role, skill, depends_on, status }) => ({ id, role, skill, depends_on, status })),
      };
    });
  },
});
