import { createParser } from 'eventsource-parser';
import type { InboxSummary } from '../../domain/messages.js';

/**
 * Follows an agent's inbox through `GET /api/hook/inbox/stream`, reconnecting across server
 * restarts and network cuts (each connection starts with the current summary, so nothing is
 * missed). Ends when the server says the agent can get no more mail, when it refuses the
 * token (terminated, or not a token), or when the signal aborts.
 */
/** What the stream says of the inbox: the summary, and how many MCP sessions the agent has open. */
export type InboxState = InboxSummary & { mcp_sessions?: number };

export type WatchEnd =
  | { kind: 'ended'; reason: string }
  | { kind: 'refused'; status: number; message: string }
  | { kind: 'aborted' };

export interface WatchOptions {
  server: string;
  /** Read at each connection, so a token file rewritten by `beidou attach` is picked up. */
  token: () => string;
  onSummary: (summary: InboxState) => void;
  /** Connection trouble, for the relay's log. */
  onTrouble?: (message: string) => void;
  signal: AbortSignal;
}

const BACKOFF_MS = [250, 500, 1_000, 2_000, 5_000, 10_000];

/**
 * Waits `ms`, or less if `signal` aborts. Its abort listener goes when the wait ends: the
 * relay pauses every 250 ms while its session works, for days, on one signal.
 */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    if (signal.aborted) done();
  });
}

export async function watchInbox(opts: WatchOptions): Promise<WatchEnd> {
  let failures = 0;
  while (!opts.signal.aborted) {
    const end = await once(opts).catch((err: unknown) => {
      if (opts.signal.aborted) return { kind: 'aborted' as const };
      opts.onTrouble?.(`inbox stream: ${(err as Error).message}`);
      return null;
    });
    if (end && end !== 'reconnect') return end;
    if (end === 'reconnect') {
      opts.onTrouble?.('inbox stream: closed by the server; reconnecting');
      failures = 0;
    }
    await pause(BACKOFF_MS[Math.min(failures++, BACKOFF_MS.length - 1)]!, opts.signal);
  }
  return { kind: 'aborted' };
}

/**
 * How long the server may take to answer, and then stay silent. It answers at once and
 * writes at least a keep-alive comment every 15 s: a connection quiet for longer is dead
 * without saying so (a half-open TCP connection after the machine slept or the network
 * changed), and would otherwise be waited on for ever, the session never rung again.
 */
const ANSWER_MS = 10_000;
const SILENCE_MS = 40_000;

/** One connection: its end, or 'reconnect' when the stream closed without saying why. */
async function once(opts: WatchOptions): Promise<WatchEnd | 'reconnect'> {
  // This connection's own signal: the watch's, or the silence's.
  const connection = new AbortController();
  const stop = () => connection.abort();
  opts.signal.addEventListener('abort', stop, { once: true });
  let timer: NodeJS.Timeout | undefined;
  let silence = '';
  const expect = (ms: number, what: string) => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      silence = what;
      connection.abort();
    }, ms);
  };
  expect(ANSWER_MS, `the server did not answer in ${ANSWER_MS / 1000} s`);
  try {
    if (opts.signal.aborted) connection.abort();
    return await follow(opts, connection.signal, () =>
      expect(SILENCE_MS, `nothing from the server in ${SILENCE_MS / 1000} s`),
    );
  } catch (err) {
    if (silence && !opts.signal.aborted) throw new Error(silence);
    throw err;
  } finally {
    clearTimeout(timer);
    opts.signal.removeEventListener('abort', stop);
  }
}

async function follow(opts: WatchOptions, signal: AbortSignal, heard: () => void): Promise<WatchEnd | 'reconnect'> {
  const res = await fetch(`${opts.server}/api/hook/inbox/stream`, {
    headers: { authorization: `Bearer ${opts.token()}`, accept: 'text/event-stream' },
    signal,
  });
  heard();
  if (res.status === 401 || res.status === 403 || res.status === 404) {
    const body = (await res.json().catch(() => ({}))) as { error?: string; message?: string };
    return { kind: 'refused', status: res.status, message: `${body.error ?? res.status}: ${body.message ?? ''}` };
  }
  if (!res.ok || !res.body) {
    await res.body?.cancel();
    throw new Error(`the server answered ${res.status}`);
  }
  let ended: WatchEnd | null = null;
  const parser = createParser({
    onEvent: (e) => {
      let data: unknown;
      try {
        data = JSON.parse(e.data);
      } catch {
        return;
      }
      if (e.event === 'inbox') opts.onSummary(data as InboxState);
      else if (e.event === 'ended') ended = { kind: 'ended', reason: String((data as { reason?: unknown }).reason) };
    },
  });
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    heard();
    parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
    if (ended) break;
  }
  return ended ?? 'reconnect';
}
