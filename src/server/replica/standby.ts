import express, { type Request, type Response } from 'express';
import { VERSION } from '../../util/version.js';
import { closeIfBodyUnread } from '../http/body.js';

/** What a replica knows about the lease while it is a standby, for its health answer. */
export interface StandbyStatus {
  /** The active replica's name in the lease row, if known. */
  holder: string | null;
  /** Seconds a client should wait before trying again (the lease's length). */
  retryAfterS: number;
  since: number;
  /** The log this standby follows to stay warm (null: not following; a takeover replays). */
  following: Following | null;
}

/** A standby's following of the log, as its health answer and `BeidouServer.following()` give it. */
export interface Following {
  /** The last position (`events.pos`) applied. */
  position: number;
  /** Events applied since the follower's replay. */
  events: number;
  /** Events the follower's replay read when it began. */
  replayed: number;
  /** Tasks it holds in memory, and ended tasks it left out of memory (archived by the active). */
  tasks: number;
  archived: number;
  /** Why it stopped following (a takeover then replays), or null. */
  diverged: string | null;
}

/**
 * The HTTP face of a standby replica (several replicas on one database, one active). It
 * listens like the active one so a load balancer can check it: `GET /api/health` is 503
 * `{"role":"standby"}` (the balancer routes around it), `/mcp`, `/sse`, `/messages` and
 * `/api/*` are 503 `standby` with `Retry-After`, so a client that reached it retries and
 * lands on the active. `GET /api/health/live` (200 on every replica) is served before
 * this, for the Docker `HEALTHCHECK`.
 */
export function standbyApp(status: () => StandbyStatus): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.get('/api/health', (_req, res) => {
    const s = status();
    res
      .status(503)
      .set('Retry-After', String(Math.ceil(s.retryAfterS)))
      .json({
        ok: false,
        version: VERSION,
        role: 'standby',
        active: s.holder,
        standby_since: s.since,
        following: s.following,
      });
  });
  const refuse = (req: Request, res: Response) => {
    const s = status();
    closeIfBodyUnread(req, res);
    res
      .status(503)
      .set('Retry-After', String(Math.ceil(s.retryAfterS)))
      .json({
        error: 'standby',
        message: `this replica is a standby${s.holder ? ` (the active one is ${s.holder})` : ''}: send requests to the active replica (through the load balancer), or retry`,
        details: { role: 'standby', active: s.holder },
      });
  };
  app.use(['/mcp', '/sse', '/messages', '/api'], refuse);
  app.use((req: Request, res: Response) => {
    closeIfBodyUnread(req, res);
    res
      .status(404)
      .json({ error: 'not_found', message: `no route for ${req.method} ${req.path} on a standby replica` });
  });
  return app;
}
