import type { StoredEvent } from '../events/catalogue.js';
import { BEIDOU, USER, type AgentRecord, type InboxMessage, type PendingHandoff, type RegistryState } from './state.js';

/** The agent acted: the idle clock restarts and the watchdog's nudges reset. */
function touch(agent: AgentRecord | undefined, ts: number): void {
  if (!agent) return;
  agent.started = true;
  agent.last_activity_at = ts;
  agent.nudges = 0;
  agent.nudge_escalated = false;
}

/** A message into an inbox; a reused message id replaces the earlier one and its characters. */
function putInInbox(agent: AgentRecord, message: InboxMessage): void {
  const previous = agent.inbox.get(message.message_id);
  if (previous) agent.inbox_chars -= previous.content.length;
  agent.inbox_chars += message.content.length;
  agent.inbox.set(message.message_id, message);
}

/** Tool uses held open per agent (tool_called without its tool_result): past this, the oldest is forgotten. */
export const MAX_OPEN_TOOL_USES = 1000;

const handoff = (detail: string, ts: number): PendingHandoff => ({
  detail,
  since: ts,
  pings: 0,
  last_ping_at: ts,
  escalated: false,
});

/**
 * The one reducer. It applies a stored event to the state in place (the state is large and
 * the hot path is hot; in-place is the honest cost model) and depends on nothing but the
 * state and the event, so replaying the logs rebuilds exactly what live operation built.
 * Events it does not know (observability-only ones) only touch the task's counters.
 */
export function reduce(state: RegistryState, e: StoredEvent): void {
  const task = state.tasks.get(e.task_id);
  if (task) {
    task.last_event_at = e.ts;
    task.event_count = e.seq;
  }

  switch (e.event) {
    case 'task_created': {
      state.tasks.set(e.task_id, {
        task_id: e.task_id,
        text: e.text,
        name: e.name,
        skill: e.skill,
        model: e.model,
        workspace: e.workspace,
        spawn: e.spawn,
        status: 'running',
        root_agent_id: e.root_agent_id,
        created_at: e.ts,
        ended_at: null,
        end_reason: null,
        last_event_at: e.ts,
        event_count: e.seq,
        agent_ids: [],
        team_ids: [],
        plan_ids: [],
        question_ids: [],
      });
      return;
    }
    case 'task_ended': {
      if (!task) return;
      task.status = e.status;
      task.ended_at = e.ts;
      task.end_reason = e.reason;
      return;
    }
    case 'team_created': {
      state.teams.set(e.team_id, {
        team_id: e.team_id,
        task_id: e.task_id,
        name: e.name,
        leader_id: e.leader_id,
        parent_team_id: e.parent_team_id,
        depth: e.depth,
        task: e.task,
        rules: e.rules,
        member_ids: [],
        created_at: e.ts,
        via: e.via,
      });
      const leader = state.agents.get(e.leader_id);
      leader?.leads.push(e.team_id);
      if (leader && e.via === 'spawn_agent') leader.plan_team_id = e.team_id;
      touch(leader, e.ts);
      task?.team_ids.push(e.team_id);
      return;
    }
    case 'agent_spawned': {
      state.agents.set(e.agent_id, {
        agent_id: e.agent_id,
        task_id: e.task_id,
        name: e.name,
        role: e.role,
        skill: e.skill,
        description: e.description,
        model: e.model,
        team_id: e.team_id,
        leader_id: e.leader_id,
        plan_task_id: e.plan_task_id,
        workspace_path: e.workspace_path,
        project_workspace_path: e.project_workspace_path,
        created_at: e.ts,
        leads: [],
        inbox: new Map(),
        inbox_chars: 0,
        delivered_count: 0,
        sent_count: 0,
        launch: null,
        spawner_id: null,
        tokens_gen: 0,
        session_id: null,
        started: false,
        running: false,
        error: null,
        open_tool_uses: new Set(),
        crash_strikes: 0,
        contract_strikes: 0,
        parked: false,
        cost_base: 0,
        active_plan_id: null,
        plan_id: e.plan_id,
        plan_team_id: null,
        review: null,
        termination_request: null,
        nudges: 0,
        last_nudge_at: null,
        nudge_escalated: false,
        terminate_posted: false,
        terminate_consumed: false,
        terminated_at: null,
        last_activity_at: e.ts,
        stats: { input_tokens: 0, output_tokens: 0, cost_usd: 0, tool_calls: 0, llm_calls: 0 },
      });
      if (e.team_id) state.teams.get(e.team_id)?.member_ids.push(e.agent_id);
      task?.agent_ids.push(e.agent_id);
      return;
    }
    case 'launch.requested': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      agent.launch = {
        prompt: e.prompt,
        first_message: e.first_message,
        model: e.model,
        workspace_path: e.workspace_path,
        project_workspace_path: e.project_workspace_path,
        requested_at: e.ts,
      };
      return;
    }
    case 'send_message': {
      const recipient = state.agents.get(e.to);
      if (recipient) {
        putInInbox(recipient, {
          message_id: e.message_id,
          from: e.caller_id,
          kind: e.caller_id === USER ? 'user' : 'message',
          content: e.content,
          ts: e.ts,
        });
      }
      const sender = state.agents.get(e.caller_id);
      if (sender) sender.sent_count++;
      touch(sender, e.ts);
      return;
    }
    case 'inbox.posted': {
      const recipient = state.agents.get(e.to);
      if (recipient)
        putInInbox(recipient, { message_id: e.message_id, from: e.from, kind: e.kind, content: e.content, ts: e.ts });
      return;
    }
    case 'inbox.withdrawn': {
      const recipient = state.agents.get(e.to);
      const withdrawn = recipient?.inbox.get(e.message_id);
      if (!recipient || !withdrawn) return;
      recipient.inbox.delete(e.message_id);
      recipient.inbox_chars -= withdrawn.content.length;
      return;
    }
    case 'agent_input': {
      const agent = state.agents.get(e.caller_id);
      if (!agent) return;
      const delivered = agent.inbox.get(e.message_id);
      if (delivered) {
        agent.inbox.delete(e.message_id);
        agent.inbox_chars -= delivered.content.length;
        agent.delivered_count++;
      }
      // A delivered message is the agent's next attempt: a reported failure no longer stands.
      agent.error = null;
      // The server's own pings and nudges are not activity: they must not reset the ladder.
      if (e.from !== BEIDOU) touch(agent, e.ts);
      return;
    }
    case 'delivering': {
      // Not activity yet (that is the agent_input): only a mark that the message may have been seen.
      const agent = state.agents.get(e.caller_id);
      for (const id of e.message_ids) {
        const message = agent?.inbox.get(id);
        if (message) message.redelivered = true;
      }
      return;
    }
    case 'terminate.posted': {
      const agent = state.agents.get(e.agent_id);
      if (agent) agent.terminate_posted = true;
      touch(state.agents.get(e.caller_id), e.ts);
      return;
    }
    case 'terminate.consumed': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      agent.terminate_posted = true;
      agent.terminate_consumed = true;
      agent.terminated_at = e.ts;
      agent.review = null;
      agent.termination_request = null;
      // Its process is gone for good: no launch, no spawner slot.
      agent.launch = null;
      agent.spawner_id = null;
      agent.running = false;
      return;
    }
    case 'plan_declared': {
      state.plans.set(e.plan_id, {
        plan_id: e.plan_id,
        task_id: e.task_id,
        owner_agent_id: e.owner_agent_id,
        plan_path: e.plan_path,
        tasks: new Map(e.tasks.map((t) => [t.id, { ...t, depends_on: [...t.depends_on], agent_id: null }])),
        created_at: e.ts,
        removed_at: null,
      });
      task?.plan_ids.push(e.plan_id);
      const owner = state.agents.get(e.owner_agent_id);
      if (owner) owner.active_plan_id = e.plan_id;
      touch(owner, e.ts);
      return;
    }
    case 'plan_removed': {
      const plan = state.plans.get(e.plan_id);
      if (plan) {
        plan.removed_at = e.ts;
        // Only its ids and statuses stay, the rest leaves memory (the log and the removed copy
        // keep it): a declare/remove loop then holds no more than the plans' ids.
        for (const planTask of plan.tasks.values()) {
          planTask.role = '';
          planTask.skill = '';
          planTask.task = '';
          planTask.description = '';
          planTask.model = null;
          planTask.depends_on = [];
        }
      }
      const owner = state.agents.get(e.owner_agent_id);
      if (owner && owner.active_plan_id === e.plan_id) owner.active_plan_id = null;
      touch(owner, e.ts);
      return;
    }
    case 'task_ready':
    case 'task_spawned':
    case 'task_done':
    case 'task_failed': {
      const plan = state.plans.get(e.plan_id);
      const planTask = plan?.tasks.get(e.plan_task_id);
      if (!plan || !planTask) return;
      if (e.event === 'task_ready') planTask.status = 'ready';
      else if (e.event === 'task_done') planTask.status = 'done';
      else if (e.event === 'task_failed') planTask.status = 'failed';
      else {
        planTask.status = 'in_flight';
        planTask.agent_id = e.agent_id;
        touch(state.agents.get(plan.owner_agent_id), e.ts);
      }
      return;
    }
    case 'status': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      if (e.state === 'review_pending') agent.review = handoff(e.detail, e.ts);
      else if (e.state === 'termination_requested') agent.termination_request = handoff(e.detail, e.ts);
      touch(agent, e.ts);
      return;
    }
    case 'review.acknowledged':
    case 'completion.approved': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      agent.review = null;
      agent.termination_request = null;
      if (e.event === 'completion.approved') touch(state.agents.get(e.leader_id), e.ts);
      return;
    }
    case 'completion.reping':
    case 'review.escalated_to_user': {
      const agent = state.agents.get(e.agent_id);
      const pending = e.pending === 'review' ? agent?.review : agent?.termination_request;
      if (!pending) return;
      if (e.event === 'completion.reping') {
        pending.pings = e.ping_count;
        pending.last_ping_at = e.ts;
      } else {
        pending.escalated = true;
      }
      return;
    }
    case 'liveness.nudge': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      agent.nudges = e.nudge_count;
      agent.last_nudge_at = e.ts;
      return;
    }
    case 'liveness.escalated_to_user': {
      const agent = state.agents.get(e.agent_id);
      if (agent) agent.nudge_escalated = true;
      return;
    }
    case 'review_gate.denied':
      touch(state.agents.get(e.caller_id), e.ts);
      return;
    case 'question_asked': {
      state.questions.set(e.qid, {
        qid: e.qid,
        task_id: e.task_id,
        asker: e.asker,
        questions: e.questions,
        prompt: e.prompt,
        context: e.context,
        origin: e.origin,
        subject_agent_id: e.subject_agent_id,
        chain: [e.holder ?? USER],
        status: 'pending',
        answers: null,
        answer_text: null,
        answered_by: null,
        created_at: e.ts,
        answered_at: null,
        audit: [{ by: e.asker, action: 'asked', reason: null, ts: e.ts }],
      });
      task?.question_ids.push(e.qid);
      touch(state.agents.get(e.asker), e.ts);
      return;
    }
    case 'question_escalated': {
      const q = state.questions.get(e.qid);
      if (!q) return;
      q.chain.push(e.new_holder ?? USER);
      q.audit.push({ by: e.by, action: 'escalated', reason: e.reason, ts: e.ts });
      touch(state.agents.get(e.by), e.ts);
      return;
    }
    case 'question_answered':
    case 'question_declined': {
      const q = state.questions.get(e.qid);
      if (!q) return;
      q.answered_at = e.ts;
      if (e.event === 'question_answered') {
        q.status = 'answered';
        q.answers = e.answers;
        q.answer_text = e.answer_text;
        q.answered_by = e.by;
        q.audit.push({ by: e.by, action: 'answered', reason: e.reason, ts: e.ts });
        touch(state.agents.get(e.by), e.ts);
      } else {
        q.status = 'declined';
        q.answered_by = USER;
        q.audit.push({ by: USER, action: 'declined', reason: e.reason, ts: e.ts });
      }
      // Settled, its texts leave memory (the log keeps them, `question_asked`); its summary stays.
      q.questions = [];
      q.context = null;
      return;
    }
    case 'launch.assigned': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      agent.spawner_id = e.spawner_id;
      return;
    }
    case 'spawner.lost': {
      for (const agentId of e.agent_ids) {
        const agent = state.agents.get(agentId);
        if (!agent || agent.spawner_id !== e.spawner_id) continue;
        agent.spawner_id = null;
        agent.running = false;
        agent.open_tool_uses.clear();
      }
      return;
    }
    case 'spawner.spooled':
      state.spool_hwm.set(e.spawner_id, Math.max(state.spool_hwm.get(e.spawner_id) ?? 0, e.spool_seq));
      return;
    case 'agent.tokens_revoked': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      // Counted in the log's order: every token of an earlier generation is refused.
      agent.tokens_gen++;
      // Its process holds a refused token: stopped, and queued for a launch with a fresh one.
      if (e.spawner_id && agent.spawner_id === e.spawner_id) {
        agent.spawner_id = null;
        agent.running = false;
        agent.open_tool_uses.clear();
      }
      return;
    }
    case 'spawner_tokens.revoked':
      state.spawner_tokens_gen++;
      return;
    case 'agent_started': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      if (!e.resumed) agent.cost_base = agent.stats.cost_usd;
      agent.session_id = e.session_id ?? agent.session_id;
      agent.spawner_id = e.spawner_id;
      agent.running = true;
      agent.parked = false;
      agent.error = null;
      agent.open_tool_uses.clear();
      touch(agent, e.ts);
      return;
    }
    case 'agent_completed': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      agent.running = false;
      agent.open_tool_uses.clear();
      // Terminated: no launch any more. Escalated: parked until someone messages it. Any
      // other end is the spawner's to resume (it keeps the agent).
      if (e.terminated) {
        agent.launch = null;
        agent.spawner_id = null;
      } else if (
        (e.stop_reason === 'crash_escalated' || e.stop_reason === 'contract_violation_escalated') &&
        !agent.terminate_posted
      ) {
        // (An agent already being terminated keeps its spawner until the spawner acknowledges.)
        agent.parked = true;
        agent.spawner_id = null;
      }
      // Escalated: someone was told; a relaunch (a message to it) starts a new count.
      if (e.stop_reason === 'crash_escalated' || e.stop_reason === 'contract_violation_escalated') {
        agent.crash_strikes = 0;
        agent.contract_strikes = 0;
      }
      return;
    }
    case 'agent_crashed': {
      const agent = state.agents.get(e.caller_id);
      if (!agent) return;
      agent.crash_strikes = e.strike_count;
      // The second strike restarts afresh: its session is not resumed again, by any spawner.
      if (e.strike_count === 2) agent.session_id = null;
      return;
    }
    case 'contract_violation': {
      const agent = state.agents.get(e.agent_id);
      if (agent) agent.contract_strikes = e.strike_count;
      return;
    }
    case 'strikes.reset': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      agent.crash_strikes = 0;
      agent.contract_strikes = 0;
      return;
    }
    case 'turn.usage': {
      const agent = state.agents.get(e.caller_id);
      if (!agent) return;
      agent.stats.input_tokens +=
        e.input_tokens + (e.cache_creation_input_tokens ?? 0) + (e.cache_read_input_tokens ?? 0);
      agent.stats.output_tokens += e.output_tokens;
      agent.stats.llm_calls++;
      touch(agent, e.ts);
      return;
    }
    case 'tool_called': {
      const agent = state.agents.get(e.caller_id);
      if (!agent) return;
      agent.stats.tool_calls++;
      agent.open_tool_uses.add(e.tool_use_id);
      // Bounded: an agent that never reports results must not grow the registry; the oldest go.
      if (agent.open_tool_uses.size > MAX_OPEN_TOOL_USES)
        agent.open_tool_uses.delete(agent.open_tool_uses.values().next().value!);
      touch(agent, e.ts);
      return;
    }
    case 'tool_result': {
      const agent = state.agents.get(e.caller_id);
      if (!agent) return;
      agent.open_tool_uses.delete(e.tool_use_id);
      touch(agent, e.ts);
      return;
    }
    case 'assistant_text':
      touch(state.agents.get(e.caller_id), e.ts);
      return;
    case 'run.cost': {
      const agent = state.agents.get(e.agent_id);
      if (agent) agent.stats.cost_usd = agent.cost_base + e.total_cost_usd;
      return;
    }
    case 'agent_error': {
      // Without a reason (logs written before reasons existed) it changes nothing, as before.
      const agent = state.agents.get(e.caller_id);
      if (agent && e.reason) agent.error = { reason: e.reason, msg: e.msg, stderr: lastLines(e.stderr, 20), at: e.ts };
      return;
    }
    case 'root_crash_escalation':
    case 'config_warning':
    case 'ask_user_question.redirected':
    case 'disallowed_alias.denied':
    case 'completion.reported':
    case 'completion.empty':
    case 'depth.warning':
    case 'liveness_check':
    case 'terminate.forced':
    case 'watchdog.exception':
      return;
    default: {
      // Adding an event to the catalogue without deciding here what it does fails to compile.
      const unhandled: never = e;
      void unhandled;
    }
  }
}

function lastLines(text: string, n: number): string {
  return text.split('\n').slice(-n).join('\n');
}
