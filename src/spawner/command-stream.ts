import { createParser } from 'eventsource-parser';
import type { Logger } from 'pino';
import { INSTANCE_HEADER, SPAWNER_API, type SpawnerCommand } from '../protocol/spawner.js';
import { retryAfterMs, SILENT_BEATS, StreamRefused, StreamSilent } from './reconnect.js';

/**
 * The spawner's command stream from the server (docs/spawner-protocol.md): one connection
 * at a time, ended by the server, by the spawner stopping, or by silence. Its commands go
 * to the spawner one at a time, in the order the server sent them, across reconnects.
 * The spawner reconnects (spawner.ts, reconnect.ts).
 */

export interface CommandStreamOptions {
  serverUrl: string;
  token: string;
  /** This spawner's instance id (its spool dir keeps it). */
  instance: string;
  maxAgents: number;
  name: string;
  log: Logger;
  /** Aborted when the spawner stops: the open stream ends with it. */
  stopping: AbortSignal;
  /** Seconds between the server's heartbeats, as its last hello gave them. */
  heartbeatS: () => number;
  /** Handles one command; the next waits for it. */
  handle: (command: SpawnerCommand) => Promise<void>;
  /**
   * The server refused this spawner for good, `why` (its token: 401; or its `--max-agents`:
   * 400 `limit_exceeded`): retrying would not help, the spawner stops.
   */
  refusedForGood: (why: string) => void;
}

export class CommandStream {
  /** Re-arms the open stream's silence timer once the hello has set the heartbeat. */
  private heardHello: (() => void) | null = null;
  private commands: Promise<void> = Promise.resolve();

  constructor(private readonly opts: CommandStreamOptions) {}

  /** The hello gave the server's heartbeat: the open stream's silence is counted in it from now. */
  helloHeard(): void {
    this.heardHello?.();
  }

  /** One command stream, until it ends; `opened` once the server accepted it. */
  async open(opened: () => void): Promise<void> {
    const url = `${this.opts.serverUrl}${SPAWNER_API}/stream?max_agents=${this.opts.maxAgents}&name=${encodeURIComponent(this.opts.name)}`;
    // Silence for three heartbeats ends the stream: TCP alone may never tell (a paused
    // server keeps its socket; a balancer keeps a connection to a server it marked down).
    const silence = new AbortController();
    let silentFor = 0;
    let timer: NodeJS.Timeout | null = null;
    const arm = () => {
      if (timer) clearTimeout(timer);
      silentFor = SILENT_BEATS * this.opts.heartbeatS() * 1000;
      timer = setTimeout(() => silence.abort(new StreamSilent(silentFor)), silentFor);
    };
    arm();
    // The hello gives the server's heartbeat: the silence allowed is counted in it from then.
    this.heardHello = arm;
    try {
      await this.streamUntil(url, AbortSignal.any([this.opts.stopping, silence.signal]), opened, arm);
    } catch (err) {
      if (silence.signal.aborted && !this.opts.stopping.aborted) throw silence.signal.reason as StreamSilent;
      throw err;
    } finally {
      if (timer) clearTimeout(timer);
      if (this.heardHello === arm) this.heardHello = null;
    }
  }

  private async streamUntil(url: string, signal: AbortSignal, opened: () => void, heard: () => void): Promise<void> {
    const res = await fetch(url, {
      headers: {
        authorization: `Bearer ${this.opts.token}`,
        accept: 'text/event-stream',
        [INSTANCE_HEADER]: this.opts.instance,
      },
      signal,
    });
    if (!res.ok || !res.body) {
      const body = await res.text().catch(() => '');
      // A bad token, or more agents than the server allows it, will not get better by retrying.
      const why =
        res.status === 401
          ? `the server at ${this.opts.serverUrl} refused this spawner's token (401): stopping`
          : res.status === 400 && errorOf(body)?.error === 'limit_exceeded'
            ? `the server at ${this.opts.serverUrl} refused --max-agents ${this.opts.maxAgents} (400 limit_exceeded: ${errorOf(body)?.message ?? ''}): stopping`
            : null;
      if (why) {
        this.opts.log.error({ server: this.opts.serverUrl, body: body.slice(0, 300) }, why);
        this.opts.refusedForGood(why);
      }
      throw new StreamRefused(res.status, body, retryAfterMs(res.headers.get('retry-after')));
    }
    opened();
    const parser = createParser({
      onEvent: (e) => {
        if (e.event !== 'command') return;
        const command = JSON.parse(e.data) as SpawnerCommand;
        // Commands are handled one at a time, in the order the server sent them.
        this.commands = this.commands
          .then(() => this.opts.handle(command))
          .catch((err: unknown) => this.opts.log.error({ err }, 'command failed'));
      },
    });
    const decoder = new TextDecoder();
    for await (const chunk of res.body) {
      heard();
      parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
    }
  }
}

/** The `{error, message}` of a refusal's JSON body, if it is one. */
function errorOf(body: string): { error?: string; message?: string } | null {
  try {
    const parsed = JSON.parse(body) as unknown;
    return parsed && typeof parsed === 'object' ? (parsed as { error?: string; message?: string }) : null;
  } catch {
    return null;
  }
}
