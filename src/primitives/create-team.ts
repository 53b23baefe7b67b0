import { z } from 'zod';
import * as agents from '../domain/agents.js';
import { DomainError } from '../domain/errors.js';
import { definePrimitive } from './define.js';
import { nameField } from './fields.js';

const roleSchema = z.strictObject({
  role: nameField().describe('Display name of the member, e.g. "frontend-engineer".'),
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
    'concurrent_create_team (you already have one in flight), leader_override_attempted (leader_id is never accepted),',
    'limit_exceeded (details.limit: plan_tasks, more roles than BEIDOU_MAX_PLAN_TASKS; agents_per_task, the task would pass',
    'BEIDOU_MAX_AGENTS_PER_TASK agents; teams_per_leader, you lead BEIDOU_MAX_TEAMS_PER_LEADER teams already).',
  ].join(' '),
  inputSchema: z.strictObject({
    name: nameField().describe('Team name, e.g. "frontend" (letters, digits, ".", "_", "-").'),
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
    const { registry, skills, locks, domain } = services;
    const locked = await locks.spawn.tryWith(`create_team:${caller.agent_id}`, async () => {
      const { teamId, members, drafts } = agents.createTeam(domain, caller, input, skills);
      await registry.commit(drafts, { writer: caller.agent_id });
      return { team_id: teamId, members };
    });
    if (!locked.acquired) {
      throw new DomainError(
        'concurrent_create_team',
        'you already have a create_team call in flight; wait for it to return',
        {},
      );
    }
    return locked.value;
  },
});
