import type { Request, Response } from 'express';
import { createSession, type SessionOptions } from 'better-sse';
import { settingName } from '../../config.js';
import { limitExceeded } from '../../domain/errors.js';
import { fromDomainError } from '../http/errors.js';

/** A comment line this often keeps proxies and NATs from dropping a quiet stream. */
const KEEP_ALIVE_MS = 15_000;

/** One open admin stream: what a route pushes, and what it undoes when the stream ends. */
export interface AdminStream {
  /** Sends one SSE event; false once the stream has ended (the client went, the server stops). */
  push(data: unknown, event: string, id?: string): boolean;
  /** Runs `fn` when the stream ends (at once if it has). */
  onEnd(fn: () => void): void;
  /**
   * Settles once what was pushed has left for the client (at once when nothing waits),
   * with false if the stream ended first: a long backlog is sent a page at a time,
   * never all of it into memory for a client that reads slowly.
   */
  drained(): Promise<boolean>;
}

/**
 * The admin token's SSE streams (`/api/tasks/:id/events/stream`, `/api/tasks/stream`), counted
 * against one cap (BEIDOU_MAX_ADMIN_STREAMS): each holds a connection and a listener, and the
 * admin token is one principal, so past the cap a new one is refused `limit_exceeded` (429).
 * Every way a stream ends (the client closes, better-sse sees it gone, the server stops)
 * releases its place and its listeners exactly once.
 */
export class AdminStreams {
  private count = 0;

  constructor(
    private readonly max: number,
    private readonly stopping: AbortSignal,
  ) {}

  get size(): number {
    return this.count;
  }

  /** Starts the stream on `res`, or returns null when there is none to feed (client gone, HEAD, stopping). */
  async open(
    req: Request,
    res: Response,
    options: Pick<SessionOptions, 'serializer'> = {},
  ): Promise<AdminStream | null> {
    // The client may have gone while its token was checked: a stream opened now would hold a place for ever.
    if (res.closed || req.socket.destroyed) return null;
    if (this.count >= this.max) {
      throw fromDomainError(
        limitExceeded(
          'admin_streams',
          this.max,
          settingName('maxAdminStreams'),
          `${this.max} admin streams (task events and task list) are already open; close one first`,
        ),
      );
    }
    // Express runs GET routes for HEAD too, and Node sends a HEAD's headers only at its end.
    if (req.method === 'HEAD') {
      res.status(200).type('text/event-stream').end();
      return null;
    }
    this.count++;
    const cleanups: Array<() => void> = [];
    let keepAlive: NodeJS.Timeout | undefined;
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      this.count--;
      clearInterval(keepAlive);
      this.stopping.removeEventListener('abort', finish);
      for (const fn of cleanups.splice(0)) fn();
      res.end();
    };
    // The response's 'close' is the connection's end, whenever it comes (even during the setup below).
    res.once('close', finish);
    this.stopping.addEventListener('abort', finish, { once: true });
    if (this.stopping.aborted) {
      finish();
      return null;
    }
    // Our own keep-alive, as in inbox-stream.ts: better-sse's would outlive a request closed first.
    const session = await createSession(req, res, { keepAlive: null, trustClientEventId: false, ...options });
    if (finished) return null;
    keepAlive = setInterval(() => res.write(':\n\n'), KEEP_ALIVE_MS);
    session.on('disconnected', finish);
    return {
      push(data, event, id) {
        if (finished) return false;
        try {
          session.push(data, event, id);
          return true;
        } catch {
          // better-sse already counts the session gone: end it (a log listener must not throw).
          finish();
          return false;
        }
      },
      onEnd(fn) {
        if (finished) fn();
        else cleanups.push(fn);
      },
      drained() {
        if (finished) return Promise.resolve(false);
        if (!res.writableNeedDrain) return Promise.resolve(true);
        return new Promise<boolean>((resolve) => {
          const done = (ok: boolean) => () => {
            res.off('drain', onDrain);
            res.off('close', onClose);
            resolve(ok);
          };
          const onDrain = done(true);
          const onClose = done(false);
          res.once('drain', onDrain);
          res.once('close', onClose);
        });
      },
    };
  }
}
