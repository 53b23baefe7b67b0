import { z } from 'zod';
import type { EventDraft } from '../events/catalogue.js';
import { depthOfTeamLedBy } from '../registry/queries.js';
import { agentDrafts } from '../runtime/agents.js';
import { SkillLoadError, type Skill } from '../skills/loader.js';
import { definePrimitive } from './define.js';
import { PrimitiveError } from './errors.js';

const roleSchema = z.strictObject({
  role: z.string().min(1, 'must not be empty').describe('Display name of the member, e.g. "frontend-engineer".'),
  skill: z.string().min(1, 'must name a skill').describe('Skill name (a SKILL.md), e.g. "worker".'),
  model: z.string().min(1).optional().describe('Model override for this member.'),
  description: z.string().describe("This member's own scope: what it must produce. Substituted as {role_description}."),
});

export const createTeam = definePrimitive({
  name: 'create_team',
  title: 'Create a team (deprecated)',
  description: [
    'Deprecated: prefer declare_plan + spawn_agent for ordered work.',
    'Creates a sub-team that you lead and registers one agent per role; each member gets the originating task as its first message',
    'and its role description as its scope. Give every member a distinct description (identical ones are refused with',
    'duplicate_member_descriptions unless consensus is true, for deliberate parallel attempts).',
    'Errors: depth_exceeded (teams nest too deep), unknown_skill (roles[i].skill has no SKILL.md),',
    'concurrent_create_team (you already have one in flight), leader_override_attempted (leader_id is never accepted).',
  ].join(' '),
  inputSchema: z.strictObject({
    name: z.string().min(1, 'must not be empty').describe('Human-readable team name.'),
    task: z.string().min(1, 'must not be empty').describe('Team-level coordination charter (recorded on the team).'),
    roles: z.array(roleSchema).min(1, 'must list at least one member').describe('One entry per member.'),
    rules: z.array(z.string()).default([]).describe('Coordination rules visible to each member.'),
    consensus: z.boolean().default(false).describe('Allow identical member descriptions (voting or ensembles).'),
  }),
  outputSchema: z.object({
    team_id: z.string(),
    members: z.array(z.object({ agent_id: z.string(), role: z.string() })),
  }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async handler(input, { services, caller }) {
    const { registry, config, skills, ids, locks } = services;
    const locked = await locks.spawn.tryWith(`create_team:${caller.agent_id}`, async () => {
      const depth = depthOfTeamLedBy(registry.state, caller);
      if (depth > config.maxDepth) {
        throw new PrimitiveError(
          'depth_exceeded',
          `a team led by you would be at depth ${depth}, past the cap of ${config.maxDepth}; do the work yourself or hand it back to your leader`,
          { depth, max_depth: config.maxDepth },
        );
      }
      const loaded: Skill[] = input.roles.map((role, i) => {
        try {
          return skills.load(role.skill);
        } catch (err) {
          const reason = err instanceof SkillLoadError ? err.message : String(err);
          throw new PrimitiveError('unknown_skill', `roles[${i}].skill "${role.skill}" does not resolve to a loadable SKILL.md`, {
            field: `roles[${i}].skill`,
            skill: role.skill,
            reason,
            available: skills.names(),
          });
        }
      });
      if (input.roles.length > 1 && !input.consensus) {
        const first = input.roles[0]!;
        if (input.roles.every((r) => r.skill === first.skill && r.description === first.description)) {
          throw new PrimitiveError(
            'duplicate_member_descriptions',
            'every member has the same skill and description, so they would all do the whole task in parallel; write a distinct description per member, or pass consensus: true if parallel attempts are intended',
            { members: input.roles.length },
          );
        }
      }
      const task = registry.task(caller.task_id)!;
      const teamId = ids.next('tm');
      const parentTeamId = caller.team_id;
      const drafts: EventDraft[] = [
        {
          event: 'team_created',
          task_id: caller.task_id,
          team_id: teamId,
          name: input.name,
          leader_id: caller.agent_id,
          parent_team_id: parentTeamId,
          depth,
          task: input.task,
          rules: input.rules,
          via: 'create_team',
        },
      ];
      if (depth > config.depthWarning) {
        drafts.push({ event: 'depth.warning', task_id: caller.task_id, team_id: teamId, depth, max_depth: config.maxDepth });
      }
      const team = { team_id: teamId, name: input.name };
      const members = input.roles.map((role, i) => {
        const agentId = ids.next('ag');
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
            task: task.text,
            projectWorkspace: caller.project_workspace_path,
            launch: true,
          }),
        );
        return { agent_id: agentId, role: role.role };
      });
      await registry.commit(drafts);
      return { team_id: teamId, members };
    });
    if (!locked.acquired) {
      throw new PrimitiveError('concurrent_create_team', 'you already have a create_team call in flight; wait for it to return', {});
    }
    return locked.value;
  },
});
