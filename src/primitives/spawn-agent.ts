import { z } from 'zod';
import type { EventDraft } from '../events/catalogue.js';
import { unmetDeps } from '../registry/plan-graph.js';
import { activePlan, depthOfTeamLedBy, readyTasks } from '../registry/queries.js';
import { agentDrafts } from '../runtime/agents.js';
import { SkillLoadError, type Skill } from '../skills/loader.js';
import { definePrimitive } from './define.js';
import { PrimitiveError } from './errors.js';

export const spawnAgent = definePrimitive({
  name: 'spawn_agent',
  title: 'Spawn an agent for a plan task',
  description: [
    'Spawn one agent for a ready task of your active plan. Your first spawn creates your team (you lead it; team_created: true).',
    'The agent gets the task text as its first message, after a [TASK ASSIGNMENT] block with its plan_task_id and artifacts_path.',
    'Returns remaining_ready: other tasks you can spawn now. Errors: no_active_plan, unknown_task, task_not_ready (details.unmet_deps),',
    'task_not_pending (already in flight, done or failed), depth_exceeded (teams nest too deep: remove_plan and do it at a shallower level),',
    'unknown_skill, concurrent_spawn (one spawn at a time).',
  ].join(' '),
  inputSchema: z.strictObject({
    task_id: z.string().min(1, 'must name a task of your plan').describe('Id of a ready task in your active plan.'),
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
    const { registry, config, skills, ids, locks } = services;
    const locked = await locks.spawn.tryWith(`spawn_agent:${caller.agent_id}`, async () => {
      const plan = activePlan(registry.state, caller);
      if (!plan) throw new PrimitiveError('no_active_plan', 'you have no active plan; declare one with declare_plan');
      const planTask = plan.tasks.get(planTaskId);
      if (!planTask) {
        throw new PrimitiveError('unknown_task', `"${planTaskId}" is not a task of your plan ${plan.plan_id}`, {
          task_id: planTaskId,
          tasks: [...plan.tasks.keys()],
        });
      }
      if (planTask.status === 'blocked') {
        const unmet = unmetDeps(plan.tasks, planTask.depends_on);
        throw new PrimitiveError('task_not_ready', `"${planTaskId}" waits on ${unmet.join(', ')}`, { task_id: planTaskId, unmet_deps: unmet });
      }
      if (planTask.status !== 'ready') {
        throw new PrimitiveError('task_not_pending', `"${planTaskId}" is already ${planTask.status}`, {
          task_id: planTaskId,
          status: planTask.status,
          agent_id: planTask.agent_id,
        });
      }
      const existingTeam = caller.plan_team_id ? registry.team(caller.plan_team_id) : undefined;
      const depth = existingTeam?.depth ?? depthOfTeamLedBy(registry.state, caller);
      if (depth > config.maxDepth) {
        throw new PrimitiveError(
          'depth_exceeded',
          `a team led by you would be at depth ${depth}, past the cap of ${config.maxDepth}; remove_plan and do this work at a shallower level`,
          { depth, max_depth: config.maxDepth },
        );
      }
      let skill: Skill;
      try {
        skill = skills.load(planTask.skill);
      } catch (err) {
        throw new PrimitiveError('unknown_skill', `the skill "${planTask.skill}" of "${planTaskId}" could not be loaded`, {
          skill: planTask.skill,
          reason: err instanceof SkillLoadError ? err.message : String(err),
        });
      }

      const drafts: EventDraft[] = [];
      const team = existingTeam ?? { team_id: ids.next('tm'), name: `team-${caller.name}` };
      if (!existingTeam) {
        // Lazy team creation: team_created precedes the first agent_spawned of the team.
        drafts.push({
          event: 'team_created',
          task_id: caller.task_id,
          team_id: team.team_id,
          name: team.name,
          leader_id: caller.agent_id,
          parent_team_id: caller.team_id,
          depth,
          task: registry.task(caller.task_id)?.text ?? '',
          rules: [],
          via: 'spawn_agent',
        });
        if (depth > config.depthWarning) {
          drafts.push({ event: 'depth.warning', task_id: caller.task_id, team_id: team.team_id, depth, max_depth: config.maxDepth });
        }
      }
      const agentId = ids.next('ag');
      drafts.push(
        ...agentDrafts({
          agentId,
          taskId: caller.task_id,
          role: planTask.role,
          skill,
          description: planTask.description,
          model: planTask.model,
          team,
          leaderId: caller.agent_id,
          leaderName: caller.name,
          plan: { planId: plan.plan_id, planTaskId },
          task: planTask.task,
          projectWorkspace: caller.project_workspace_path,
          launch: true,
        }),
        { event: 'task_spawned', task_id: caller.task_id, plan_id: plan.plan_id, plan_task_id: planTaskId, team_id: team.team_id, agent_id: agentId },
      );
      await registry.commit(drafts);
      return {
        agent_id: agentId,
        team_id: team.team_id,
        task_id: planTaskId,
        remaining_ready: readyTasks(plan),
        team_created: !existingTeam,
      };
    });
    if (!locked.acquired) {
      throw new PrimitiveError('concurrent_spawn', 'you already have a spawn_agent call in flight; wait for it to return');
    }
    return locked.value;
  },
});
