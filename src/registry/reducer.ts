import type { StoredEvent } from '../events/catalogue.js';
import { USER, type RegistryState } from './state.js';

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
      state.agents.get(e.leader_id)?.leads.push(e.team_id);
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
        delivered_count: 0,
        sent_count: 0,
        launch: null,
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
        recipient.inbox.set(e.message_id, {
          message_id: e.message_id,
          from: e.caller_id,
          kind: e.caller_id === USER ? 'user' : 'message',
          content: e.content,
          ts: e.ts,
        });
      }
      const sender = state.agents.get(e.caller_id);
      if (sender) {
        sender.sent_count++;
        sender.last_activity_at = e.ts;
      }
      return;
    }
    case 'agent_input': {
      const agent = state.agents.get(e.caller_id);
      if (!agent) return;
      if (agent.inbox.delete(e.message_id)) agent.delivered_count++;
      agent.last_activity_at = e.ts;
      return;
    }
    case 'terminate.posted': {
      const agent = state.agents.get(e.agent_id);
      if (agent) agent.terminate_posted = true;
      return;
    }
    case 'terminate.consumed': {
      const agent = state.agents.get(e.agent_id);
      if (!agent) return;
      agent.terminate_posted = true;
      agent.terminate_consumed = true;
      agent.terminated_at = e.ts;
      return;
    }
    case 'depth.warning':
      return;
  }
}
