import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createParser } from 'eventsource-parser';
import type { Logger } from 'pino';
import { INSTANCE_HEADER, SPAWNER_API, type AckBody, type DrainedEvent, type HeartbeatBody, type LaunchCommand, type SpawnerCommand, type StartedBody } from '../protocol/spawner.js';
import type { Adapter } from './adapter.js';
import { reaped, Reaper } from './reaper.js';
import { Supervisor, type SupervisorHost } from './supervisor.js';

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
  private commands: Promise<void> = Promise.resolve();
  /** This process's instance id: with the token's subject, the spawner's identity. */
  readonly instance = `${os.hostname().replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 60)}-${process.pid}-${randomUUID().slice(0, 8)}`;
  /** Resolves each time the server's hello arrives (tests and the demo wait on it). */
  onHello: (() => void) | null = null;

  /** Ends this spawner's agents if it dies without stopping them (reaper.ts). */
  private readonly reaper = new Reaper();
  private readonly reapedAdapter: Adapter;

  constructor(readonly opts: SpawnerOptions) {
    this.reapedAdapter = reaped(opts.adapter, this.reaper);
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
    this.reaper.start((err) => this.log.warn({ err: err.message }, 'no reaper: agents rely on their stdin closing if this spawner dies'));
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
    const url = `${this.opts.serverUrl}${SPAWNER_API}/stream?max_agents=${this.opts.maxAgents}&name=${encodeURIComponent(this.opts.name)}`;
    const res = await fetch(url, {
      headers: { authorization: `Bearer ${this.opts.token}`, accept: 'text/event-stream', [INSTANCE_HEADER]: this.instance },
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
      case 'stop': {
        // Not ours any more (terminated, or running elsewhere): end it and report nothing.
        const sup = this.agents.get(command.agent_id);
        if (!sup) return;
        this.log.warn({ agent: command.agent_id, reason: command.reason }, 'the server says this agent is not ours; ending it here');
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
    const beat = () => void this.post('/heartbeat', { agents: [...this.agents.values()].map((sup) => sup.running()) }).catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'heartbeat failed'));
    beat();
    this.heartbeat = setInterval(beat, this.heartbeatS * 1000);
  }

  async post(route: string, body: AckBody | StartedBody | HeartbeatBody | { events: DrainedEvent[] }): Promise<void> {
    const res = await fetch(`${this.opts.serverUrl}${SPAWNER_API}${route}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${this.opts.token}`, 'content-type': 'application/json', [INSTANCE_HEADER]: this.instance },
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
    this.reaper.stop();
  }
}
