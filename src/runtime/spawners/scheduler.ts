import { spawnerTakes, spawnerTokenOf } from '../../domain/revocation.js';
import { launchAssigned, resumable, schedulable } from '../../domain/spawners.js';
import type { TokenService } from '../../identity/tokens.js';
import type { LaunchCommand } from '../../protocol/spawner.js';
import type { Registry } from '../../registry/registry.js';
import { USER, type AgentRecord } from '../../registry/state.js';
import type { SkillCatalog } from '../../skills/loader.js';
import type { Connection, SpawnerConnections } from './connections.js';

/**
 * Gives queued launches to connected spawners with room, least loaded first, each only to a
 * spawner whose token takes its task (a limited token: its tasks only). Room is the stream's
 * `max_agents` and its token's bound: the agents every instance of one token holds, connected
 * or not, stay within BEIDOU_MAX_AGENTS_PER_SPAWNER. The assignment (`launch.assigned`) is
 * committed before the launch command goes out. One pass runs at a time; a request during a
 * pass makes it run once more.
 */
export class Scheduler {
  private scheduling = false;
  private rescheduling = false;

  constructor(
    private readonly registry: Registry,
    private readonly connections: SpawnerConnections,
    private readonly tokens: TokenService,
    private readonly skills: SkillCatalog,
    /** BEIDOU_MAX_AGENTS_PER_SPAWNER: what all the instances of one spawner token hold at most. */
    private readonly perToken: number,
  ) {}

  async schedule(): Promise<void> {
    if (this.scheduling) {
      this.rescheduling = true;
      return;
    }
    this.scheduling = true;
    try {
      do {
        this.rescheduling = false;
        await this.pass();
      } while (this.rescheduling);
    } finally {
      this.scheduling = false;
    }
  }

  private async pass(): Promise<void> {
    const { state } = this.registry;
    const load = new Map<string, number>();
    const tokenLoad = new Map<string, number>();
    const count = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + 1);
    for (const a of state.agents.values()) {
      if (!a.spawner_id) continue;
      count(load, a.spawner_id);
      count(tokenLoad, spawnerTokenOf(a.spawner_id));
    }
    const share = (c: Connection) => (load.get(c.spawnerId) ?? 0) / c.maxAgents;
    const room = (c: Connection) =>
      (load.get(c.spawnerId) ?? 0) < c.maxAgents && (tokenLoad.get(c.tokenId) ?? 0) < this.perToken;
    for (const agent of state.agents.values()) {
      if (!schedulable(state, agent)) continue;
      // Connections can come and go while a launch is sent: look again each time.
      const open = this.connections.all().filter(room);
      if (open.length === 0) break;
      const target = open.filter((c) => spawnerTakes(c.taskIds, agent.task_id)).sort((x, y) => share(x) - share(y))[0];
      // No spawner with room takes this task: it waits, and the next agent may be another's.
      if (!target) continue;
      count(load, target.spawnerId);
      count(tokenLoad, target.tokenId);
      const resume = resumable(agent);
      await this.registry.commit([launchAssigned(agent, target.spawnerId)]);
      await this.launch(target, agent, resume);
    }
  }

  /** Sends the launch (with a fresh token); nothing if a terminate was posted meanwhile. */
  async launch(conn: Connection, agent: AgentRecord, resume: boolean): Promise<void> {
    if (!agent.launch) return;
    // Of the agent's current generation: a relaunch after a revocation gets a token that works.
    const gen = agent.tokens_gen;
    const token = await this.tokens.mintAgent(agent.agent_id, agent.task_id, { gen });
    // A terminate may have been posted (and sent) while we awaited: then no launch at all. Nor
    // when the agent's tokens were revoked meanwhile (the token just minted is refused; the
    // launch that follows the revocation carries a fresh one), nor when it left this spawner,
    // nor when this stream's own token was revoked (it is no longer handed out).
    const launch = agent.launch;
    if (!launch || agent.terminate_posted || agent.tokens_gen !== gen) return;
    if (agent.spawner_id !== conn.spawnerId || this.connections.get(conn.spawnerId) !== conn) return;
    let allowedTools: string[] = [];
    try {
      allowedTools = this.skills.load(agent.skill).allowedTools;
    } catch {
      // The skill loaded when the agent was registered; a later edit breaking it must not stop a launch.
    }
    const command: LaunchCommand = {
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
      crash_strikes: agent.crash_strikes,
      contract_strikes: agent.contract_strikes,
    };
    conn.send(command);
  }
}
