import type { EventDraft } from '../events/catalogue.js';
import { directChildren } from '../registry/queries.js';
import { BEIDOU, USER, type AgentRecord, type PendingHandoff, type QuestionRecord } from '../registry/state.js';
import type { Services } from './services.js';

/** Pings (pass A) or nudges (pass B) before the third strike escalates to the user. */
const PINGS_BEFORE_ESCALATION = 3;

/**
 * The server's watchdog (SPEC §4). Pass A: a review or termination request pending past
 * the ping interval pings the leader, twice, then escalates to the user gateway, then stays
 * silent. Pass B: a leader (or the root) idle past the nudge time — with its whole subtree
 * idle, no tool in flight, no hand-off of its own pending and no question pending through it
 * — is nudged the same way. Its progress (pings, nudges, escalations) is in the events, so
 * a restart resumes the ladder instead of starting it over. It never crashes the server.
 */
export class Watchdog {
  private timer: NodeJS.Timeout | null = null;
  private running = false;

  constructor(private readonly services: Services) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.services.config.watchdogS * 1000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** One pass over every running task; overlapping ticks are skipped. */
  async tick(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      for (const task of this.services.registry.state.tasks.values()) {
        if (task.status !== 'running') continue;
        for (const [pass, run] of [
          ['A', () => this.passA(task.agent_ids)],
          ['B', () => this.passB(task.agent_ids, task.question_ids)],
        ] as const) {
          try {
            await run();
          } catch (err) {
            this.services.logger.error({ err, pass, task_id: task.task_id }, 'watchdog pass failed');
            await this.services.registry
              .commit([{ event: 'watchdog.exception', task_id: task.task_id, pass, message: (err as Error).message ?? String(err) }])
              .catch(() => undefined);
          }
        }
      }
    } finally {
      this.running = false;
    }
  }

  private live(ids: readonly string[]): AgentRecord[] {
    const out: AgentRecord[] = [];
    for (const id of ids) {
      const a = this.services.registry.agent(id);
      if (a && !a.terminate_posted) out.push(a);
    }
    return out;
  }

  private async passA(agentIds: readonly string[]): Promise<void> {
    const { registry, config, clock, ids, gateway } = this.services;
    for (const child of this.live(agentIds)) {
      if (child.leader_id === USER) continue; // the root's hand-offs went to the gateway directly
      const leader = registry.agent(child.leader_id);
      if (!leader || leader.terminate_posted) continue;
      for (const [pending, handoff] of [
        ['review', child.review],
        ['termination', child.termination_request],
      ] as Array<['review' | 'termination', PendingHandoff | null]>) {
        if (!handoff || handoff.escalated) continue;
        const now = clock.now();
        if (now - handoff.last_ping_at < config.reviewPingS) continue;
        if (handoff.pings + 1 >= PINGS_BEFORE_ESCALATION) {
          await gateway.escalateReview(child, leader, pending, now - handoff.since);
          continue;
        }
        const what = pending === 'review' ? 'signalled review' : 'requested termination';
        const drafts: EventDraft[] = [
          {
            event: 'inbox.posted',
            task_id: child.task_id,
            to: leader.agent_id,
            from: BEIDOU,
            kind: 'system',
            content: `[REVIEW PENDING] ${child.name} (${child.agent_id}) ${what} ${Math.round(now - handoff.since)} s ago and is waiting on you. Approve with terminate_child or send rework with send_message (list_pending_reviews shows every pending hand-off).`,
            message_id: ids.next('msg'),
          },
          { event: 'completion.reping', task_id: child.task_id, agent_id: child.agent_id, leader_id: leader.agent_id, ping_count: handoff.pings + 1, pending },
        ];
        await registry.commit(drafts);
      }
    }
  }

  private async passB(agentIds: readonly string[], questionIds: readonly string[]): Promise<void> {
    const { registry, config, clock, ids, gateway, activity } = this.services;
    // This task's pending questions only: the pass runs per task.
    const questions = questionIds.map((id) => registry.state.questions.get(id)).filter((q) => q?.status === 'pending') as QuestionRecord[];
    for (const agent of this.live(agentIds)) {
      const isRoot = agent.leader_id === USER;
      const children = directChildren(registry.state, agent).filter((c) => !c.terminate_consumed);
      if (!isRoot && children.length === 0) continue;
      if (!agent.started) continue; // queued for a spawner that has not started it: nothing to nudge yet
      if (agent.review || agent.termination_request) continue;
      // A child's hand-off waiting on this leader is pass A's to chase, not a second ladder.
      if (children.some((c) => c.review || c.termination_request)) continue;
      // A tool call since the last nudge is activity too (read-only calls leave no event).
      const calledSinceNudge = activity.lastCallAt(agent.agent_id) > (agent.last_nudge_at ?? 0);
      const nudges = calledSinceNudge ? 0 : agent.nudges;
      if (agent.nudge_escalated && !calledSinceNudge) continue;
      if (questions.some((q) => q.asker === agent.agent_id || q.chain.includes(agent.agent_id))) continue;
      const subtree = this.subtree(agent);
      // A tool in flight: an MCP call to us, or one its process runs (drained, unfinished).
      if (subtree.some((a) => activity.busy(a.agent_id) || a.open_tool_uses.size > 0)) continue;
      // A leader waiting on children that are still working is not idle.
      const lastActive = Math.max(...subtree.map((a) => Math.max(a.last_activity_at, activity.lastCallAt(a.agent_id))));
      const now = clock.now();
      const since = Math.max(lastActive, agent.last_nudge_at ?? 0);
      if (now - since < config.idleNudgeS) continue;
      const idleS = now - lastActive;
      if (nudges + 1 >= PINGS_BEFORE_ESCALATION) {
        await gateway.escalateIdle(agent, idleS);
        continue;
      }
      await registry.commit([
        {
          event: 'inbox.posted',
          task_id: agent.task_id,
          to: agent.agent_id,
          from: BEIDOU,
          kind: 'system',
          content: `[LIVENESS] You and your team have been idle for ${Math.round(idleS)} s. Check list_pending_reviews and list_ready, answer what waits on you, or hand your work up with signal_review.`,
          message_id: ids.next('msg'),
        },
        { event: 'liveness.nudge', task_id: agent.task_id, agent_id: agent.agent_id, nudge_count: nudges + 1, idle_s: idleS },
      ]);
    }
  }

  /** The agent and every live agent below it. */
  private subtree(root: AgentRecord): AgentRecord[] {
    const out: AgentRecord[] = [];
    const visit = (a: AgentRecord) => {
      out.push(a);
      for (const c of directChildren(this.services.registry.state, a)) if (!c.terminate_consumed) visit(c);
    };
    visit(root);
    return out;
  }
}
