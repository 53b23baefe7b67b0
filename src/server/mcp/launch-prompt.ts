import { ErrorCode, McpError, type GetPromptResult, type Prompt } from '@modelcontextprotocol/sdk/types.js';
import { launchOf } from '../../domain/agents.js';
import { DomainError } from '../../domain/errors.js';
import type { LaunchTexts } from '../../domain/prompt.js';
import { USER, type AgentRecord } from '../../registry/state.js';
import type { Services } from '../../runtime/services.js';

/**
 * What an agent is told when it connects, however it was started: a short brief in the
 * `initialize` instructions, and its whole launch prompt (the text a spawner starts an
 * agent with) as the MCP prompt `launch`. The brief is bounded because every client gets it
 * at every initialize and Claude Code cuts server instructions at 2,048 characters; the
 * skill's body and the contracts, which may be long, are only in the prompt.
 */

/** Named after the launch record a spawner gets: it is the same text. */
export const LAUNCH_PROMPT = 'launch';

/** Under Claude Code's 2,048-character cut, so nothing after the task text is lost there. */
export const INSTRUCTIONS_MAX_CHARS = 2000;

const CUT_MARK = '… [cut here: the whole task is in the "launch" prompt]';

export const LAUNCH_PROMPT_LISTING: Prompt = {
  name: LAUNCH_PROMPT,
  title: 'Your Beidou launch prompt',
  description:
    "Who you are in your Beidou team, your skill's instructions, the contracts you work under, and your task: what a spawner starts an agent with. Read it before you start.",
};

const GENERIC =
  'Your identity comes from your token. Talk to peers with send_message (find them with list_peers), ask your leader or the user with ask_user, and read messages your client does not deliver as turns with read_inbox.';

/**
 * The `initialize` instructions of a session of `agent`: who it is, its skill, where its
 * launch prompt is, then its task (cut to fit INSTRUCTIONS_MAX_CHARS; the rest is in the prompt).
 */
export function launchInstructions(services: Services, agent: AgentRecord): string {
  const { state } = services.registry;
  const place =
    agent.leader_id === USER
      ? 'the root agent: you lead the task for the user'
      : `role "${agent.role ?? agent.name}"${agent.team_id ? ` in team "${state.teams.get(agent.team_id)?.name ?? agent.team_id}"` : ''}, led by ${state.agents.get(agent.leader_id)?.name ?? agent.leader_id} (${agent.leader_id})`;
  let launch: LaunchTexts | null = null;
  let skillLine: string;
  try {
    launch = launchOf(state, agent, services.skills);
    skillLine = `Your skill: ${agent.skill} (${skillDescription(services, agent.skill)}).`;
  } catch (err) {
    skillLine = `Your skill: ${agent.skill}, which does not load now (${(err as Error).message}); your launch prompt is unavailable until it does.`;
  }
  const head = [
    `You are agent ${agent.name} (${agent.agent_id}) in Beidou task ${agent.task_id}, ${place}.`,
    skillLine,
    `Your whole launch prompt (your skill's instructions, your identity, the contracts you work under and your task) is the MCP prompt "${LAUNCH_PROMPT}": in Claude Code, run /mcp__beidou__${LAUNCH_PROMPT}. An agent a spawner started already has it as its system prompt and first message.`,
    GENERIC,
    'Your task:',
    '',
  ].join('\n');
  const task = launch?.first_message ?? state.tasks.get(agent.task_id)?.text ?? '';
  const room = INSTRUCTIONS_MAX_CHARS - head.length;
  return head + (task.length <= room ? task : task.slice(0, Math.max(0, room - CUT_MARK.length)) + CUT_MARK);
}

function skillDescription(services: Services, name: string): string {
  try {
    return services.skills.load(name).description;
  } catch {
    return 'its SKILL.md does not load now';
  }
}

/** `prompts/get`: the launch prompt of `agent` as one user message (an MCP prompt has no system role). */
export function getLaunchPrompt(services: Services, agent: AgentRecord | undefined, name: string): GetPromptResult {
  if (name !== LAUNCH_PROMPT) {
    throw new McpError(
      ErrorCode.InvalidParams,
      `no prompt named ${JSON.stringify(name).slice(0, 100)}; the one prompt is "${LAUNCH_PROMPT}"`,
    );
  }
  if (!agent) throw new McpError(ErrorCode.InvalidRequest, 'the agent of this session is no longer registered');
  let launch: LaunchTexts;
  try {
    launch = launchOf(services.registry.state, agent, services.skills);
  } catch (err) {
    if (err instanceof DomainError)
      throw new McpError(ErrorCode.InternalError, `${err.code}: ${err.message}`, err.details);
    throw err;
  }
  return {
    description: `The launch prompt of ${agent.name} (${agent.agent_id}) in task ${agent.task_id}`,
    messages: [{ role: 'user', content: { type: 'text', text: launchPromptText(launch) } }],
  };
}

/** The system prompt a spawner would set, then the first user turn it would send. */
export function launchPromptText(launch: LaunchTexts): string {
  return `${launch.prompt}\n\n## Your task\n${launch.first_message}`;
}
