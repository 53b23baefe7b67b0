import type { Logger } from 'pino';
import { INSTANCE_HEADER, SPAWNER_API, SPOOL_SEQ_HEADER } from '../protocol/spawner.js';
import type { Reachability } from './reachability.js';
import type { SendOutcome } from './spool.js';

/**
 * The spawner's POSTs to the server's spawner API, under its token and instance id: the
 * heartbeat straight out, and each report the spool sends (spool.ts) keyed by its sequence.
 */
export class ServerPosts {
  constructor(
    private readonly serverUrl: string,
    private readonly token: string,
    private readonly instance: string,
    private readonly log: Logger,
    /** Aborted when the spawner stops: a spooled post in flight ends with it. */
    private readonly stopping: AbortSignal,
    private readonly reachability: Reachability,
  ) {}

  /** A post not spooled (the heartbeat): it fails if the server does not take it. */
  async post(route: string, body: unknown): Promise<void> {
    const res = await fetch(`${this.serverUrl}${SPAWNER_API}${route}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${this.token}`,
        'content-type': 'application/json',
        [INSTANCE_HEADER]: this.instance,
      },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${route}: ${res.status} ${await res.text()}`);
  }

  /** One spooled post, keyed by its spool sequence (the server ignores one it already committed). */
  async sendSpooled(route: string, body: unknown, seq: number): Promise<SendOutcome> {
    let res: Response;
    try {
      res = await fetch(`${this.serverUrl}${SPAWNER_API}${route}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${this.token}`,
          'content-type': 'application/json',
          [INSTANCE_HEADER]: this.instance,
          [SPOOL_SEQ_HEADER]: String(seq),
        },
        body: JSON.stringify(body),
        signal: AbortSignal.any([this.stopping, AbortSignal.timeout(30_000)]),
      });
    } catch {
      if (!this.stopping.aborted) this.reachability.markUnreachable();
      return 'retry';
    }
    const text = await res.text().catch(() => '');
    if (res.ok) return 'ok';
    // The server is failing, stopping or refusing our token for now: keep it for later.
    if (res.status >= 500 || res.status === 401 || res.status === 408 || res.status === 429) {
      this.log.warn(
        { route, status: res.status, body: text.slice(0, 300) },
        'the server did not take a spooled report; retrying',
      );
      return 'retry';
    }
    this.log.error({ route, status: res.status, body: text.slice(0, 300) }, 'spooled report refused');
    return 'refused';
  }
}
