import type { EventId, EventStore, StreamId } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { JSONRPCMessage, RequestId } from '@modelcontextprotocol/sdk/types.js';
import { requestConnection, responseId, type Connection, type ReplyTracker } from './reply-flush.js';

/**
 * One Streamable HTTP session's stream events (the SDK's EventStore), kept so that a client whose POST stream
 * dropped can reconnect (GET /mcp with `Last-Event-ID`) and receive what it missed (MCP
 * 2025-11-25 resumability; the SDK writes the priming event and replays through this).
 * Bounded per session by count, bytes and age (docs/security.md); a stream whose response
 * was written in full is forgotten at once, since there is nothing left to resume.
 *
 * It also tells a call whether its reply reached the client: written on a connection that
 * then finished, or replayed to a resumed one. A reply evicted unreplayed, or still waiting
 * when the session closes, did not.
 */

export interface ResumeLimits {
  maxEvents: number;
  maxBytes: number;
  maxAgeS: number;
}

interface KeptEvent {
  streamId: StreamId;
  message: JSONRPCMessage;
  bytes: number;
  at: number;
}

interface Receipt {
  /** The stream its response was stored on (unset until the response is sent). */
  streamId: StreamId | undefined;
  settle: (flushed: boolean) => void;
}

/** The SDK's id for a session's standalone GET stream. */
const STANDALONE_STREAM = '_GET_stream';

/** Sessions whose events may age out; one timer prunes them all. */
const live = new Set<StreamResumption>();
let pruner: NodeJS.Timeout | null = null;

export class StreamResumption implements EventStore, ReplyTracker {
  private next = 0;
  private readonly events = new Map<EventId, KeptEvent>(); // oldest first
  private bytes = 0;
  /** The connection currently carrying each resumable stream. */
  private readonly carriers = new Map<StreamId, Connection>();
  /** Per stream, the signal that ends its calls when the client does not come back in time. */
  private readonly abandon = new Map<StreamId, { controller: AbortController; timer: NodeJS.Timeout | null }>();
  private readonly receipts = new Map<RequestId, Receipt>();
  private closed = false;

  constructor(
    private readonly limits: ResumeLimits,
    private readonly now: () => number,
  ) {
    live.add(this);
    if (!pruner) {
      pruner = setInterval(
        () => {
          for (const resumption of live) resumption.prune();
        },
        Math.max(1000, (limits.maxAgeS * 1000) / 2),
      );
      pruner.unref();
    }
  }

  get size(): { events: number; bytes: number } {
    return { events: this.events.size, bytes: this.bytes };
  }

  async storeEvent(streamId: StreamId, message: JSONRPCMessage): Promise<EventId> {
    const eventId = `${streamId}_${++this.next}`;
    // The standalone GET stream carries only wake-up notifications, whose message stays in
    // the inbox until it is read: nothing on it needs replaying, so nothing is kept (each
    // arrival would otherwise cost a copy per open session).
    if (this.closed || streamId === STANDALONE_STREAM) return eventId;
    const connection = requestConnection.getStore();
    // The priming event (empty) opens a resumable stream on the connection it goes out on.
    if (Object.keys(message).length === 0 && connection) {
      connection.streamId = streamId;
      this.bind(streamId, connection);
    }
    const bytes = Buffer.byteLength(JSON.stringify(message));
    const fits = bytes <= this.limits.maxBytes;
    if (fits) {
      this.events.set(eventId, { streamId, message, bytes, at: this.now() });
      this.bytes += bytes;
    }
    const id = responseId(message);
    const receipt = id === undefined ? undefined : this.receipts.get(id);
    if (receipt) {
      receipt.streamId = streamId;
      // Not kept and no live connection to write it to: it can never reach the client.
      if (!fits && !this.carriers.get(streamId)?.open) receipt.settle(false);
    }
    this.prune();
    return eventId;
  }

  async getStreamIdForEventId(eventId: EventId): Promise<StreamId | undefined> {
    return this.events.get(eventId)?.streamId;
  }

  async replayEventsAfter(
    lastEventId: EventId,
    { send }: { send: (eventId: EventId, message: JSONRPCMessage) => Promise<void> },
  ): Promise<StreamId> {
    const from = this.events.get(lastEventId);
    const streamId = from?.streamId ?? lastEventId.slice(0, lastEventId.lastIndexOf('_'));
    const connection = requestConnection.getStore();
    if (connection) this.bind(streamId, connection);
    if (!from) return streamId;
    let after = false;
    for (const [eventId, event] of [...this.events]) {
      if (eventId === lastEventId) after = true;
      else if (after && event.streamId === streamId) {
        await send(eventId, event.message);
        const id = responseId(event.message);
        if (id !== undefined) this.settle(id, true); // handed to the resumed connection
      }
    }
    return streamId;
  }

  /** A stream's events now go out on `connection`; its end decides what happens next. */
  private bind(streamId: StreamId, connection: Connection): void {
    this.carriers.set(streamId, connection);
    const waiting = this.abandon.get(streamId);
    if (waiting?.timer) clearTimeout(waiting.timer);
    if (waiting) waiting.timer = null;
    void connection.ended.then((finished) => {
      if (this.carriers.get(streamId) !== connection) return; // a resume took over
      if (finished) {
        // Written in full: every reply on it reached the client, and nothing is left to resume.
        for (const [id, r] of this.receipts) if (r.streamId === streamId) this.settle(id, true);
        this.forget(streamId);
      } else {
        this.startAbandon(streamId);
      }
    });
  }

  private startAbandon(streamId: StreamId): void {
    const entry = this.abandonEntry(streamId);
    if (entry.timer || entry.controller.signal.aborted || this.closed) return;
    entry.timer = setTimeout(() => entry.controller.abort(), this.limits.maxAgeS * 1000);
    entry.timer.unref();
  }

  private abandonEntry(streamId: StreamId): { controller: AbortController; timer: NodeJS.Timeout | null } {
    let entry = this.abandon.get(streamId);
    if (!entry) this.abandon.set(streamId, (entry = { controller: new AbortController(), timer: null }));
    return entry;
  }

  private forget(streamId: StreamId): void {
    this.carriers.delete(streamId);
    const entry = this.abandon.get(streamId);
    if (entry?.timer) clearTimeout(entry.timer);
    this.abandon.delete(streamId);
    for (const [eventId, event] of this.events) if (event.streamId === streamId) this.drop(eventId, event);
  }

  private drop(eventId: EventId, event: KeptEvent): void {
    this.events.delete(eventId);
    this.bytes -= event.bytes;
    const id = responseId(event.message);
    // Evicted before any connection carried it: that reply will never be replayed.
    if (id !== undefined && !this.carriers.get(event.streamId)?.open) this.settle(id, false);
  }

  /** Evicts the oldest events past the count, bytes or age bound. */
  prune(): void {
    const cutoff = this.now() - this.limits.maxAgeS;
    for (const [eventId, event] of this.events) {
      if (this.events.size <= this.limits.maxEvents && this.bytes <= this.limits.maxBytes && event.at >= cutoff) break;
      this.drop(eventId, event);
    }
  }

  private settle(id: RequestId, flushed: boolean): void {
    this.receipts.get(id)?.settle(flushed);
  }

  flushed(requestId: RequestId, connection: Connection | undefined, strict: boolean): Promise<boolean> {
    if (!connection) return Promise.resolve(true);
    if (strict || connection.streamId === undefined) return connection.ended;
    if (this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      this.receipts.set(requestId, {
        streamId: undefined,
        settle: (flushed) => {
          this.receipts.delete(requestId);
          resolve(flushed);
        },
      });
    });
  }

  gone(connection: Connection | undefined): AbortSignal | undefined {
    if (!connection) return undefined;
    if (connection.streamId === undefined) return connection.signal;
    return this.abandonEntry(connection.streamId).controller.signal;
  }

  /** The session ended: nothing can be resumed, and replies still waiting did not arrive. */
  close(): void {
    this.closed = true;
    live.delete(this);
    if (live.size === 0 && pruner) {
      clearInterval(pruner);
      pruner = null;
    }
    for (const entry of this.abandon.values()) if (entry.timer) clearTimeout(entry.timer);
    this.abandon.clear();
    this.carriers.clear();
    this.events.clear();
    this.bytes = 0;
    for (const r of [...this.receipts.values()]) r.settle(false);
  }
}
