import type { Logger } from 'pino';
import type { DomainContext } from '../../domain/context.js';
import { cutPastBudget } from '../../domain/past-budget.js';
import { reconcile } from '../../domain/reconcile.js';
import {
  agentStarted,
  agentsOf,
  resumable,
  spawnerLost,
  spawnerReport,
  terminationAcknowledged,
} from '../../domain/spawners.js';
import type { DomainError } from '../../domain/errors.js';
import { spawnerTokenRoom } from '../../domain/limits.js';
import { spawnerTokenStanding } from '../../domain/revocation.js';
import { SYSTEM_LOG, type EventDraft, type StoredEvent } from '../../events/catalogue.js';
import type { TokenService } from '../../identity/tokens.js';
import type { RunningAgent } from '../../protocol/spawner.js';
import type { Registry } from '../../registry/registry.js';
import type { SkillCatalog } from '../../skills/loader.js';
import type { Clock } from '../../util/clock.js';
import type { Inboxes } from '../inbox.js';
import type { WriteBudget } from '../write-budget.js';
import { SpawnerConnections, type Connection } from './connections.js';
import { Deliveries } from './deliveries.js';
import { Scheduler } from './scheduler.js';

/**
 * The server's side of the spawner protocol (docs/spawner-protocol.md): the connections
 * and heartbeats, the scheduler that assigns queued launches, and the deliveries in flight,
 * behind one face for the HTTP routes. What it decides is in domain/spawners.ts; commands
 * leave only once the events that cause them are durable.
 */
export class SpawnerHub {
  private readonly connections: SpawnerConnections;
  private readonly deliveries: Deliveries;
  private readonly scheduler: Scheduler;
  private timer: NodeJS.Timeout | null = null;
  /** When this server recorded each agent's latest start (clock seconds): a report may predate it. */
  private readonly startedAt = new Map<string, number>();

  constructor(
    private readonly deps: {
      registry: Registry;
      domain: DomainContext;
      inboxes: Inboxes;
      tokens: TokenService;
      skills: SkillCatalog;
      clock: Clock;
      logger: Logger;
      writeBudget: Pick<WriteBudget, 'within'>;
    },
  ) {
    const { registry, domain, inboxes, tokens, skills, clock } = deps;
    this.connections = new SpawnerConnections(clock, domain.config.spawnerHeartbeatS, (c) => this.stands(c.gen));
    this.deliveries = new Deliveries(registry, inboxes, this.connections);
    this.scheduler = new Scheduler(registry, this.connections, tokens, skills, domain.config.maxAgentsPerSpawner);
  }

  /** Whether a spawner token of generation `gen` stands now (not revoked; the system log readable). */
  private stands(gen: number): boolean {
    const { registry } = this;
    return spawnerTokenStanding(registry.state, gen, registry.quarantined.has(SYSTEM_LOG)) === 'current';
  }

  private get registry(): Registry {
    return this.deps.registry;
  }

  start(): void {
    this.timer = setInterval(() => void this.checkHeartbeats(), this.deps.domain.config.spawnerHeartbeatS * 1000);
    this.timer.unref();
    const held = [...this.registry.state.agents.values()].flatMap((a) => (a.spawner_id ? [a.spawner_id] : []));
    this.connections.expect(held);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.connections.closeAll();
  }

  // ---- the stream ----

  /**
   * Whether a stream asking for `maxAgents` may open: the instances of one spawner token
   * together run at most BEIDOU_MAX_AGENTS_PER_SPAWNER (this instance's own earlier stream,
   * which it replaces, apart). Null: it may.
   */
  admission(conn: Pick<Connection, 'spawnerId' | 'tokenId' | 'maxAgents'>): DomainError | null {
    const others = this.connections
      .all()
      .filter((c) => c.tokenId === conn.tokenId && c.spawnerId !== conn.spawnerId)
      .reduce((sum, c) => sum + c.maxAgents, 0);
    return spawnerTokenRoom(this.deps.domain.config, others, conn.maxAgents);
  }

  /**
   * Registers an open stream, unless its token no longer stands (revoked while the stream
   * was being set up) or it would pass its token's bound: then it is closed, and false.
   */
  connect(conn: Connection): boolean {
    const { spawnerId, name, maxAgents, send } = conn;
    if (!this.stands(conn.gen) || this.admission(conn)) {
      conn.close();
      return false;
    }
    this.connections.add(conn);
    const { config } = this.deps.domain;
    const held = agentsOf(this.registry.state, spawnerId);
    send({
      type: 'hello',
      spawner_id: spawnerId,
      heartbeat_s: config.spawnerHeartbeatS,
      terminate_grace_s: config.terminateGraceS,
      agents: held.map((a) => a.agent_id),
    });
    // Re-send what it may have missed while away: launches, terminates and deliveries.
    for (const agent of held) {
      this.deps.inboxes.release(agent.agent_id);
      if (agent.terminate_posted) this.deliveries.terminate(agent);
      else if (!agent.running) void this.scheduler.launch(conn, agent, resumable(agent));
      else this.deliveries.push(agent);
    }
    this.deps.logger.info(
      { spawner: spawnerId, name, maxAgents, taskIds: conn.taskIds, held: held.length },
      'spawner connected',
    );
    void this.scheduler.schedule();
    return true;
  }

  disconnect(spawnerId: string, send: Connection['send']): void {
    // Its agents stay assigned until three heartbeats are missed: a stream can reconnect.
    if (this.connections.remove(spawnerId, send))
      this.deps.logger.info({ spawner: spawnerId }, 'spawner stream closed');
  }

  /**
   * A beat; with `reported` (what the spawner runs) the registry is reconciled with it.
   * `taskIds`: the tasks its token is limited to (null: any), outside which it learns nothing.
   */
  async heartbeat(spawnerId: string, reported?: RunningAgent[], taskIds: string[] | null = null): Promise<void> {
    this.connections.beat(spawnerId);
    if (reported) await this.reconcile(spawnerId, reported, taskIds);
  }

  /**
   * An agent believed running there but not reported is a crash (relaunched here, or
   * escalated at the third strike); a process running for an agent that is not this
   * spawner's is stopped. Reservations of a crashed agent's inbox are freed, so its
   * messages go to whichever process runs it next.
   */
  private async reconcile(spawnerId: string, reported: RunningAgent[], taskIds: string[] | null): Promise<void> {
    this.connections.report(spawnerId, reported);
    const outcome = reconcile(this.deps.domain, { spawnerId, taskIds }, reported, this.deps.clock.now(), (id) =>
      this.startedAt.get(id),
    );
    const conn = this.connections.get(spawnerId);
    // Sent at once, before any commit is awaited, so a launch the scheduler assigns it later follows the stop.
    for (const s of outcome.stop) conn?.send({ type: 'stop', agent_id: s.agent_id, reason: s.reason });
    if (outcome.drafts.length === 0) return;
    this.deps.logger.warn(
      { spawner: spawnerId, missing: outcome.drafts.filter((d) => d.event === 'agent_crashed').length },
      'agents believed running are not; counted as crashes',
    );
    await this.registry.commit(outcome.drafts);
    for (const id of outcome.relaunch) {
      this.deps.inboxes.release(id);
      const agent = this.registry.agent(id);
      const now = this.connections.get(spawnerId);
      if (agent && now && agent.spawner_id === spawnerId && !agent.running && !agent.terminate_posted)
        await this.scheduler.launch(now, agent, resumable(agent));
    }
  }

  /** A spawner that missed three beats loses its agents; another spawner resumes them. */
  private async checkHeartbeats(): Promise<void> {
    const now = this.deps.clock.now();
    for (const spawnerId of this.connections.tracked()) {
      if (!this.connections.dropIfSilent(spawnerId, now)) continue;
      await this.lose(spawnerId).catch((err: unknown) =>
        this.deps.logger.error({ err, spawnerId }, 'could not release a lost spawner'),
      );
    }
  }

  private async lose(spawnerId: string): Promise<void> {
    const held = agentsOf(this.registry.state, spawnerId);
    if (held.length === 0) return;
    this.deps.logger.warn({ spawner: spawnerId, agents: held.length }, 'spawner lost; its agents wait for another');
    for (const a of held) this.deps.inboxes.release(a.agent_id);
    await this.registry.commit(spawnerLost(this.registry.state, spawnerId));
    await this.scheduler.schedule();
  }

  /** Durable observer: what leaves for a spawner because of committed events. */
  onDurable(events: readonly StoredEvent[]): void {
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
          else this.deliveries.push(agent);
          break;
        }
        case 'agent_started': {
          const agent = this.registry.agent(e.agent_id);
          if (agent) this.deliveries.push(agent);
          break;
        }
        case 'terminate.posted': {
          const agent = this.registry.agent(e.agent_id);
          if (agent?.spawner_id) this.deliveries.terminate(agent);
          break;
        }
        case 'agent.tokens_revoked':
          // Its process holds a refused token: stopped there, and launched again with a fresh one.
          if (e.spawner_id) {
            this.connections.get(e.spawner_id)?.send({ type: 'stop', agent_id: e.agent_id, reason: 'token_revoked' });
            this.deps.inboxes.release(e.agent_id);
            reschedule = true;
          }
          break;
        case 'spawner_tokens.revoked':
          this.connections.closeFallen();
          break;
      }
    }
    if (reschedule) queueMicrotask(() => void this.scheduler.schedule());
  }

  // ---- what a spawner reports ----

  // `mark` is the spool mark of a report sent from a spawner's spool (spooledMark), committed
  // with what the report commits; a report that commits nothing needs none (a replay of it is nothing too).

  acknowledgeDelivery(spawnerId: string, agentId: string, messageId: string, mark: EventDraft[] = []): Promise<void> {
    return this.deliveries.acknowledge(spawnerId, agentId, messageId, mark);
  }

  /** The spawner ended the agent's process after a terminate command. */
  async acknowledgeTermination(spawnerId: string, agentId: string, mark: EventDraft[] = []): Promise<void> {
    const drafts = terminationAcknowledged(this.registry.state, spawnerId, agentId);
    if (drafts.length > 0) await this.registry.commit([...drafts, ...mark]);
  }

  async started(
    spawnerId: string,
    agentId: string,
    sessionId: string | null,
    resumed: boolean,
    mark: EventDraft[] = [],
  ): Promise<void> {
    const drafts = agentStarted(this.registry.state, spawnerId, agentId, sessionId, resumed);
    // Before the commit: a heartbeat handled while it syncs must already see the start as new.
    this.startedAt.set(agentId, this.deps.clock.now());
    await this.registry.commit([...drafts, ...mark]);
  }

  /**
   * Validated drained events, with the server's answer to an escalation in the same commit.
   * Charged to the agent's write budget (what it prints is what it writes), never refused:
   * supervision must land and the spool must not wedge; past the budget, the bulky
   * observability fields are cut instead (domain/spawners.ts `cutPastBudget`).
   */
  async report(spawnerId: string, agentId: string, drafts: EventDraft[], mark: EventDraft[] = []): Promise<void> {
    const kept = this.deps.writeBudget.within(agentId) ? drafts : cutPastBudget(drafts);
    await this.registry.commit([...spawnerReport(this.deps.domain, spawnerId, agentId, kept), ...mark], {
      writer: agentId,
      chargeOnly: true,
    });
  }

  /** How many spawner streams are open (with a token that stands): those a revocation of every spawner token closes. */
  openStreams(): number {
    return this.connections.all().length;
  }

  /** For the admin API: what each spawner holds. */
  view() {
    return this.connections.view(this.registry.state);
  }
}
