import { mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import type {
  AckBody,
  DrainedEvent,
  HeartbeatBody,
  LaunchCommand,
  SpawnerCommand,
  StartedBody,
} from '../protocol/spawner.js';
import type { Adapter } from './adapter.js';
import { CommandStream } from './command-stream.js';
import { Reachability } from './reachability.js';
import { reaped, Reaper } from './reaper.js';
import { Backoff, describeStreamFailure, seconds, StreamRefused } from './reconnect.js';
import { ServerPosts } from './server-posts.js';
import type { Spool } from './spool.js';
import { Supervisor, type SupervisorHost } from './supervisor.js';

/** Drained events that only observe (the spool may drop them when full); the rest always stays. */
const OBSERVING = new Set(['turn.usage', 'assistant_text', 'tool_called', 'tool_result', 'run.cost']);

export interface SpawnerOptions {
  serverUrl: string;
  token: string;
  adapter: Adapter;
  maxAgents: number;
  name: string;
  /** When set, agents run in `{workdir}/{task_id}/{agent_id}`; else in their workspace path. */
  workdir: string | null;
  logger: Logger;
  /** Where reports wait for the server (spool.ts); also holds this spawner's instance id. */
  spool: Spool;
  /** Seconds before the restart after the 1st, 2nd, … crash in a row (the last repeats); jitter adds up to a quarter. */
  restartBackoffS: number[];
}

/**
 * `beidou spawner`, the protocol client: holds one command stream to the server
 * (docs/spawner-protocol.md), heartbeats, and hands each agent's commands to its
 * Supervisor (supervisor.ts), which launches the process through an adapter, writes its
 * inbox into it, drains its output into events and applies the restart policies.
 */
export class Spawner implements SupervisorHost {
  private readonly agents = new Map<string, Supervisor>();
  /** Agents whose termination this spawner acknowledged: a late launch for one is ignored. */
  private readonly ended = new Set<string>();
  private heartbeatS = 5;
  private graceS = 60;
  private heartbeat: NodeJS.Timeout | null = null;
  private readonly stopping = new AbortController();
  /** This spawner's instance id (kept in its spool dir): with the token's subject, the spawner's identity. */
  readonly instance: string;
  /** Whether the server answers (the command stream is up), and the times it stopped. */
  private readonly reachability: Reachability;
  /** The stream of the server's commands (command-stream.ts); this spawner reconnects it. */
  private readonly commandStream: CommandStream;
  /** The heartbeat, and the reports the spool sends (server-posts.ts). */
  private readonly serverPosts: ServerPosts;
  /** Resolves each time the server's hello arrives (tests and the demo wait on it). */
  onHello: (() => void) | null = null;
  /** Why the server refused this spawner for good, once it did (then it has stopped). */
  refusal: string | null = null;

  /** Ends this spawner's agents if it dies without stopping them (reaper.ts). */
  private readonly reaper = new Reaper();
  private readonly reapedAdapter: Adapter;

  constructor(readonly opts: SpawnerOptions) {
    this.instance = opts.spool.instance;
    this.reapedAdapter = reaped(opts.adapter, this.reaper);
    this.reachability = new Reachability(opts.serverUrl, opts.logger, () => opts.spool.nudge());
    this.commandStream = new CommandStream({
      serverUrl: opts.serverUrl,
      token: opts.token,
      instance: this.instance,
      maxAgents: opts.maxAgents,
      name: opts.name,
      log: opts.logger,
      stopping: this.stopping.signal,
      heartbeatS: () => this.heartbeatS,
      handle: (command) => this.handle(command),
      refusedForGood: (why) => {
        this.refusal = why;
        this.stop();
      },
    });
    this.serverPosts = new ServerPosts(
      opts.serverUrl,
      opts.token,
      this.instance,
      opts.logger,
      this.stopping.signal,
      this.reachability,
    );
  }

  get log(): Logger {
    return this.opts.logger;
  }

  get serverUrl(): string {
    return this.opts.serverUrl;
  }

  get adapter(): Adapter {
    return this.reapedAdapter;
  }

  get grace(): number {
    return this.graceS;
  }

  /** Connects and keeps reconnecting until stopped. */
  async run(): Promise<void> {
    this.reaper.start((err) =>
      this.log.warn({ err: err.message }, 'no reaper: agents rely on their stdin closing if this spawner dies'),
    );
    const sending = this.opts.spool.deliver(
      (route, body, seq) => this.serverPosts.sendSpooled(route, body, seq),
      this.stopping.signal,
      (route, seq) => this.log.error({ route, seq }, 'the server refused a spooled report; dropped it'),
    );
    // A server restarting, failing over to another replica or gone for a while: keep
    // trying (reconnect.ts), one line each time saying why and for how long.
    const backoff = new Backoff();
    while (!this.stopping.signal.aborted) {
      let why: string;
      let retryAfter: number | null = null;
      try {
        await this.commandStream.open(() => backoff.reset());
        why = `the command stream from ${this.opts.serverUrl} ended`;
      } catch (err) {
        if (this.stopping.signal.aborted) break;
        why = describeStreamFailure(this.opts.serverUrl, err);
        if (err instanceof StreamRefused) retryAfter = err.retryAfterMs;
      }
      this.reachability.markUnreachable();
      if (this.stopping.signal.aborted) break;
      const wait = backoff.next(retryAfter);
      this.log.warn({ server: this.opts.serverUrl, retry_in_ms: wait }, `${why}; retrying in ${seconds(wait)} s`);
      await new Promise((r) => setTimeout(r, wait));
    }
    await sending;
  }

  private async handle(command: SpawnerCommand): Promise<void> {
    switch (command.type) {
      case 'hello': {
        this.heartbeatS = command.heartbeat_s;
        this.commandStream.helloHeard();
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
        this.reachability.markReachable();
        this.onHello?.();
        return;
      }
      case 'stop': {
        // Not ours any more (terminated, or running elsewhere): end it and report nothing.
        const sup = this.agents.get(command.agent_id);
        if (!sup) return;
        this.log.warn(
          { agent: command.agent_id, reason: command.reason },
          'the server says this agent is not ours; ending it here',
        );
        sup.abandon();
        this.agents.delete(command.agent_id);
        if (command.reason === 'terminated') this.ended.add(command.agent_id);
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
    // Each beat reports what this spawner really runs; the first follows the hello at once.
    // While the stream is down its retry lines say why; a failed beat then is no news.
    const beat = () =>
      void this.post('/heartbeat', { agents: [...this.agents.values()].map((sup) => sup.running()) }).catch(
        (err: unknown) =>
          (this.reachability.up ? this.log.warn : this.log.debug).call(
            this.log,
            { err: (err as Error).message },
            'heartbeat failed',
          ),
      );
    beat();
    this.heartbeat = setInterval(beat, this.heartbeatS * 1000);
  }

  /**
   * Reports (events, acks, starts) go through the spool: durable on disk first, sent in
   * order when the server answers. The heartbeat goes straight out.
   */
  async post(
    route: string,
    body: AckBody | StartedBody | HeartbeatBody | { events: DrainedEvent[] } | Record<string, never>,
  ): Promise<void> {
    if (route !== '/heartbeat') {
      const observing = 'events' in body && body.events.every((e) => OBSERVING.has(e.event));
      return this.opts.spool.append(route, body, observing);
    }
    return this.serverPosts.post(route, body);
  }

  /** What the supervisors ask of the server's reachability (reachability.ts). */
  get outages(): number {
    return this.reachability.outages;
  }

  whenReachable(): Promise<void> {
    return this.reachability.whenReachable();
  }

  exitDuringOutage(outagesAtStart: number): Promise<boolean> {
    return this.reachability.exitDuringOutage(outagesAtStart);
  }

  /** Milliseconds before the restart after the `strike`-th crash in a row: the backoff step plus up to a quarter of jitter. */
  restartDelayMs(strike: number): number {
    const steps = this.opts.restartBackoffS;
    const base = steps[Math.min(strike, steps.length) - 1] ?? 0;
    return Math.round(base * 1000 * (1 + Math.random() / 4));
  }

  forget(agentId: string, terminated = false): void {
    this.agents.delete(agentId);
    if (terminated) this.ended.add(agentId);
  }

  cwdFor(launch: LaunchCommand): string {
    const wanted = this.opts.workdir
      ? path.join(this.opts.workdir, launch.task_id, launch.agent_id)
      : launch.workspace_path;
    // Folders made here are the spawner user's alone (an existing one, the user's own, is left as it is).
    try {
      mkdirSync(wanted, { recursive: true, mode: 0o700 });
      return wanted;
    } catch {
      const fallback = path.join(os.tmpdir(), 'beidou-agents', launch.task_id, launch.agent_id);
      mkdirSync(fallback, { recursive: true, mode: 0o700 });
      return fallback;
    }
  }

  /** Stops the stream and the heartbeat and kills the agents; their server resumes them elsewhere. */
  stop(): void {
    this.stopping.abort();
    if (this.heartbeat) clearInterval(this.heartbeat);
    for (const sup of this.agents.values()) sup.abandon();
    this.agents.clear();
    this.reaper.stop();
    this.reachability.release();
  }
}
