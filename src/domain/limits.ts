import { settingName, type Config } from '../config.js';
import type { AgentRecord, RegistryState } from '../registry/state.js';
import type { DomainContext } from './context.js';
import { contentTooLarge, DomainError, limitExceeded } from './errors.js';

/**
 * The quotas and caps that keep one agent from stalling the server or filling its memory
 * (docs/security.md). Each is checked before anything is written, so a refusal leaves the
 * state and the log as they were.
 */

/** A text one agent hands another (a message, a report, a question, an answer): at most BEIDOU_MAX_CONTENT_CHARS. */
export function assertContentSize(
  config: Pick<Config, 'maxContentChars'>,
  field: string,
  text: string | null | undefined,
): void {
  const max = config.maxContentChars;
  if (text && text.length > max) throw contentTooLarge(field, max, settingName('maxContentChars'));
}

/** A task holds at most BEIDOU_MAX_AGENTS_PER_TASK agents, terminated ones included (they stay in memory). */
export function assertAgentsPerTask(
  ctx: Pick<DomainContext, 'state' | 'config'>,
  taskId: string,
  adding: number,
): void {
  const max = ctx.config.maxAgentsPerTask;
  const now = ctx.state.tasks.get(taskId)?.agent_ids.length ?? 0;
  if (now + adding <= max) return;
  throw limitExceeded(
    'agents_per_task',
    max,
    settingName('maxAgentsPerTask'),
    `this task has ${now} agents and would have ${now + adding}, past the cap of ${max}; give fewer agents more work each`,
  );
}

/** Roles of one create_team and tasks of one plan: at most BEIDOU_MAX_PLAN_TASKS. */
export function assertPlanTasks(ctx: Pick<DomainContext, 'config'>, field: 'roles' | 'tasks', count: number): void {
  const max = ctx.config.maxPlanTasks;
  if (count <= max) return;
  throw limitExceeded(
    'plan_tasks',
    max,
    settingName('maxPlanTasks'),
    `${field} lists ${count} entries, past the cap of ${max}; split the work into fewer, larger pieces`,
  );
}

/**
 * An agent has at most BEIDOU_MAX_PENDING_QUESTIONS_PER_AGENT questions of its own pending:
 * each holds its texts in memory until it is settled (an asker that cancels its calls leaves them).
 */
export function assertPendingQuestions(ctx: Pick<DomainContext, 'state' | 'config'>, asker: AgentRecord): void {
  const max = ctx.config.maxPendingQuestionsPerAgent;
  let pending = 0;
  for (const q of ctx.state.questions.values()) if (q.asker === asker.agent_id && q.status === 'pending') pending++;
  if (pending < max) return;
  throw limitExceeded(
    'pending_questions_per_agent',
    max,
    settingName('maxPendingQuestionsPerAgent'),
    `you have ${pending} questions waiting for an answer, the cap is ${max}; wait for their answers (they arrive in your inbox) before asking more`,
  );
}

/** A leader leads at most BEIDOU_MAX_TEAMS_PER_LEADER teams. */
export function assertTeamsPerLeader(ctx: Pick<DomainContext, 'config'>, leader: AgentRecord): void {
  const max = ctx.config.maxTeamsPerLeader;
  if (leader.leads.length < max) return;
  throw limitExceeded(
    'teams_per_leader',
    max,
    settingName('maxTeamsPerLeader'),
    `you already lead ${leader.leads.length} teams, the cap is ${max}; reuse a team or hand the work back to your leader`,
  );
}

/**
 * Room in `recipient`'s inbox for one more message of `content` (BEIDOU_INBOX_CAP messages,
 * BEIDOU_INBOX_MAX_CHARS characters); `replacing` are messages the same commit withdraws.
 */
export function assertInboxRoom(
  ctx: Pick<DomainContext, 'config'>,
  recipient: AgentRecord,
  content: string,
  replacing: ReadonlyArray<{ content: string }> = [],
): void {
  const cap = ctx.config.inboxCap;
  const size = recipient.inbox.size - replacing.length;
  if (size >= cap) {
    throw new DomainError(
      'inbox_full',
      `${recipient.name}'s inbox holds ${recipient.inbox.size} undelivered messages (the cap is ${cap}); wait for it to read them`,
      { to: recipient.agent_id, undelivered: recipient.inbox.size, cap },
    );
  }
  const maxChars = ctx.config.inboxMaxChars;
  const chars = recipient.inbox_chars - replacing.reduce((n, m) => n + m.content.length, 0);
  if (chars + content.length > maxChars) {
    throw new DomainError(
      'inbox_full',
      `${recipient.name}'s undelivered messages would exceed ${maxChars} characters; wait for it to read them, or send less`,
      {
        to: recipient.agent_id,
        undelivered: recipient.inbox.size,
        undelivered_chars: recipient.inbox_chars,
        max_chars: maxChars,
      },
    );
  }
}

/** The recipient of a message the server writes on an agent's behalf, if it is an agent. */
export function agentOrNull(state: RegistryState, id: string): AgentRecord | null {
  return state.agents.get(id) ?? null;
}

/**
 * Whether one more instance of a spawner token may open its stream asking for `asked` agents,
 * its token's other connected instances asking for `others` together: the instances of one
 * token share BEIDOU_MAX_AGENTS_PER_SPAWNER. Null: it may.
 */
export function spawnerTokenRoom(
  config: Pick<Config, 'maxAgentsPerSpawner'>,
  others: number,
  asked: number,
): DomainError | null {
  const bound = config.maxAgentsPerSpawner;
  if (others + asked <= bound) return null;
  const setting = settingName('maxAgentsPerSpawner');
  const message =
    others === 0
      ? `max_agents: this server lets one spawner token run at most ${bound} agents (${setting}); start it with --max-agents ${bound} or fewer`
      : `max_agents: this server lets one spawner token run at most ${bound} agents (${setting}), and its other connected instances ask for ${others}; start this one with --max-agents ${Math.max(0, bound - others)} or fewer, or give it a token of its own`;
  return new DomainError('limit_exceeded', message, {
    limit: 'agents_per_spawner',
    max: bound,
    setting,
    field: 'max_agents',
    other_instances: others,
  });
}
