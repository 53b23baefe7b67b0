import path from 'node:path';
import { homePaths } from '../config.js';
import type { EventDraft } from '../events/catalogue.js';
import { depthOfTeamLedBy } from '../registry/queries.js';
import { USER, type AgentRecord, type RegistryState } from '../registry/state.js';
import type { DomainContext } from './context.js';
import { DomainError } from './errors.js';
import { assertAgentsPerTask, assertContentSize, assertPlanTasks, assertTeamsPerLeader } from './limits.js';
import { launchTexts, type LaunchTexts } from './prompt.js';

/**
 * Agents, teams and tasks: registering agents (with their launch request), and creating
 * teams and tasks (terminating agents is in termination.ts). Each returns event drafts for
 * the caller to commit.
 */

/** What registering an agent needs of its skill (a loaded SKILL.md has all of it). */
export interface SkillSpec {
  name: string;
  /** The system prompt, with `{role}`-style placeholders. */
  body: string;
  model: string | null;
}

/** What decisions need of the skills on disk: which names exist, and loading one a caller named. */
export interface SkillSource {
  has(name: string): boolean;
  names(): string[];
  /** The skill, or `unknown_skill` naming the input `field` that named it (`message` to word it otherwise). */
  require(name: string, field: string | null, message?: string): SkillSpec;
}

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
  skill: SkillSpec;
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

/**
 * An agent's launch texts: its launch record when one was queued for a spawner (exactly what
 * the spawner was or will be given), else (a root a person runs) assembled from its
 * registration with its skill as it is on disk now. Throws `unknown_skill` when that skill
 * no longer loads.
 */
export function launchOf(state: RegistryState, agent: AgentRecord, skills: SkillSource): LaunchTexts {
  if (agent.launch) return { prompt: agent.launch.prompt, first_message: agent.launch.first_message };
  const planTask =
    agent.plan_id && agent.plan_task_id ? state.plans.get(agent.plan_id)?.tasks.get(agent.plan_task_id) : undefined;
  const skill = skills.require(
    agent.skill,
    null,
    `the skill "${agent.skill}" of agent ${agent.agent_id} no longer loads`,
  );
  return launchTexts(skill, {
    agentId: agent.agent_id,
    name: agent.name,
    role: agent.role,
    description: agent.description,
    teamName: agent.team_id ? (state.teams.get(agent.team_id)?.name ?? agent.team_id) : null,
    leaderId: agent.leader_id,
    leaderName: state.agents.get(agent.leader_id)?.name ?? agent.leader_id,
    workspacePath: agent.workspace_path,
    projectWorkspace: agent.project_workspace_path,
    planTaskId: agent.plan_task_id,
    // As agentDrafts hands it: a plan task's own text, else the task's (the root's, and create_team members').
    task: planTask?.task ?? state.tasks.get(agent.task_id)?.text ?? '',
  });
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
    const { prompt, first_message } = launchTexts(spec.skill, {
      agentId: spec.agentId,
      name,
      role: spec.role,
      description: spec.description,
      teamName: spec.team?.name ?? null,
      leaderId: spec.leaderId,
      leaderName: spec.leaderName,
      workspacePath,
      projectWorkspace: spec.projectWorkspace,
      planTaskId: spec.plan?.planTaskId ?? null,
      task: spec.task,
    });
    drafts.push({
      event: 'launch.requested',
      task_id: spec.taskId,
      agent_id: spec.agentId,
      prompt,
      first_message,
      model,
      workspace_path: workspacePath,
      project_workspace_path: spec.projectWorkspace,
    });
  }
  return drafts;
}

export interface NewTask {
  task: string;
  skill: SkillSpec;
  model: string | null;
  name: string | null;
  workspace: string | null;
  spawn: boolean;
}

/** A new task and its root agent (teamless, its leader the user). */
export function newTask(
  ctx: DomainContext,
  input: NewTask,
): { taskId: string; rootAgentId: string; drafts: EventDraft[] } {
  const taskId = ctx.ids.next('tsk');
  const rootAgentId = ctx.ids.next('ag');
  const workspace = input.workspace ?? path.join(homePaths(ctx.config.home).workspaces, taskId);
  const drafts: EventDraft[] = [
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
  ];
  return { taskId, rootAgentId, drafts };
}

/** Refuses a team past the depth cap; `advice` says what to do instead. */
export function assertDepthAllowed(ctx: Pick<DomainContext, 'config'>, depth: number, advice: string): void {
  const { maxDepth } = ctx.config;
  if (depth <= maxDepth) return;
  throw new DomainError(
    'depth_exceeded',
    `a team led by you would be at depth ${depth}, past the cap of ${maxDepth}; ${advice}`,
    { depth, max_depth: maxDepth },
  );
}

/**
 * A team led by `leader` at `depth`: `team_created`, and `depth.warning` when it is deeper
 * than the warning depth. Depth past the cap is refused before this is called.
 */
export function teamDrafts(
  ctx: Pick<DomainContext, 'config'>,
  leader: AgentRecord,
  team: { team_id: string; name: string; depth: number; task: string; rules: string[] },
  via: 'create_team' | 'spawn_agent',
): EventDraft[] {
  const drafts: EventDraft[] = [
    {
      event: 'team_created',
      task_id: leader.task_id,
      team_id: team.team_id,
      name: team.name,
      leader_id: leader.agent_id,
      parent_team_id: leader.team_id,
      depth: team.depth,
      task: team.task,
      rules: team.rules,
      via,
    },
  ];
  const { depthWarning, maxDepth } = ctx.config;
  if (team.depth > depthWarning)
    drafts.push({
      event: 'depth.warning',
      task_id: leader.task_id,
      team_id: team.team_id,
      depth: team.depth,
      max_depth: maxDepth,
    });
  return drafts;
}

export interface TeamInput {
  name: string;
  task: string;
  roles: Array<{ role: string; skill: string; model?: string | undefined; description: string }>;
  rules: string[];
  consensus: boolean;
}

/** `create_team`: a team the caller leads, one agent per role, each given the task's text. */
export function createTeam(
  ctx: DomainContext,
  caller: AgentRecord,
  input: TeamInput,
  skills: SkillSource,
): { teamId: string; members: Array<{ agent_id: string; role: string }>; drafts: EventDraft[] } {
  const depth = depthOfTeamLedBy(ctx.state, caller);
  assertDepthAllowed(ctx, depth, 'do the work yourself or hand it back to your leader');
  assertPlanTasks(ctx, 'roles', input.roles.length);
  assertTeamsPerLeader(ctx, caller);
  assertAgentsPerTask(ctx, caller.task_id, input.roles.length);
  // The texts each member is handed (its first message and its prompt) are capped like a message.
  assertContentSize(ctx.config, 'task', input.task);
  for (const [i, role] of input.roles.entries())
    assertContentSize(ctx.config, `roles[${i}].description`, role.description);
  assertContentSize(ctx.config, 'rules', input.rules.join('\n'));
  // Each distinct skill is loaded once: a load reads and parses its SKILL.md.
  const bySkill = new Map<string, SkillSpec>();
  const loaded = input.roles.map((role, i) => {
    let skill = bySkill.get(role.skill);
    if (!skill) bySkill.set(role.skill, (skill = skills.require(role.skill, `roles[${i}].skill`)));
    return skill;
  });
  if (input.roles.length > 1 && !input.consensus) {
    const first = input.roles[0]!;
    if (input.roles.every((r) => r.skill === first.skill && r.description === first.description)) {
      throw new DomainError(
        'duplicate_member_descriptions',
        'every member has the same skill and description, so they would all do the whole task in parallel; write a distinct description per member, or pass consensus: true if parallel attempts are intended',
        { members: input.roles.length },
      );
    }
  }
  const teamId = ctx.ids.next('tm');
  const drafts = teamDrafts(
    ctx,
    caller,
    { team_id: teamId, name: input.name, depth, task: input.task, rules: input.rules },
    'create_team',
  );
  const team = { team_id: teamId, name: input.name };
  const text = ctx.state.tasks.get(caller.task_id)!.text;
  const members = input.roles.map((role, i) => {
    const agentId = ctx.ids.next('ag');
    drafts.push(
      ...agentDrafts({
        agentId,
        taskId: caller.task_id,
        role: role.role,
        skill: loaded[i]!,
        description: role.description,
        model: role.model ?? null,
        team,
        leaderId: caller.agent_id,
        leaderName: caller.name,
        plan: null,
        // The originating user task reaches every member as its first message.
        task: text,
        projectWorkspace: caller.project_workspace_path,
        launch: true,
      }),
    );
    return { agent_id: agentId, role: role.role };
  });
  return { teamId, members, drafts };
}
