import type { EventDraft } from '../events/catalogue.js';
import {
  initialStatus,
  newlyReady,
  unmetDeps,
  validatePlanGraph,
  type PlanGraphError,
  type PlanTaskSpec,
} from '../registry/plan-graph.js';
import { activePlan, depthOfTeamLedBy } from '../registry/queries.js';
import type { AgentRecord, PlanRecord, RegistryState } from '../registry/state.js';
import { agentDrafts, assertDepthAllowed, teamDrafts, type SkillSource } from './agents.js';
import type { DomainContext } from './context.js';
import { DomainError } from './errors.js';
import { assertAgentsPerTask, assertContentSize, assertPlanTasks, assertTeamsPerLeader } from './limits.js';

/**
 * Plans: `declare_plan`, `remove_plan` and `spawn_agent` as decisions. The event log holds
 * the plan (`plan_declared` carries it whole) and every plan-task state; the plan store
 * (`registry/plan-store.ts`: a file `plans/{task_id}/{plan_id}.json`, or a row in
 * PostgreSQL) keeps a human-readable copy, written before the event, and marked removed
 * when the plan is removed.
 */

/** Where the store keeps a plan's copy: what `plan_path` says. */
export type PlanLocator = (taskId: string, planId: string) => string;

/** The plan file: readable JSON with one task per line (indenting every dependency would double its size). */
function planFileText(head: Record<string, string>, specs: readonly PlanTaskSpec[]): string {
  const fields = Object.entries(head).map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)},`);
  return [
    '{',
    ...fields,
    '  "tasks": [',
    specs.map((t) => `    ${JSON.stringify(t)}`).join(',\n'),
    '  ]',
    '}',
    '',
  ].join('\n');
}

export interface DeclaredPlan {
  planId: string;
  /** Its `plan_path`. */
  file: string;
  /** The plan's readable copy, for the plan store to keep before `drafts` are committed. */
  text: string;
  tasks: Array<PlanTaskSpec & { status: 'ready' | 'blocked' }>;
  drafts: EventDraft[];
}

export function declarePlan(
  ctx: DomainContext,
  caller: AgentRecord,
  specs: PlanTaskSpec[],
  skills: SkillSource,
  locate: PlanLocator,
): DeclaredPlan {
  if (caller.active_plan_id) {
    throw new DomainError(
      'plan_already_declared',
      `you already have an active plan (${caller.active_plan_id}); call remove_plan first to replan`,
      {
        plan_id: caller.active_plan_id,
      },
    );
  }
  assertPlanTasks(ctx, 'tasks', specs.length);
  // A plan task's text becomes its agent's first message: capped like a message.
  for (const [i, t] of specs.entries()) {
    assertContentSize(ctx.config, `tasks[${i}].task`, t.task);
    assertContentSize(ctx.config, `tasks[${i}].description`, t.description);
  }
  const problem = validatePlanGraph(specs);
  if (problem) throw planGraphError(problem);
  // Each distinct skill is looked up once: a lookup scans the skills folders.
  const known = new Set<string>();
  for (const [i, t] of specs.entries()) {
    if (known.has(t.skill)) continue;
    if (!skills.has(t.skill)) {
      throw new DomainError('unknown_skill', `tasks[${i}].skill "${t.skill}" does not resolve to a SKILL.md`, {
        field: `tasks[${i}].skill`,
        skill: t.skill,
        available: skills.names(),
      });
    }
    known.add(t.skill);
  }
  const planId = ctx.ids.next('pl');
  const file = locate(caller.task_id, planId);
  const tasks = specs.map((t) => ({ ...t, status: initialStatus(t) as 'ready' | 'blocked' }));
  const text = planFileText({ plan_id: planId, task_id: caller.task_id, owner_agent_id: caller.agent_id }, specs);
  const drafts: EventDraft[] = [
    {
      event: 'plan_declared',
      task_id: caller.task_id,
      plan_id: planId,
      owner_agent_id: caller.agent_id,
      team_id: null,
      plan_path: file,
      tasks,
    },
  ];
  return { planId, file, text, tasks, drafts };
}

/** Refuses while any task is in flight; the caller marks the stored copy removed, then commits. */
export function removePlan(ctx: DomainContext, caller: AgentRecord): { plan: PlanRecord; drafts: EventDraft[] } {
  const plan = activePlan(ctx.state, caller);
  if (!plan) throw new DomainError('no_active_plan', 'you have no active plan');
  const inFlight = [...plan.tasks.values()].filter((t) => t.status === 'in_flight');
  if (inFlight.length > 0) {
    throw new DomainError(
      'plan_in_use',
      `tasks ${inFlight.map((t) => t.id).join(', ')} are in flight; approve (terminate_child) or force-terminate their agents first`,
      { in_flight: inFlight.map((t) => ({ task_id: t.id, agent_id: t.agent_id })) },
    );
  }
  return {
    plan,
    drafts: [
      { event: 'plan_removed', task_id: caller.task_id, plan_id: plan.plan_id, owner_agent_id: caller.agent_id },
    ],
  };
}

export function activePlanOrRefuse(ctx: Pick<DomainContext, 'state'>, caller: AgentRecord): PlanRecord {
  const plan = activePlan(ctx.state, caller);
  if (!plan) throw new DomainError('no_active_plan', 'you have no active plan; declare one with declare_plan');
  return plan;
}

/** The plan task `spawn_agent` may spawn now: it exists and is ready. */
function spawnablePlanTask(ctx: Pick<DomainContext, 'state'>, caller: AgentRecord, planTaskId: string) {
  const plan = activePlanOrRefuse(ctx, caller);
  const planTask = plan.tasks.get(planTaskId);
  if (!planTask) {
    throw new DomainError('unknown_task', `"${planTaskId}" is not a task of your plan ${plan.plan_id}`, {
      task_id: planTaskId,
      tasks: [...plan.tasks.keys()],
    });
  }
  if (planTask.status === 'blocked') {
    const unmet = unmetDeps(plan.tasks, planTask.depends_on);
    throw new DomainError('task_not_ready', `"${planTaskId}" waits on ${unmet.join(', ')}`, {
      task_id: planTaskId,
      unmet_deps: unmet,
    });
  }
  if (planTask.status !== 'ready') {
    throw new DomainError('task_not_pending', `"${planTaskId}" is already ${planTask.status}`, {
      task_id: planTaskId,
      status: planTask.status,
      agent_id: planTask.agent_id,
    });
  }
  return { plan, planTask };
}

/** The team a caller's spawns go into, and its depth: the plan team, or a new one (refused past the cap). */
function spawnTeam(ctx: Pick<DomainContext, 'state' | 'config'>, caller: AgentRecord) {
  const existing = caller.plan_team_id ? ctx.state.teams.get(caller.plan_team_id) : undefined;
  const depth = existing?.depth ?? depthOfTeamLedBy(ctx.state, caller);
  assertDepthAllowed(ctx, depth, 'remove_plan and do this work at a shallower level');
  return { existing, depth };
}

/**
 * One agent for a ready plan task. The caller's first spawn creates its team (lazily:
 * `team_created` precedes the first `agent_spawned` of the team).
 */
export function spawnForPlanTask(
  ctx: DomainContext,
  caller: AgentRecord,
  planTaskId: string,
  skills: SkillSource,
): { agentId: string; teamId: string; teamCreated: boolean; plan: PlanRecord; drafts: EventDraft[] } {
  const { plan, planTask } = spawnablePlanTask(ctx, caller, planTaskId);
  const { existing, depth } = spawnTeam(ctx, caller);
  if (!existing) assertTeamsPerLeader(ctx, caller);
  assertAgentsPerTask(ctx, caller.task_id, 1);
  const skill = skills.require(
    planTask.skill,
    null,
    `the skill "${planTask.skill}" of "${planTaskId}" could not be loaded`,
  );
  const drafts: EventDraft[] = [];
  const team = existing ?? { team_id: ctx.ids.next('tm'), name: `team-${caller.name}` };
  if (!existing) {
    const text = ctx.state.tasks.get(caller.task_id)?.text ?? '';
    drafts.push(
      ...teamDrafts(
        ctx,
        caller,
        { team_id: team.team_id, name: team.name, depth, task: text, rules: [] },
        'spawn_agent',
      ),
    );
  }
  const agentId = ctx.ids.next('ag');
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
    {
      event: 'task_spawned',
      task_id: caller.task_id,
      plan_id: plan.plan_id,
      plan_task_id: planTaskId,
      team_id: team.team_id,
      agent_id: agentId,
    },
  );
  return { agentId, teamId: team.team_id, teamCreated: !existing, plan, drafts };
}

/**
 * The plan side of a child's end: approval drives its plan task `in_flight → done` and
 * readies the dependents it unblocks; a forced end drives it to `failed`.
 */
export function planOutcomeDrafts(
  state: RegistryState,
  child: AgentRecord,
  outcome: 'done' | 'failed',
  reason: string,
): EventDraft[] {
  if (!child.plan_id || !child.plan_task_id) return [];
  const plan = state.plans.get(child.plan_id);
  const planTask = plan?.tasks.get(child.plan_task_id);
  if (!plan || !planTask || planTask.status !== 'in_flight') return [];
  const base = { task_id: child.task_id, plan_id: plan.plan_id };
  if (outcome === 'failed') return [{ event: 'task_failed', ...base, plan_task_id: planTask.id, reason }];
  const after = new Map(
    [...plan.tasks].map(([id, t]) => [
      id,
      { status: id === planTask.id ? ('done' as const) : t.status, depends_on: t.depends_on },
    ]),
  );
  return [
    { event: 'task_done', ...base, plan_task_id: planTask.id },
    ...newlyReady(after).map((id) => ({ event: 'task_ready' as const, ...base, plan_task_id: id })),
  ];
}

function planGraphError(problem: PlanGraphError): DomainError {
  switch (problem.code) {
    case 'empty_plan':
      return new DomainError('empty_plan', 'tasks is empty; a plan needs at least one task');
    case 'duplicate_task_id':
      return new DomainError(
        'duplicate_task_id',
        `tasks[${problem.indexes[0]}] and tasks[${problem.indexes[1]}] share the id "${problem.id}"`,
        {
          id: problem.id,
          indexes: problem.indexes,
        },
      );
    case 'self_dep':
      return new DomainError('self_dep', `tasks[${problem.index}] ("${problem.id}") lists itself in depends_on`, {
        id: problem.id,
        field: `tasks[${problem.index}].depends_on`,
      });
    case 'unknown_dep':
      return new DomainError(
        'unknown_dep',
        `tasks[${problem.index}] ("${problem.id}") depends on "${problem.dep}", which is not a task of this plan`,
        {
          id: problem.id,
          dep: problem.dep,
          field: `tasks[${problem.index}].depends_on`,
        },
      );
    case 'cycle_detected':
      return new DomainError('cycle_detected', `the dependencies form a cycle: ${problem.chain.join(' -> ')}`, {
        chain: problem.chain,
      });
  }
}
