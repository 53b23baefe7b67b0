import { agentStatus } from '../../registry/queries.js';
import type { RegistryState } from '../../registry/state.js';
import { agentsOf } from '../../domain/spawners.js';
import type { RunningAgent, SpawnerCommand } from '../../protocol/spawner.js';
import type { Clock } from '../../util/clock.js';

export interface Connection {
  spawnerId: string;
  name: string;
  maxAgents: number;
  /** The tasks its token limits it to (null: any): the scheduler gives it no other launch. */
  taskIds: string[] | null;
  /** Its token's `sub`: the instances of one token share BEIDOU_MAX_AGENTS_PER_SPAWNER. */
  tokenId: string;
  /** Its token's revocation generation: once that is not the current one, the stream is as good as closed. */
  gen: number;
  send: (command: SpawnerCommand) => void;
  close: () => void;
}

/** Heartbeats missed before a spawner is lost and its agents go to another. */
const MISSED_BEATS = 3;

/**
 * The spawners' command streams and heartbeats (runtime only). A spawner that holds agents
 * but has no stream right now (reconnecting) keeps its heartbeat record: it is lost only
 * after three missed beats, not when its stream drops. A stream whose token no longer
 * `stands` (revoked) is never handed out, from the moment the revocation is applied, before
 * the revocation's durable observer closes it: nothing is sent on it.
 */
export class SpawnerConnections {
  private readonly open = new Map<string, Connection>();
  /** Last heartbeat of each spawner that holds or held agents, in clock seconds. */
  private readonly lastBeat = new Map<string, number>();
  /** What each spawner last reported running (agent → pid), for the admin view. */
  private readonly reported = new Map<string, Map<string, number | null>>();

  constructor(
    private readonly clock: Clock,
    private readonly heartbeatS: number,
    private readonly stands: (conn: Connection) => boolean,
  ) {}

  /** Spawners that held agents before a restart get three beats to come back. */
  expect(spawnerIds: Iterable<string>): void {
    const now = this.clock.now();
    for (const id of spawnerIds) if (!this.lastBeat.has(id)) this.lastBeat.set(id, now);
  }

  /** A new stream replaces the spawner's previous one (which is closed). */
  add(conn: Connection): void {
    this.open.get(conn.spawnerId)?.close();
    this.open.set(conn.spawnerId, conn);
    this.beat(conn.spawnerId);
  }

  /** The stream closed; its spawner keeps its agents until it misses its beats. */
  remove(spawnerId: string, send: Connection['send']): boolean {
    if (this.open.get(spawnerId)?.send !== send) return false;
    this.open.delete(spawnerId);
    return true;
  }

  beat(spawnerId: string): void {
    this.lastBeat.set(spawnerId, this.clock.now());
  }

  report(spawnerId: string, agents: readonly RunningAgent[]): void {
    this.reported.set(spawnerId, new Map(agents.map((a) => [a.agent_id, a.pid])));
  }

  get(spawnerId: string | null): Connection | undefined {
    const conn = spawnerId ? this.open.get(spawnerId) : undefined;
    return conn && this.stands(conn) ? conn : undefined;
  }

  all(): Connection[] {
    return [...this.open.values()].filter(this.stands);
  }

  /** Closes the streams whose token no longer stands; how many. */
  closeFallen(): number {
    const fallen = [...this.open.values()].filter((c) => !this.stands(c));
    for (const c of fallen) {
      this.open.delete(c.spawnerId);
      c.close();
    }
    return fallen.length;
  }

  /** Every spawner with a heartbeat record: the candidates for a heartbeat check. */
  tracked(): string[] {
    return [...this.lastBeat.keys()];
  }

  /**
   * Whether the spawner has missed its beats as of `now`: if so it is forgotten here and its
   * stream closed, and the caller releases its agents. Asked one spawner at a time, so a
   * beat that lands while an earlier loss is being committed still counts.
   */
  dropIfSilent(spawnerId: string, now: number): boolean {
    const beat = this.lastBeat.get(spawnerId);
    if (beat === undefined || now - beat <= MISSED_BEATS * this.heartbeatS) return false;
    this.lastBeat.delete(spawnerId);
    this.reported.delete(spawnerId);
    this.open.get(spawnerId)?.close();
    this.open.delete(spawnerId);
    return true;
  }

  closeAll(): void {
    for (const c of this.open.values()) c.close();
    this.open.clear();
  }

  /** For the admin API: what each spawner holds. */
  view(state: RegistryState) {
    return [...this.lastBeat.keys()].map((spawnerId) => {
      const conn = this.open.get(spawnerId);
      return {
        spawner_id: spawnerId,
        name: conn?.name ?? null,
        connected: conn !== undefined,
        max_agents: conn?.maxAgents ?? null,
        task_ids: conn?.taskIds ?? null,
        last_heartbeat_at: this.lastBeat.get(spawnerId) ?? 0,
        // pid: the process the spawner last reported for it (null: none reported, or between two).
        agents: agentsOf(state, spawnerId).map((a) => ({
          agent_id: a.agent_id,
          status: agentStatus(a),
          pid: this.reported.get(spawnerId)?.get(a.agent_id) ?? null,
        })),
      };
    });
  }
}
