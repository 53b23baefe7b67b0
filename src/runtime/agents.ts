import path from 'node:path';
import type { EventDraft } from '../events/catalogue.js';
import { cascadeOrder } from '../registry/queries.js';
import { newlyReady } from '../registry/plan-graph.js';
import { USER, type AgentRecord, type RegistryState } from '../registry/state.js';
import type { Skill } from '../skills/loader.js';
import { assemblePrompt, firstMessage } from '../skills/prompt.js';
import { homePaths } from '../config.js';
import type { Services } from './services.js';

/**
 * Domain operations shared by the primitives and the admin API: registering agents (with
 * their launch request) and terminating them. Each returns event drafts or commits them;
 * none touches state directly.
 */

/** A new agent's display name: its role as a slug plus the id's tail, e.g. `writer-3256`. */
export function agentName(role: string | null, agentId: string): string {
  const slug = (role ?? 'root')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  // The id's random tail keeps names unique within a task and stable across restarts.
  return `${slug || 'agent'}-${agentId.slice(-4)}`;
}

export interface AgentSpec {
  agentId: string;
  taskId: string;
  role: string | null;
  skill: Skill;
  description: string;
  model: string | null;
  team: { team_id: string; name: string } | null;
  leaderId: string;
  leaderName: string;
  /** Set for a plan-spawned agent: the plan and the plan task it runs. */
  plan: { planId: string; planTaskId: string } | null;
  task: string;
  projectWorkspace: string;
  /** False for a root that a person runs (spawn: false): no launch request is queued. */
  launch: boolean;
}

export function teamWorkspace(projectWorkspace: string, teamId: string): string {
  return path.join(projectWorkspace, 'teams', teamId);
}

/** `agent_spawned` and, when launched, `launch.requested` with the assembled prompt. */
export function agentDrafts(spec: AgentSpec): EventDraft[] {
  const name = agentName(spec.role, spec.agentId);
  const workspacePath = spec.team ? teamWorkspace(spec.projectWorkspace, spec.team.team_id) : spec.projectWorkspace;
  const model = spec.model ?? spec.skill.model;
  const drafts: EventDraft[] = [
    {
      event: 'agent_spawned',
      task_id: spec.taskId,
      agent_id: spec.agentId,
      name,
      role: spec.role,
      skill: spec.skill.name,
      description: spec.description,
      model,
      team_id: spec.team?.team_id ?? null,
      leader_id: spec.leaderId,
      plan_id: spec.plan?.planId ?? null,
      plan_task_id: spec.plan?.planTaskId ?? null,
      workspace_path: workspacePath,
      project_workspace_path: spec.projectWorkspace,
    },
  ];
  if (spec.launch) {
    const prompt = assemblePrompt(spec.skill, {
      agent_id: spec.agentId,
      name,
      role: spec.role ?? 'root',
      role_description: spec.description,
      team_name: spec.team?.name ?? '(none: you are the root and lead the task)',
      leader: spec.leaderId === USER ? 'the user (through the user gateway)' : `${spec.leaderName} (${spec.leaderId})`,
      workspace_path: workspacePath,
      project_workspace_path: spec.projectWorkspace,
    });
    const planTaskId = spec.plan?.planTaskId;
    const assignment = planTaskId
      ? { plan_task_id: planTaskId, artifacts_path: path.join(spec.projectWorkspace, 'artifacts', planTaskId) }
      : undefined;
    drafts.push({
      event: 'launch.requested',
      task_id: spec.taskId,
      agent_id: spec.agentId,
      prompt,
      first_message: firstMessage(spec.task, assignment),
      model,
      workspace_path: workspacePath,
      project_workspace_path: spec.projectWorkspace,
    });
  }
  return drafts;
}

export interface NewTask {
  task: string;
  skill: Skill;
  model: string | null;
  name: string | null;
  workspace: string | null;
  spawn: boolean;
}

/** Creates a task and its root agent (teamless, its leader the user). */
export async function createTask(services: Services, input: NewTask): Promise<{ taskId: string; rootAgentId: string }> {
  const taskId = services.ids.next('tsk');
  const rootAgentId = services.ids.next('ag');
  const workspace = input.workspace ?? path.join(homePaths(services.config.home).workspaces, taskId);
  await services.registry.commit([
    {
      event: 'task_created',
      task_id: taskId,
      root_agent_id: rootAgentId,
      text: input.task,
      name: input.name,
      skill: input.skill.name,
      model: input.model,
      workspace,
      spawn: input.spawn,
    },
    ...agentDrafts({
      agentId: rootAgentId,
      taskId,
      role: null,
      skill: input.skill,
      description: '',
      model: input.model,
      team: null,
      leaderId: USER,
      leaderName: USER,
      plan: null,
      task: input.task,
      projectWorkspace: workspace,
      launch: input.spawn,
    }),
  ]);
  return { taskId, rootAgentId };
}

export type TerminateReason = 'admin' | 'leader' | 'leader_force' | 'root_approved';

/**
 * Sentinels for `target` and, depth-first, every agent in the teams it leads (deepest
 * first, `target` last). An agent no spawner runs consumes its sentinel at once (its token
 * stops working). Terminating the root ends the task.
 */
export function terminationDrafts(state: RegistryState, callerId: string, target: AgentRecord, reason: TerminateReason): EventDraft[] {
  const drafts: EventDraft[] = [];
  for (const agent of cascadeOrder(state, target)) {
    if (!agent.terminate_posted) {
      drafts.push({
        event: 'terminate.posted',
        task_id: agent.task_id,
        caller_id: callerId,
        agent_id: agent.agent_id,
        reason: agent === target ? reason : 'cascade',
      });
    }
    // A spawner ends its agent's process and then acknowledges; an agent no spawner holds
    // consumes its sentinel at once (its token stops working).
    if (!agent.spawner_id) drafts.push({ event: 'terminate.consumed', task_id: agent.task_id, agent_id: agent.agent_id, via: 'server' });
  }
  const task = state.tasks.get(target.task_id);
  if (task && task.root_agent_id === target.agent_id && task.status === 'running') {
    drafts.push({
      event: 'task_ended',
      task_id: task.task_id,
      status: reason === 'root_approved' ? 'done' : 'terminated',
      reason,
    });
  }
  return drafts;
}

export async function terminateCascade(
  services: Services,
  callerId: string,
  target: AgentRecord,
  reason: TerminateReason,
): Promise<void> {
  await services.registry.commit(terminationDrafts(services.registry.state, callerId, target, reason));
}

/**
 * The plan side of a child's end: approval drives its plan task `in_flight → done` and
 * readies the dependents it unblocks; a forced end drives it to `failed`.
 */
export function planOutcomeDrafts(state: RegistryState, child: AgentRecord, outcome: 'done' | 'failed', reason: string): EventDraft[] {
  if (!child.plan_id || !child.plan_task_id) return [];
  const plan = state.plans.get(child.plan_id);
  const planTask = plan?.tasks.get(child.plan_task_id);
  if (!plan || !planTask || planTask.status !== 'in_flight') return [];
  const base = { task_id: child.task_id, plan_id: plan.plan_id };
  if (outcome === 'failed') return [{ event: 'task_failed', ...base, plan_task_id: planTask.id, reason }];
  const after = new Map([...plan.tasks].map(([id, t]) => [id, { status: id === planTask.id ? ('done' as const) : t.status, depends_on: t.depends_on }]));
  return [
    { event: 'task_done', ...base, plan_task_id: planTask.id },
    ...newlyReady(after).map((id) => ({ event: 'task_ready' as const, ...base, plan_task_id: id })),
  ];
}
