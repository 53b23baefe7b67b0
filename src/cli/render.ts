import type { Namer } from '../events/describe.js';
import type { Quarantine } from '../events/event-log.js';
import type { agentView, quarantinedDetail, quarantinedSummary, taskDetail, taskSummary } from '../server/api/views.js';
import { excerpt, plural, printableLine, usd } from '../util/text.js';
import { clock, dateTime, fields, table } from './table.js';

/**
 * How `task list`, `task show` and `agent show` print the admin API's views for people. The
 * view types are the server's own (server/views.ts), so a field renamed there breaks here at
 * compile time rather than printing `undefined`.
 */

export type AgentView = ReturnType<typeof agentView>;
export type TaskListItem = ReturnType<typeof taskSummary> | ReturnType<typeof quarantinedSummary>;
export type TaskDetailView = ReturnType<typeof taskDetail> | ReturnType<typeof quarantinedDetail>;

const dash = (v: string | null | undefined) => (v === null || v === undefined || v === '' ? '-' : v);

/** How ids are shown: an agent by its name (from `names`, which may grow), anything else (`user`, `beidou`) as itself. */
export function namer(names: ReadonlyMap<string, string>): Namer {
  return (id) => (id === null ? '-' : (names.get(id) ?? id));
}

export function namesOf(agents: ReadonlyArray<{ agent_id: string; name: string }>): Namer {
  return namer(new Map(agents.map((a) => [a.agent_id, a.name])));
}

const quarantineLine = (taskId: string, q: Quarantine) =>
  `${taskId} is quarantined: ${q.file} line ${q.line}: ${q.reason} (read-only; beidou doctor --repair, with the server stopped, cuts it back to its last whole commit)`;

/** `task list`: one row per task, newest first, then a line per quarantined task saying why. */
export function renderTaskList(tasks: readonly TaskListItem[]): string {
  if (tasks.length === 0) return 'no tasks yet: start one with beidou task start "TEXT"\n';
  const rows = tasks.map((t) => [
    t.task_id,
    dash(t.name),
    t.status,
    `${t.agents.live}/${t.agents.total}`,
    String(t.event_count),
    dateTime(t.created_at),
    excerpt(t.text ?? '-', 50),
  ]);
  const notes = tasks.flatMap((t) => ('quarantine' in t ? [quarantineLine(t.task_id, t.quarantine)] : []));
  return `${[
    table(['TASK', 'NAME', 'STATUS', 'AGENTS', 'EVENTS', 'CREATED', 'TEXT'], rows),
    ...(notes.length ? ['', ...notes] : []),
  ].join('\n')}\n`;
}

/** An agent's status with what qualifies it: the error's reason, an escalated review. */
function statusOf(a: AgentView): string {
  if (a.status === 'error' && a.error) return `error (${a.error.reason ?? 'unknown'})`;
  const pending = a.review ?? a.termination_request;
  if (pending?.escalated) return `${a.status}, escalated`;
  return a.status;
}

/** Whether its process runs: a spawner's agent is running, queued or not running; `external` is one a person runs. */
function processOf(a: AgentView): string {
  if (a.running) return 'running';
  if (a.status === 'terminated') return '-';
  if (!a.launch) return 'external';
  return a.launch.state === 'queued' ? 'queued' : 'not running';
}

/** The agents as a tree under the root: each agent's children (the members of the teams it leads) below it. */
function teamTree(detail: TaskDetailView): string {
  const teams = new Map(detail.teams.map((t) => [t.team_id, t.name]));
  const children = new Map<string, AgentView[]>();
  const ids = new Set(detail.agents.map((a) => a.agent_id));
  const tops: AgentView[] = [];
  for (const a of detail.agents) {
    if (ids.has(a.leader_id)) children.set(a.leader_id, [...(children.get(a.leader_id) ?? []), a]);
    else tops.push(a);
  }
  const rows: string[][] = [];
  const walk = (a: AgentView, prefix: string, branch: string) => {
    rows.push([
      prefix + branch + a.name,
      a.agent_id,
      a.team_id ? (teams.get(a.team_id) ?? a.team_id) : '-',
      dash(a.role),
      a.skill,
      statusOf(a),
      processOf(a),
      `${a.stats.input_tokens}/${a.stats.output_tokens}`,
      usd(a.stats.cost_usd),
      String(a.stats.tool_calls),
    ]);
    const kids = children.get(a.agent_id) ?? [];
    const below = prefix + (branch === '├─ ' ? '│  ' : branch === '└─ ' ? '   ' : '');
    kids.forEach((k, i) => {
      walk(k, below, i === kids.length - 1 ? '└─ ' : '├─ ');
    });
  };
  for (const a of tops) walk(a, '', '');
  return table(['AGENT', 'ID', 'TEAM', 'ROLE', 'SKILL', 'STATUS', 'PROCESS', 'TOKENS IN/OUT', 'COST', 'TOOLS'], rows);
}

/** One line per failed agent, with its reason and message (and the last line of its stderr). */
function errorLines(agents: readonly AgentView[]): string[] {
  return agents.flatMap((a) => {
    if (a.status !== 'error' || !a.error) return [];
    const lastErr = a.error.stderr?.trim().split('\n').at(-1);
    return [
      `  ${a.name}: ${a.error.reason ?? 'error'}: ${excerpt(a.error.msg ?? '', 160)} (at ${clock(a.error.at)})`,
      ...(lastErr ? [`    stderr: ${excerpt(lastErr, 160)}`] : []),
    ];
  });
}

/** `task show`: the task, its team tree, plans, questions waiting, and what it cost. */
export function renderTaskDetail(detail: TaskDetailView): string {
  const { task, stats } = detail;
  const name = namesOf(detail.agents);
  const out: string[] = [`task ${task.task_id}${task.name ? ` "${task.name}"` : ''}: ${task.status}`];
  out.push(
    fields([
      ['text', excerpt(task.text ?? '-', 200)],
      ['root', task.root_agent_id ? `${name(task.root_agent_id)} (${task.root_agent_id})` : '-'],
      ['skill', dash(task.skill)],
      ['created', dateTime(task.created_at)],
      ...(task.ended_at !== null
        ? [['ended', `${dateTime(task.ended_at)}${task.end_reason ? ` (${task.end_reason})` : ''}`] as const]
        : []),
      ['workspace', dash(task.workspace)],
    ]),
  );
  if ('quarantine' in detail) out.push('', quarantineLine(task.task_id, detail.quarantine));

  out.push('', 'team');
  out.push(detail.agents.length > 0 ? teamTree(detail) : '  (no agents)');
  const errors = errorLines(detail.agents);
  if (errors.length > 0) out.push('', 'errors', ...errors);

  const plans = detail.plans;
  if (plans.length > 0) {
    out.push('', 'plans');
    for (const p of plans) {
      out.push(
        `  ${p.plan_id} of ${name(p.owner_agent_id)}${p.removed_at !== null ? ' (removed)' : ''}: ${p.plan_path}`,
      );
      const rows = p.tasks.map((t) => [
        `  ${t.id}`,
        t.role,
        t.status,
        t.agent_id ? name(t.agent_id) : '-',
        t.depends_on.length ? t.depends_on.join(', ') : '-',
      ]);
      out.push(table(['  PLAN TASK', 'ROLE', 'STATE', 'AGENT', 'DEPENDS ON'], rows));
    }
  }

  const pending = detail.questions.filter((q) => q.status === 'pending');
  out.push('', 'questions waiting');
  if (pending.length === 0) out.push('  none');
  for (const q of pending) {
    const prompt = q.questions
      .map((item) => (item.header ? `[${item.header}] ${item.question}` : item.question))
      .join(' | ');
    out.push(
      `  ${q.qid}  from ${name(q.asker_agent_id)}, with ${q.holder ? name(q.holder) : 'you'} (${q.origin}): ${excerpt(prompt, 100)}`,
    );
  }
  if (pending.some((q) => q.holder === null))
    out.push('  answer: beidou answer QID ... (see beidou questions); decline: beidou decline QID --reason "..."');

  const toolCalls = detail.agents.reduce((n, a) => n + a.stats.tool_calls, 0);
  out.push(
    '',
    'cost',
    `  ${usd(stats.cost_usd)}; ${stats.input_tokens} tokens in, ${stats.output_tokens} out; ${plural(toolCalls, 'tool call')}; ` +
      `${plural(stats.agents, 'agent')} (${stats.live_agents} live), ${plural(stats.teams, 'team')}, ${plural(stats.messages, 'message')} (${stats.undelivered} undelivered), ${plural(stats.events, 'event')}`,
  );
  return `${out.join('\n')}\n`;
}

/** `agent show`: one agent's record; `detail` (its task) gives the names of the ids it refers to. */
export function renderAgent(a: AgentView, detail: TaskDetailView | null): string {
  const name = namesOf(detail?.agents ?? []);
  const team = (id: string) => detail?.teams.find((t) => t.team_id === id)?.name;
  const named = (id: string) => (name(id) === id ? id : `${name(id)} (${id})`);
  const teamNamed = (id: string) => (team(id) ? `${team(id)} (${id})` : id);
  const pending = a.review
    ? (['review', a.review] as const)
    : a.termination_request
      ? (['termination request', a.termination_request] as const)
      : null;
  const process = a.running
    ? `running on spawner ${a.spawner_id}`
    : a.launch
      ? a.launch.state === 'queued'
        ? 'queued for a spawner'
        : `assigned to spawner ${a.spawner_id}, not running`
      : a.status === 'terminated'
        ? '-'
        : 'external (run by a person, not a spawner)';
  const pairs: Array<readonly [string, string]> = [
    ['task', a.task_id],
    ['role', dash(a.role)],
    ['skill', a.skill],
    ['model', dash(a.model)],
    ['leader', a.leader_id === 'user' ? 'user (it is the root)' : named(a.leader_id)],
    ['team', a.team_id ? teamNamed(a.team_id) : '-'],
    ['leads', a.leads.length ? a.leads.map(teamNamed).join(', ') : '-'],
    ['plan task', dash(a.plan_task_id)],
    ['process', process],
    ['inbox', `${a.inbox_depth} undelivered; ${a.messages_sent} sent, ${a.messages_delivered} delivered to it`],
    [
      'usage',
      `${a.stats.input_tokens} tokens in, ${a.stats.output_tokens} out; ${usd(a.stats.cost_usd)}; ${plural(a.stats.tool_calls, 'tool call')}; ${plural(a.stats.llm_calls, 'model call')}`,
    ],
    ['created', dateTime(a.created_at)],
    ...(a.terminated_at !== null ? [['terminated', dateTime(a.terminated_at)] as const] : []),
    ['workspace', dash(a.workspace_path)],
  ];
  if (a.error) {
    pairs.push([
      'error',
      `${a.error.reason ?? 'error'}: ${printableLine(a.error.msg ?? '')} (at ${clock(a.error.at)})`,
    ]);
    const stderr = a.error.stderr?.trim();
    if (stderr)
      pairs.push([
        'stderr',
        stderr
          .split('\n')
          .slice(-3)
          .map((l) => excerpt(l, 160))
          .join('\n             '),
      ]);
  }
  if (pending) {
    const [what, p] = pending;
    pairs.push([
      what,
      `waiting on its leader since ${dateTime(p.since)}, ${plural(p.pings, 'reminder')}${p.escalated ? ', escalated to you' : ''}: ${excerpt(p.detail, 120)}`,
    ]);
  }
  return `agent ${a.name} (${a.agent_id}): ${statusOf(a)}\n${fields(pairs)}\n`;
}
