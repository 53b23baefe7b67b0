import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createParser } from 'eventsource-parser';
import type { Logger } from 'pino';
import type { SpawnerCommand } from '../runtime/spawners.js';
import type { Adapter, AgentProcess, DrainedEvent, LaunchCommand } from './adapter.js';

/** Consecutive strikes before the spawner stops resuming an agent (SPEC §4). */
const STRIKES = 3;

export const CONTRACT_NUDGE =
  '[BEIDOU] Your session ended although nobody terminated you. You are a persistent agent: never exit on your own. ' +
  'If your work is done, call mcp__beidou__signal_review and end your turn to wait for your leader; otherwise carry on.';

export interface SpawnerOptions {
  serverUrl: string;
  token: string;
  adapter: Adapter;
  maxAgents: number;
  name: string;
  /** When set, agents run in `{workdir}/{task_id}/{agent_id}`; else in their workspace path. */
  workdir: string | null;
  logger: Logger;
}

type Deliver = Extract<SpawnerCommand, { type: 'deliver' }>;

/**
 * `beidou spawner`: holds one command stream to the server, launches agent processes
 * through an adapter, writes their inbox into them, drains their output into events, and
 * applies the runtime policies: contract violations and crashes are resumed up to three
 * strikes, then escalated; a terminated agent gets the grace time, then is killed.
 */
export class Spawner {
  private readonly agents = new Map<string, Supervisor>();
  /** Agents whose termination this spawner acknowledged: a late launch for one is ignored. */
  private readonly ended = new Set<string>();
  private heartbeatS = 5;
  private graceS = 60;
  private heartbeat: NodeJS.Timeout | null = null;
  private readonly stopping = new AbortController();
  private commands: Promise<void> = Promise.resolve();
  /** This process's instance id: with the token's subject, the spawner's identity. */
  readonly instance = `${os.hostname().replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 60)}-${process.pid}-${randomUUID().slice(0, 8)}`;
  /** Resolves each time the server's hello arrives (tests and the demo wait on it). */
  onHello: (() => void) | null = null;

  constructor(readonly opts: SpawnerOptions) {}

  get log(): Logger {
    return this.opts.logger;
  }

  get grace(): number {
    return this.graceS;
  }

  /** Connects and keeps reconnecting until stopped. */
  async run(): Promise<void> {
    let backoff = 250;
    while (!this.stopping.signal.aborted) {
      try {
        await this.stream();
        backoff = 250;
      } catch (err) {
        if (this.stopping.signal.aborted) break;
        this.log.warn({ err: (err as Error).message }, 'command stream failed; reconnecting');
      }
      if (this.stopping.signal.aborted) break;
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 5_000);
    }
  }

  private async stream(): Promise<void> {
    const url = `${this.opts.serverUrl}/api/spawner/stream?max_agents=${this.opts.maxAgents}&name=${encodeURIComponent(this.opts.name)}`;
    const res = await fetch(url, {
      headers: { authorization: `Bearer ${this.opts.token}`, accept: 'text/event-stream', 'beidou-spawner-instance': this.instance },
      signal: this.stopping.signal,
    });
    if (!res.ok || !res.body) {
      const body = await res.text().catch(() => '');
      const err = new Error(`stream refused: ${res.status} ${body}`);
      if (res.status === 401) this.stop(); // a bad token will not get better by retrying
      throw err;
    }
    const parser = createParser({
      onEvent: (e) => {
        if (e.event !== 'command') return;
        const command = JSON.parse(e.data) as SpawnerCommand;
        // Commands are handled one at a time, in the order the server sent them.
        this.commands = this.commands.then(() => this.handle(command)).catch((err: unknown) => this.log.error({ err }, 'command failed'));
      },
    });
    const decoder = new TextDecoder();
    for await (const chunk of res.body) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
  }

  private async handle(command: SpawnerCommand): Promise<void> {
    switch (command.type) {
      case 'hello': {
        this.heartbeatS = command.heartbeat_s;
        this.graceS = command.terminate_grace_s;
        // Agents the server gave to another spawner while we were away are not ours any more.
        for (const [id, sup] of this.agents) {
          if (!command.agents.includes(id)) {
            this.log.warn({ agent: id }, 'agent reassigned elsewhere; ending it here');
            sup.abandon();
            this.agents.delete(id);
          }
        }
        this.startHeartbeat();
        this.onHello?.();
        return;
      }
      case 'launch': {
        if (this.agents.has(command.agent_id) || this.ended.has(command.agent_id)) return; // a resend, or too late
        const sup = new Supervisor(this, command);
        this.agents.set(command.agent_id, sup);
        await sup.start(command.resume, command.session_id, null);
        return;
      }
      case 'deliver': {
        const sup = this.agents.get(command.agent_id);
        if (sup) await sup.deliver(command);
        return;
      }
      case 'terminate': {
        const sup = this.agents.get(command.agent_id);
        if (!sup) {
          this.ended.add(command.agent_id);
          return void (await this.post('/ack', { type: 'terminate', agent_id: command.agent_id }));
        }
        sup.terminate();
        return;
      }
    }
  }

  private startHeartbeat(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    const beat = () => void this.post('/heartbeat', {}).catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'heartbeat failed'));
    beat();
    this.heartbeat = setInterval(beat, this.heartbeatS * 1000);
  }

  async post(route: string, body: unknown): Promise<void> {
    const res = await fetch(`${this.opts.serverUrl}/api/spawner${route}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${this.opts.token}`, 'content-type': 'application/json', 'beidou-spawner-instance': this.instance },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${route}: ${res.status} ${await res.text()}`);
  }

  forget(agentId: string, terminated = false): void {
    this.agents.delete(agentId);
    if (terminated) this.ended.add(agentId);
  }

  cwdFor(launch: LaunchCommand): string {
    const wanted = this.opts.workdir ? path.join(this.opts.workdir, launch.task_id, launch.agent_id) : launch.workspace_path;
    try {
      mkdirSync(wanted, { recursive: true });
      return wanted;
    } catch {
      const fallback = path.join(os.tmpdir(), 'beidou-agents', launch.task_id, launch.agent_id);
      mkdirSync(fallback, { recursive: true });
      return fallback;
    }
  }

  /** Stops the stream and the heartbeat and kills the agents; their server resumes them elsewhere. */
  stop(): void {
    this.stopping.abort();
    if (this.heartbeat) clearInterval(this.heartbeat);
    for (const sup of this.agents.values()) sup.abandon();
    this.agents.clear();
  }
}

/** One agent's process and its policies. */
class Supervisor {
  private proc: AgentProcess | null = null;
  private sessionId = '';
  private crashStrikes = 0;
  private contractStrikes = 0;
  private terminating = false;
  /** onExit is deciding what comes next (a restart, an escalation): a terminate waits for it. */
  private exiting = false;
  /** The termination was acknowledged (at most once). */
  private finished = false;
  private forced = false;
  private abandoned = false;
  private graceTimer: NodeJS.Timeout | null = null;
  private readonly delivered = new Set<string>();
  /** Deliveries that arrived while the process was being restarted. */
  private waiting: Deliver[] = [];
  /** Posts for this agent, in order. */
  private posts: Promise<void> = Promise.resolve();

  constructor(
    private readonly spawner: Spawner,
    private launch: LaunchCommand,
  ) {}

  private get id(): string {
    return this.launch.agent_id;
  }

  private report(events: DrainedEvent[]): Promise<void> {
    this.posts = this.posts
      .then(() => this.spawner.post(`/agents/${this.id}/events`, { events }))
      .catch((err: unknown) => this.spawner.log.error({ err: (err as Error).message, agent: this.id }, 'could not post events'));
    return this.posts;
  }

  async start(resume: boolean, sessionId: string | null, nudge: string | null): Promise<void> {
    this.sessionId = resume && sessionId ? sessionId : randomUUID();
    const serverUrl = this.spawner.opts.serverUrl;
    const proc = this.spawner.opts.adapter.start(
      {
        launch: this.launch,
        serverUrl,
        mcpUrl: `${serverUrl}/mcp`,
        cwd: this.spawner.cwdFor(this.launch),
        resume: resume && sessionId !== null,
        sessionId: this.sessionId,
        nudge,
      },
      {
        onEvent: (event) => void this.report([event]),
        onSession: (id) => (this.sessionId = id),
        onCleanTurn: () => {
          this.crashStrikes = 0;
          this.contractStrikes = 0;
        },
      },
    );
    this.proc = proc;
    this.spawner.log.info({ agent: this.id, pid: proc.pid, resume }, 'agent started');
    await this.posts;
    await this.spawner
      .post(`/agents/${this.id}/started`, { session_id: this.sessionId, resumed: resume })
      .catch((err: unknown) => this.spawner.log.error({ err: (err as Error).message, agent: this.id }, 'could not report the start'));
    for (const d of this.waiting.splice(0)) await this.deliver(d);
    void proc.exited
      .then((exit) => this.onExit(proc, exit))
      .catch((err: unknown) => {
        // Could not restart it (e.g. its files could not be written): give it up, loudly.
        this.spawner.log.error({ err: (err as Error).message, agent: this.id }, 'could not restart the agent');
        void this.report([{ event: 'agent_completed', terminated: false, stop_reason: 'crash_escalated' } as DrainedEvent]).then(() => this.giveUp());
      });
  }

  async deliver(d: Deliver): Promise<void> {
    if (this.delivered.has(d.message_id)) {
      await this.ack(d.message_id); // a resend: it reached the agent already
      return;
    }
    if (!this.proc || this.terminating) {
      this.waiting.push(d);
      return;
    }
    this.proc.deliver({ message_id: d.message_id, from: d.from, from_name: d.from_name, kind: d.kind, content: d.content });
    this.delivered.add(d.message_id);
    await this.ack(d.message_id);
  }

  private async ack(messageId: string): Promise<void> {
    await this.spawner
      .post('/ack', { type: 'deliver', agent_id: this.id, message_id: messageId })
      .catch((err: unknown) => this.spawner.log.warn({ err: (err as Error).message, agent: this.id }, 'delivery ack failed'));
  }

  /** Ends the process gracefully; after the grace time it is killed (`terminate.forced`). */
  terminate(): void {
    if (this.terminating) return;
    this.terminating = true;
    // Between processes, onExit sees the flag before it restarts anything; once a restart
    // has spawned the next process, that process is ended like any other.
    if (this.exiting && !this.proc) return;
    if (!this.proc) return void this.finishTermination();
    this.proc.end();
    const proc = this.proc;
    this.graceTimer = setTimeout(() => {
      this.forced = true;
      proc.kill();
    }, this.spawner.grace * 1000);
  }

  private async finishTermination(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    if (this.graceTimer) clearTimeout(this.graceTimer);
    if (this.forced) await this.report([{ event: 'terminate.forced' } as DrainedEvent]);
    await this.posts;
    await this.spawner.post('/ack', { type: 'terminate', agent_id: this.id }).catch((err: unknown) =>
      this.spawner.log.error({ err: (err as Error).message, agent: this.id }, 'terminate ack failed'),
    );
    this.spawner.forget(this.id, true);
  }

  /** The server gave the agent to another spawner (or we are stopping): end it, report nothing. */
  abandon(): void {
    this.abandoned = true;
    this.proc?.kill();
  }

  private async onExit(proc: AgentProcess, exit: { code: number | null; signal: NodeJS.Signals | null }): Promise<void> {
    if (proc !== this.proc || this.abandoned) return;
    this.proc = null;
    if (this.terminating) return this.finishTermination();
    this.exiting = true;
    try {
      await this.afterExit(proc, exit);
    } finally {
      this.exiting = false;
    }
  }

  /** A terminate that arrived while the exit was being reported wins over a restart. */
  private async restartUnlessTerminated(resume: boolean, sessionId: string | null, nudge: string | null): Promise<void> {
    if (this.abandoned) return;
    if (this.terminating) return this.finishTermination();
    return this.start(resume, sessionId, nudge);
  }

  private async giveUp(): Promise<void> {
    if (this.terminating) return this.finishTermination();
    this.spawner.forget(this.id);
  }

  private async afterExit(proc: AgentProcess, exit: { code: number | null; signal: NodeJS.Signals | null }): Promise<void> {
    const log = this.spawner.log;
    if (exit.code === 0) {
      this.contractStrikes++;
      const strike = this.contractStrikes;
      if (strike < STRIKES) {
        log.warn({ agent: this.id, strike }, 'agent exited on its own; resuming it with a nudge');
        await this.report([
          { event: 'agent_completed', terminated: false, stop_reason: 'end_turn' } as DrainedEvent,
          { event: 'contract_violation', strike_count: strike, action: 'resumed' } as DrainedEvent,
        ]);
        return this.restartUnlessTerminated(true, this.sessionId, CONTRACT_NUDGE);
      }
      log.error({ agent: this.id }, 'agent exited on its own three times; escalating');
      await this.report([
        { event: 'contract_violation', strike_count: strike, action: this.launch.is_root ? 'escalated_to_user' : 'escalated_to_leader' } as DrainedEvent,
        { event: 'agent_completed', terminated: false, stop_reason: 'contract_violation_escalated' } as DrainedEvent,
      ]);
      return this.giveUp();
    }
    this.crashStrikes++;
    const strike = this.crashStrikes;
    const stderr = proc.stderrTail();
    const msg = exit.signal ? `killed by ${exit.signal}` : `exited with code ${exit.code}`;
    log.warn({ agent: this.id, strike, msg }, 'agent crashed');
    await this.report([
      { event: 'agent_error', exception: 'ProcessExit', msg, stderr } as DrainedEvent,
      { event: 'agent_crashed', exception: 'ProcessExit', msg, strike_count: strike, stderr } as DrainedEvent,
    ]);
    if (strike < STRIKES) {
      await this.report([{ event: 'agent_completed', terminated: false, stop_reason: 'crashed' } as DrainedEvent]);
      // Strike 1 resumes the session; strike 2 starts it afresh.
      return this.restartUnlessTerminated(strike === 1, strike === 1 ? this.sessionId : null, null);
    }
    await this.report([
      ...(this.launch.is_root ? [{ event: 'root_crash_escalation', crash_strikes: strike, stderr } as DrainedEvent] : []),
      { event: 'agent_completed', terminated: false, stop_reason: 'crash_escalated' } as DrainedEvent,
    ]);
    return this.giveUp();
  }
}
