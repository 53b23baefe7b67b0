import { z } from 'zod';
import { validatePlanGraph, initialStatus, type PlanTaskSpec } from '../registry/plan-graph.js';
import { planPath, writePlanFile } from '../runtime/plan-files.js';
import { definePrimitive } from './define.js';
import { PrimitiveError } from './errors.js';

const taskSpecSchema = z.strictObject({
  id: z.string().min(1, 'must not be empty').describe('Your id for this task, unique in the plan; used by spawn_agent and depends_on.'),
  role: z.string().min(1, 'must not be empty').describe('Display name of the agent that will run it.'),
  skill: z.string().min(1, 'must name a skill').describe('Skill name, e.g. "worker".'),
  task: z.string().min(1, 'must not be empty').describe('The first message the agent receives; self-contained.'),
  description: z.string().default('').describe('Substituted into {role_description}.'),
  model: z.string().min(1).optional().describe('Model override.'),
  depends_on: z.array(z.string()).default([]).describe('Ids of tasks in this plan that must be done first.'),
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
    'unknown_skill, plan_already_declared.',
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
    const { registry, skills, ids, locks, config } = services;
    return locks.plan.with(caller.agent_id, async () => {
      if (caller.active_plan_id) {
        throw new PrimitiveError('plan_already_declared', `you already have an active plan (${caller.active_plan_id}); call remove_plan first to replan`, {
          plan_id: caller.active_plan_id,
        });
      }
      const specs: PlanTaskSpec[] = input.tasks.map((t) => ({ ...t, model: t.model ?? null }));
      const problem = validatePlanGraph(specs);
      if (problem) throw planError(problem);
      for (const [i, t] of specs.entries()) {
        if (!skills.has(t.skill)) {
          throw new PrimitiveError('unknown_skill', `tasks[${i}].skill "${t.skill}" does not resolve to a SKILL.md`, {
            field: `tasks[${i}].skill`,
            skill: t.skill,
            available: skills.names(),
          });
        }
      }
      const planId = ids.next('pl');
      const file = planPath(config.home, caller.task_id, planId);
      const tasks = specs.map((t) => ({ ...t, status: initialStatus(t) as 'ready' | 'blocked' }));
      // The file first: if it cannot be written, nothing changes.
      writePlanFile(file, { plan_id: planId, task_id: caller.task_id, owner_agent_id: caller.agent_id, tasks: specs });
      await registry.commit([
        { event: 'plan_declared', task_id: caller.task_id, plan_id: planId, owner_agent_id: caller.agent_id, team_id: null, plan_path: file, tasks },
      ]);
      return {
        plan_id: planId,
        plan_path: file,
        tasks: tasks.map(({ id, role, skill, depends_on, status }) => ({ id, role, skill, depends_on, status })),
      };
    });
  },
});

function planError(problem: NonNullable<ReturnType<typeof validatePlanGraph>>): PrimitiveError {
  switch (problem.code) {
    case 'empty_plan':
      return new PrimitiveError('empty_plan', 'tasks is empty; a plan needs at least one task');
    case 'duplicate_task_id':
      return new PrimitiveError('duplicate_task_id', `tasks[${problem.indexes[0]}] and tasks[${problem.indexes[1]}] share the id "${problem.id}"`, {
        id: problem.id,
        indexes: problem.indexes,
      });
    case 'self_dep':
      return new PrimitiveError('self_dep', `tasks[${problem.index}] ("${problem.id}") lists itself in depends_on`, { id: problem.id, field: `tasks[${problem.index}].depends_on` });
    case 'unknown_dep':
      return new PrimitiveError('unknown_dep', `tasks[${problem.index}] ("${problem.id}") depends on "${problem.dep}", which is not a task of this plan`, {
        id: problem.id,
        dep: problem.dep,
        field: `tasks[${problem.index}].depends_on`,
      });
    case 'cycle_detected':
      return new PrimitiveError('cycle_detected', `the dependencies form a cycle: ${problem.chain.join(' -> ')}`, { chain: problem.chain });
  }
}
