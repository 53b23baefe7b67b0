import type { EventDraft, StoredEvent } from '../events/catalogue.js';
import { agentStatus } from '../registry/queries.js';
import { BEIDOU, USER, type AgentRecord, type InboxMessage } from '../registry/state.js';
import type { Services } from './services.js';

/**
 * The server's side of the spawner protocol. Spawners hold one command stream each; the
 * server assigns queued launches to spawners with room, pushes each running agent's inbox
 * to its spawner as deliveries, and sends terminate commands. Assignments are events
 * (`launch.assigned`, `spawner.lost`), so a restarted server knows who runs what; the
 * connections, heartbeats and deliveries in flight are runtime only.
 */

export type SpawnerCommand =
  | {
      type: 'hello';
      spawner_id: string;
      heartbeat_s: number;
      terminate_grace_s: number;
      /** Agents this spawner should be running; any other local process is to be ended. */
      agents: string[];
    }
  | {
      type: 'launch';
      agent_id: string;
      task_id: string;
      name: string;
      skill: string;
      token: string;
      prompt: string;
      first_message: string;
      model: string | null;
      workspace_path: string;
      project_workspace_path: string;
      allowed_tools: string[];
      /** The root answers to the user: its escalations go to the gateway. */
      is_root: boolean;
      resume: boolean;
      session_id: string | null;
    }
  | {
      type: 'deliver';
      agent_id: string;
      message_id: string;
      from: string;
      from_name: string;
      kind: InboxMessage['kind'];
      /** The delivered text: `[from <name> (<agent_id>)] <content>`. */
      content: string;
    }
  | { type: 'terminate'; agent_id: string };

interface Connection {
  spawnerId: string;
  name: string;
  maxAgents: number;
  lastBeat: number;
  send: (command: SpawnerCommand) => void;
  close: () => void;
}

export class Spawners {
  private readonly connections = new Map<string, Connection>();
  /** Heartbeats of spawners that hold agents but have no stream right now (reconnecting). */
  private readonly lastBeat = new Map<string, number>();
  /** Deliveries pushed to a spawner and not yet acknowledged: no other path may take them. */
  private readonly reserved = new Map<string, Set<string>>();
  private timer: NodeJS.Timeout | null = null;
  private scheduling = false;
  private rescheduling = false;

  constructor(private readonly services: Omit<Services, 'spawners'>) {
    services.registry.observeDurable((events) => this.onCommitted(events));
    services.inboxes.setReservation((agentId, messageId) => this.reserved.get(agentId)?.has(messageId) ?? false);
  }

  start(): void {
    const every = this.services.config.spawnerHeartbeatS * 1000;
    this.timer = setInterval(() => void this.checkHeartbeats(), every);
    this.timer.unref();
    // Spawners that held agents before a restart get three beats to come back.
    const now = Date.now();
    for (const agent of this.services.registry.state.agents.values()) {
      if (agent.spawner_id && !this.lastBeat.has(agent.spawner_id)) this.lastBeat.set(agent.spawner_id, now);
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    for (const c of this.connections.values()) c.close();
    this.connections.clear();
  }

  private get registry() {
    return this.services.registry;
  }

  private agentsOf(spawnerId: string): AgentRecord[] {
    const out: AgentRecord[] = [];
    for (const a of this.registry.state.agents.values()) if (a.spawner_id === spawnerId) out.push(a);
    return out;
  }

  // ---- the stream ----

  connect(spawnerId: string, name: string, maxAgents: number, send: Connection['send'], close: () => void): void {
    this.connections.get(spawnerId)?.close();
    const conn: Connection = { spawnerId, name, maxAgents, lastBeat: Date.now(), send, close };
    this.connections.set(spawnerId, conn);
    this.lastBeat.set(spawnerId, conn.lastBeat);
    const held = this.agentsOf(spawnerId);
    send({
      type: 'hello',
      spawner_id: spawnerId,
      heartbeat_s: this.services.config.spawnerHeartbeatS,
      terminate_grace_s: this.services.config.terminateGraceS,
      agents: held.map((a) => a.agent_id),
    });
    // Re-send what it may have missed while away: launches, terminates and deliveries.
    for (const agent of held) {
      this.reserved.delete(agent.agent_id);
      if (agent.terminate_posted) this.sendTerminate(agent);
      else if (!agent.running) void this.sendLaunch(conn, agent, agent.started);
      else this.pushInbox(agent);
    }
    this.services.logger.info({ spawner: spawnerId, name, maxAgents, held: held.length }, 'spawner connected');
    void this.schedule();
  }

  disconnect(spawnerId: string, send: Connection['send']): void {
    const conn = this.connections.get(spawnerId);
    if (conn?.send !== send) return;
    this.connections.delete(spawnerId);
    // Its agents stay assigned until three heartbeats are missed: a stream can reconnect.
    this.services.logger.info({ spawner: spawnerId }, 'spawner stream closed');
  }

  heartbeat(spawnerId: string): void {
    const now = Date.now();
    this.lastBeat.set(spawnerId, now);
    const conn = this.connections.get(spawnerId);
    if (conn) conn.lastBeat = now;
  }

  /** A spawner that missed three beats loses its agents; another spawner resumes them. */
  private async checkHeartbeats(): Promise<void> {
    const limit = 3 * this.services.config.spawnerHeartbeatS * 1000;
    const now = Date.now();
    for (const [spawnerId, beat] of this.lastBeat) {
      if (now - beat <= limit) continue;
      this.lastBeat.delete(spawnerId);
      const conn = this.connections.get(spawnerId);
      conn?.close();
      this.connections.delete(spawnerId);
      await this.lose(spawnerId).catch((err: unknown) => this.services.logger.error({ err, spawnerId }, 'could not release a lost spawner'));
    }
  }

  private async lose(spawnerId: string): Promise<void> {
    const held = this.agentsOf(spawnerId);
    if (held.length === 0) return;
    this.services.logger.warn({ spawner: spawnerId, agents: held.length }, 'spawner lost; its agents wait for another');
    const byTask = new Map<string, AgentRecord[]>();
    for (const a of held) byTask.set(a.task_id, [...(byTask.get(a.task_id) ?? []), a]);
    const drafts: EventDraft[] = [];
    for (const [taskId, agents] of byTask) {
      drafts.push({ event: 'spawner.lost', task_id: taskId, spawner_id: spawnerId, agent_ids: agents.map((a) => a.agent_id) });
      for (const a of agents) {
        this.reserved.delete(a.agent_id);
        // A sentinel its lost spawner never acknowledged is consumed now: nobody runs it.
        if (a.terminate_posted && !a.terminate_consumed) {
          drafts.push({ event: 'terminate.consumed', task_id: taskId, agent_id: a.agent_id, via: 'server' });
        }
      }
    }
    await this.registry.commit(drafts);
    await this.schedule();
  }

  // ---- scheduling ----

  private schedulable(a: AgentRecord): boolean {
    if (!a.launch || a.spawner_id || a.terminate_posted) return false;
    if (this.registry.task(a.task_id)?.status !== 'running') return false;
    return !a.parked || a.inbox.size > 0;
  }

  /** Assigns queued launches to connected spawners with room, least loaded first. */
  async schedule(): Promise<void> {
    if (this.scheduling) {
      this.rescheduling = true;
      return;
    }
    this.scheduling = true;
    try {
      do {
        this.rescheduling = false;
        const load = new Map<string, number>();
        for (const c of this.connections.values()) load.set(c.spawnerId, this.agentsOf(c.spawnerId).length);
        for (const agent of this.registry.state.agents.values()) {
          if (!this.schedulable(agent)) continue;
          const target = [...this.connections.values()]
            .filter((c) => (load.get(c.spawnerId) ?? 0) < c.maxAgents)
            .sort((x, y) => (load.get(x.spawnerId) ?? 0) / x.maxAgents - (load.get(y.spawnerId) ?? 0) / y.maxAgents)[0];
          if (!target) break;
          load.set(target.spawnerId, (load.get(target.spawnerId) ?? 0) + 1);
          const resume = agent.started;
          await this.registry.commit([
            { event: 'launch.assigned', task_id: agent.task_id, agent_id: agent.agent_id, spawner_id: target.spawnerId, resume, session_id: resume ? agent.session_id : null },
          ]);
          await this.sendLaunch(target, agent, resume);
        }
      } while (this.rescheduling);
    } finally {
      this.scheduling = false;
    }
  }

  private async sendLaunch(conn: Connection, agent: AgentRecord, resume: boolean): Promise<void> {
    if (!agent.launch) return;
    const token = await this.services.tokens.mintAgent(agent.agent_id, agent.task_id);
    // A terminate may have been posted (and sent) while we awaited: then no launch at all.
    const launch = agent.launch;
    if (!launch || agent.terminate_posted) return;
    let allowedTools: string[] = [];
    try {
      allowedTools = this.services.skills.load(agent.skill).allowedTools;
    } catch {
      // The skill loaded when the agent was registered; a later edit breaking it must not stop a launch.
    }
    conn.send({
      type: 'launch',
      agent_id: agent.agent_id,
      task_id: agent.task_id,
      name: agent.name,
      skill: agent.skill,
      token,
      prompt: launch.prompt,
      first_message: launch.first_message,
      model: launch.model,
      workspace_path: launch.workspace_path,
      project_workspace_path: launch.project_workspace_path,
      allowed_tools: allowedTools,
      is_root: agent.leader_id === USER,
      resume,
      session_id: resume ? agent.session_id : null,
    });
  }

  private sendTerminate(agent: AgentRecord): void {
    const conn = agent.spawner_id ? this.connections.get(agent.spawner_id) : undefined;
    if (!conn) return;
    conn.send({ type: 'terminate', agent_id: agent.agent_id });
  }

  /** Pushes every waiting message of a running agent that is not already in flight. */
  private pushInbox(agent: AgentRecord): void {
    if (!agent.running || agent.terminate_posted || !agent.spawner_id) return;
    const conn = this.connections.get(agent.spawner_id);
    if (!conn) return;
    let reserved = this.reserved.get(agent.agent_id);
    for (const message of agent.inbox.values()) {
      if (reserved?.has(message.message_id)) continue;
      if (!reserved) this.reserved.set(agent.agent_id, (reserved = new Set()));
      reserved.add(message.message_id);
      conn.send({
        type: 'deliver',
        agent_id: agent.agent_id,
        message_id: message.message_id,
        from: message.from,
        from_name: this.services.inboxes.displayName(message.from),
        kind: message.kind,
        content: this.services.inboxes.deliveredText(message),
      });
    }
  }

  private onCommitted(events: readonly StoredEvent[]): void {
    let reschedule = false;
    for (const e of events) {
      switch (e.event) {
        case 'launch.requested':
        case 'agent_completed':
        case 'task_ended':
          reschedule = true;
          break;
        case 'send_message':
        case 'inbox.posted': {
          const agent = this.registry.agent(e.to);
          if (!agent) break;
          if (agent.parked) reschedule = true;
          else this.pushInbox(agent);
          break;
        }
        case 'agent_started': {
          const agent = this.registry.agent(e.agent_id);
          if (agent) this.pushInbox(agent);
          break;
        }
        case 'terminate.posted': {
          const agent = this.registry.agent(e.agent_id);
          if (agent?.spawner_id) this.sendTerminate(agent);
          break;
        }
      }
    }
    if (reschedule) queueMicrotask(() => void this.schedule());
  }

  // ---- what a spawner reports ----

  /** The spawner wrote the message into its agent: the delivery happened (exactly once). */
  async acknowledgeDelivery(spawnerId: string, agentId: string, messageId: string): Promise<void> {
    const agent = this.ownAgent(spawnerId, agentId);
    const message = agent.inbox.get(messageId);
    this.reserved.get(agentId)?.delete(messageId);
    if (!message) return; // already delivered (a repeated ack after a reconnect)
    await this.registry.commit([
      {
        event: 'agent_input',
        task_id: agent.task_id,
        caller_id: agent.agent_id,
        from: message.from,
        message_kind: message.kind === 'message' || message.kind === 'user' ? 'user' : 'system',
        source: 'queue',
        content: message.content,
        message_id: messageId,
        via: 'spawner',
      },
    ]);
  }

  /** The spawner ended the agent's process after a terminate command. */
  async acknowledgeTermination(spawnerId: string, agentId: string): Promise<void> {
    if (this.registry.agent(agentId)?.terminate_consumed) return; // a repeated ack
    const agent = this.ownAgent(spawnerId, agentId);
    const drafts: EventDraft[] = [{ event: 'terminate.consumed', task_id: agent.task_id, agent_id: agentId, via: 'spawner' }];
    if (agent.running) drafts.unshift({ event: 'agent_completed', task_id: agent.task_id, agent_id: agentId, terminated: true, stop_reason: 'end_turn' });
    await this.registry.commit(drafts);
  }

  async started(spawnerId: string, agentId: string, sessionId: string | null, resumed: boolean): Promise<void> {
    const agent = this.ownAgent(spawnerId, agentId);
    // A process started for an agent already being terminated must be ended, not recorded.
    if (agent.terminate_posted) throw new NotYourAgent(agentId, 'is being terminated; end its process');
    await this.registry.commit([
      {
        event: 'agent_started',
        task_id: agent.task_id,
        agent_id: agentId,
        team_id: agent.team_id,
        role: agent.role,
        name: agent.name,
        template: agent.skill,
        model_requested: agent.launch?.model ?? agent.model,
        session_id: sessionId,
        resumed,
        spawner_id: spawnerId,
      },
    ]);
  }

  /**
   * Validated drained events; an escalation (the spawner gave up on the agent) is answered
   * in the same commit: a message to the leader, or for the root a question to the user.
   */
  async report(spawnerId: string, agentId: string, drafts: EventDraft[]): Promise<void> {
    const agent = this.ownAgent(spawnerId, agentId);
    // Nobody needs telling that an agent already being terminated has stopped.
    const escalations = agent.terminate_posted ? [] : drafts.flatMap((d) =>
      d.event === 'agent_completed' && (d.stop_reason === 'crash_escalated' || d.stop_reason === 'contract_violation_escalated')
        ? this.escalation(agent, d.stop_reason === 'crash_escalated' ? 'it crashed three times in a row' : 'it exited on its own three times in a row')
        : [],
    );
    await this.registry.commit([...drafts, ...escalations]);
  }

  private escalation(agent: AgentRecord, what: string): EventDraft[] {
    if (agent.leader_id === USER) return this.services.gateway.agentFailureDrafts(agent, what);
    return [
      {
        event: 'inbox.posted',
        task_id: agent.task_id,
        to: agent.leader_id,
        from: BEIDOU,
        kind: 'system',
        content: `[AGENT DOWN] ${agent.name} (${agent.agent_id}) stopped: ${what}. It will not be restarted on its own. Message it to have it resumed, or end it with terminate_child (force: true).`,
        message_id: this.services.ids.next('msg'),
      },
    ];
  }

  private ownAgent(spawnerId: string, agentId: string): AgentRecord {
    const agent = this.registry.agent(agentId);
    if (!agent || agent.spawner_id !== spawnerId) throw new NotYourAgent(agentId);
    return agent;
  }

  /** For the admin API: what each spawner holds. */
  view() {
    return [...this.lastBeat.keys()].map((spawnerId) => {
      const conn = this.connections.get(spawnerId);
      return {
        spawner_id: spawnerId,
        name: conn?.name ?? null,
        connected: conn !== undefined,
        max_agents: conn?.maxAgents ?? null,
        last_heartbeat_at: (this.lastBeat.get(spawnerId) ?? 0) / 1000,
        agents: this.agentsOf(spawnerId).map((a) => ({ agent_id: a.agent_id, status: agentStatus(a) })),
      };
    });
  }
}

export class NotYourAgent extends Error {
  constructor(
    readonly agentId: string,
    why = 'is not assigned to this spawner',
  ) {
    super(`agent ${agentId} ${why}`);
  }
}
