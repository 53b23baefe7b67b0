import { AsyncLocalStorage } from 'node:async_hooks';
import type { ServerResponse } from 'node:http';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import type { JSONRPCMessage, RequestId } from '@modelcontextprotocol/sdk/types.js';

/**
 * How the server learns that a reply reached the client's connection, so that what a
 * reply hands over (inbox messages, an answer) leaves the server's keeping only then.
 * "Flushed" means handed to the kernel for the client's socket: a response whose `finish`
 * fired (every byte written), or, on the legacy SSE stream, a write whose callback came
 * back without error. Nothing proves the client read it; a crash after the flush and
 * before its record redelivers, marked (docs/architecture.md, delivery guarantees).
 */

/**
 * Settles true when the response has been written in full to its socket, false when the
 * connection closes first. Node also emits `finish` when the socket failed or was destroyed
 * with the last write still queued (a client gone while the reply waits on a full socket
 * buffer: EPIPE), so a `finish` on such a socket counts as closed first. Call it when the
 * request starts.
 */
export function responseFlushed(res: ServerResponse): Promise<boolean> {
  const socket = res.socket;
  if (res.writableFinished) return Promise.resolve(true);
  if (res.destroyed || !socket || socket.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    res.once('finish', () => resolve(!socket.destroyed && !socket.errored));
    res.once('close', () => resolve(false));
  });
}

/**
 * One HTTP request carrying MCP messages: a POST, or a GET that resumes a stream. A
 * Streamable HTTP session outlives its requests, so the SDK does not abort a handler when
 * the connection carrying its call drops; `signal` does.
 */
export class Connection {
  private readonly controller = new AbortController();
  readonly ended: Promise<boolean>;
  /** Set once a priming event went out on it: its client holds a cursor and can resume. */
  streamId: string | undefined;
  open = true;

  constructor(res: ServerResponse) {
    this.ended = responseFlushed(res).then((finished) => {
      this.open = false;
      if (!finished) this.controller.abort();
      return finished;
    });
  }

  /** Aborts when the connection closes before its response is complete. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }
}

/** The HTTP request the current MCP message arrived on (set around the transport's handling). */
export const requestConnection = new AsyncLocalStorage<Connection>();

/** How one MCP session learns that a reply reached its client, and when its client is gone. */
export interface ReplyTracker {
  /**
   * Settles true once the reply to `requestId` has been flushed to a client connection;
   * false once it cannot be. `strict`: the first connection closed early is final, even
   * if the client could resume the stream.
   */
  flushed(requestId: RequestId, connection: Connection | undefined, strict: boolean): Promise<boolean>;
  /** Aborts a call whose client is gone (for a resumable stream: gone and not back in time). */
  gone(connection: Connection | undefined): AbortSignal | undefined;
}

/** The id of the request a message answers, if it is a response. */
export function responseId(message: JSONRPCMessage): RequestId | undefined {
  // A structural check: the SDK's type guards run a zod parse, whose failure path (every
  // notification and request) costs more than the rest of a send on the hot path.
  if ('method' in message || !('id' in message)) return undefined;
  return 'result' in message || 'error' in message ? (message.id ?? undefined) : undefined;
}

/**
 * The legacy HTTP+SSE transport, whose replies go out on the long-lived GET stream: a
 * reply counts as flushed when its write callback returns without error. The stream's end
 * ends the session and its calls, so there is nothing to resume.
 */
export class FlushingSSEServerTransport extends SSEServerTransport implements ReplyTracker {
  private readonly pending = new Map<RequestId, (flushed: boolean) => void>();

  constructor(
    endpoint: string,
    private readonly stream: ServerResponse,
  ) {
    super(endpoint, stream);
    stream.once('close', () => {
      for (const settle of [...this.pending.values()]) settle(false);
    });
  }

  flushed(requestId: RequestId): Promise<boolean> {
    if (this.stream.writableEnded || this.stream.destroyed) return Promise.resolve(false);
    return new Promise((resolve) => {
      this.pending.set(requestId, (ok) => {
        this.pending.delete(requestId);
        resolve(ok);
      });
    });
  }

  gone(): undefined {
    return undefined;
  }

  override async send(message: JSONRPCMessage): Promise<void> {
    const id = responseId(message);
    const settle = id === undefined ? undefined : this.pending.get(id);
    if (!settle) return super.send(message);
    if (this.stream.writableEnded || this.stream.destroyed) {
      settle(false);
      throw new Error('Not connected');
    }
    this.stream.write(`event: message\ndata: ${JSON.stringify(message)}\n\n`, (err) => settle(!err));
  }
}
