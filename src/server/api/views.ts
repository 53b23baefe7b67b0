import { agentStatus, pendingAtGateway } from '../../registry/queries.js';
import type { ArchivedTask } from '../../registry/archive.js';
import type { QuarantinedTask } from '../../registry/quarantine.js';
import {
  USER,
  type AgentRecord,
  type PlanRecord,
  type QuestionRecord,
  type RegistryState,
  type TaskRecord,
  type TeamRecord,
} from '../../registry/state.js';

/** JSON views of registry records for the admin API (inboxes as counts, ids as strings). */

export function agentView(a: AgentRecord) {
  return {
    agent_id: a.agent_id,
    task_id: a.task_id,
    name: a.name,
    role: a.role,
    skill: a.skill,
    description: a.description,
    model: a.model,
    team_id: a.team_id,
    leader_id: a.leader_id,
    plan_task_id: a.plan_task_id,
    status: agentStatus(a),
    error: a.error ? { ...a.error } : null,
    leads: [...a.leads],
    inbox_depth: a.inbox.size,
    messages_sent: a.sent_count,
    messages_delivered: a.delivered_count,
    workspace_path: a.workspace_path,
    project_workspace_path: a.project_workspace_path,
    created_at: a.created_at,
    terminated_at: a.terminated_at,
    spawner_id: a.spawner_id,
    session_id: a.session_id,
    running: a.running,
    active_plan_id: a.active_plan_id,
    plan_id: a.plan_id,
    review: a.review ? { ...a.review } : null,
    termination_request: a.termination_request ? { ...a.termination_request } : null,
    launch: a.launch ? { state: a.spawner_id ? ('assigned' as const) : ('queued' as const), ...a.launch } : null,
    stats: { ...a.stats },
  };
}

export function teamView(t: TeamRecord) {
  return {
    team_id: t.team_id,
    name: t.name,
    leader_id: t.leader_id,
    parent_team_id: t.parent_team_id,
    depth: t.depth,
    task: t.task,
    rules: [...t.rules],
    member_ids: [...t.member_ids],
    created_at: t.created_at,
    via: t.via,
  };
}

export function taskView(t: TaskRecord) {
  return {
    task_id: t.task_id,
    name: t.name,
    text: t.text,
    status: t.status,
    skill: t.skill,
    model: t.model,
    workspace: t.workspace,
    spawn: t.spawn,
    root_agent_id: t.root_agent_id,
    created_at: t.created_at,
    ended_at: t.ended_at,
    end_reason: t.end_reason,
    last_event_at: t.last_event_at,
    event_count: t.event_count,
  };
}

export function taskSummary(state: RegistryState, t: TaskRecord) {
  let live = 0;
  let cost = 0;
  for (const id of t.agent_ids) {
    const a = state.agents.get(id);
    if (a && !a.terminate_consumed) live++;
    if (a) cost += a.stats.cost_usd;
  }
  return { ...taskView(t), agents: { total: t.agent_ids.length, live }, cost_usd: cost };
}

export function taskDetail(state: RegistryState, t: TaskRecord) {
  const agents = t.agent_ids.map((id) => state.agents.get(id)).filter((a): a is AgentRecord => a !== undefined);
  const stats = {
    agents: agents.length,
    live_agents: 0,
    teams: t.team_ids.length,
    events: t.event_count,
    input_tokens: 0,
    output_tokens: 0,
    cost_usd: 0,
    messages: 0,
    undelivered: 0,
  };
  for (const a of agents) {
    if (!a.terminate_consumed) stats.live_agents++;
    stats.input_tokens += a.stats.input_tokens;
    stats.output_tokens += a.stats.output_tokens;
    stats.cost_usd += a.stats.cost_usd;
    // Every message that reached an inbox, whoever sent it: the user is no agent, so the
    // agents' sent counts alone miss the user's messages.
    stats.messages += a.delivered_count + a.inbox.size;
    stats.undelivered += a.inbox.size;
  }
  return {
    task: taskView(t),
    agents: agents.map(agentView),
    teams: t.team_ids
      .map((id) => state.teams.get(id))
      .filter((x): x is TeamRecord => x !== undefined)
      .map(teamView),
    plans: t.plan_ids
      .map((id) => state.plans.get(id))
      .filter((p): p is PlanRecord => p !== undefined)
      .map(planView),
    questions: t.question_ids
      .map((id) => state.questions.get(id))
      .filter((q): q is QuestionRecord => q !== undefined)
      .map(questionView),
    stats,
  };
}

export function planView(p: PlanRecord) {
  return {
    plan_id: p.plan_id,
    owner_agent_id: p.owner_agent_id,
    plan_path: p.plan_path,
    created_at: p.created_at,
    removed_at: p.removed_at,
    tasks: [...p.tasks.values()].map((t) => ({ ...t, depends_on: [...t.depends_on] })),
  };
}

export function questionView(q: QuestionRecord) {
  return {
    qid: q.qid,
    task_id: q.task_id,
    asker_agent_id: q.asker,
    origin: q.origin,
    subject_agent_id: q.subject_agent_id,
    questions: q.questions,
    context: q.context,
    chain: [...q.chain],
    holder: q.chain.at(-1) === USER ? null : q.chain.at(-1)!,
    status: q.status,
    answers: q.answers,
    answer_text: q.answer_text,
    answered_by: q.answered_by,
    created_at: q.created_at,
    answered_at: q.answered_at,
    audit: q.audit.map((a) => ({ ...a })),
  };
}

/** `GET /api/tasks` and the `tasks` event of `GET /api/tasks/stream`: every task, newest first, quarantined ones included. */
export function taskListView(
  state: RegistryState,
  quarantined: Iterable<QuarantinedTask>,
  archived: Iterable<ArchivedTask>,
) {
  return [
    ...[...state.tasks.values()].map((t) => taskSummary(state, t)),
    ...[...quarantined].map(quarantinedSummary),
    ...[...archived].map(archivedSummary),
  ].sort((a, b) => (b.created_at ?? 0) - (a.created_at ?? 0));
}

/**
 * `GET /api/questions/pending` and the `questions` event of `GET /api/tasks/stream`: the
 * questions waiting at the user gateway, oldest first, with the names a person reads
 * (`asker_name` is `beidou` for the server's own questions; `task_name` is null for a task
 * started without a name).
 */
export function pendingQuestionsView(state: RegistryState) {
  const nameOf = (id: string | null) => (id === null ? null : (state.agents.get(id)?.name ?? id));
  return pendingAtGateway(state).map((q) => {
    const { qid, task_id, asker_agent_id, origin, subject_agent_id, questions, context, chain, created_at } =
      questionView(q);
    return {
      qid,
      task_id,
      task_name: state.tasks.get(task_id)?.name ?? null,
      asker_agent_id,
      asker_name: nameOf(asker_agent_id)!,
      origin,
      subject_agent_id,
      subject_name: nameOf(subject_agent_id),
      questions,
      context,
      chain,
      created_at,
    };
  });
}

/**
 * A quarantined task: what its events before the fault made of it, with `status:
 * "quarantined"` and where its log fails. A file bad from its first line has no record yet.
 */
function quarantinedTaskView(q: QuarantinedTask) {
  const t = q.state.tasks.get(q.task_id);
  const view = t
    ? taskView(t)
    : {
        task_id: q.task_id,
        name: null,
        text: null,
        skill: null,
        model: null,
        workspace: null,
        spawn: null,
        root_agent_id: null,
        created_at: null,
        ended_at: null,
        end_reason: null,
        last_event_at: null,
        event_count: 0,
      };
  return { ...view, status: 'quarantined' as const, quarantine: { ...q.quarantine } };
}

export function quarantinedSummary(q: QuarantinedTask) {
  const t = q.state.tasks.get(q.task_id);
  const { agents, cost_usd } = t ? taskSummary(q.state, t) : { agents: { total: 0, live: 0 }, cost_usd: 0 };
  return { ...quarantinedTaskView(q), agents, cost_usd };
}

export function quarantinedDetail(q: QuarantinedTask) {
  const t = q.state.tasks.get(q.task_id);
  const detail = t
    ? taskDetail(q.state, t)
    : {
        agents: [],
        teams: [],
        plans: [],
        questions: [],
        stats: {
          agents: 0,
          live_agents: 0,
          teams: 0,
          events: 0,
          input_tokens: 0,
          output_tokens: 0,
          cost_usd: 0,
          messages: 0,
          undelivered: 0,
        },
      };
  return { ...detail, task: quarantinedTaskView(q), quarantine: { ...q.quarantine } };
}

/** An archived task in the list: its record as it ended, from the archive index (no read of its events). */
export function archivedSummary(e: ArchivedTask) {
  return { ...taskView(e.task), agents: { ...e.agents }, cost_usd: e.cost_usd };
}
