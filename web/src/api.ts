import { getState, signOut } from './store.js';

/**
 * The admin API from the page: JSON requests with the bearer token, and the SSE streams
 * read with fetch (EventSource cannot send an Authorization header), reconnecting with
 * `Last-Event-ID` where the stream's ids are resumable (a task's events: id = seq).
 */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

function authHeaders(token: string | null): Record<string, string> {
  return token ? { authorization: `Bearer ${token}` } : {};
}

async function errorOf(res: Response): Promise<ApiError> {
  const body = (await res.json().catch(() => null)) as {
    error?: string;
    message?: string;
    details?: Record<string, unknown>;
  } | null;
  return new ApiError(
    res.status,
    body?.error ?? `http_${res.status}`,
    body?.message ?? `${res.status} ${res.statusText}`,
    body?.details,
  );
}

/** One admin request. A refused token signs the page out (the sign-in form says why). */
export async function request<T>(method: string, path: string, body?: unknown, token = getState().token): Promise<T> {
  let res: Response;
  try {
    res = await fetch(`/api${path}`, {
      method,
      headers: { ...authHeaders(token), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch {
    throw new ApiError(0, 'unreachable', 'the server cannot be reached');
  }
  if (!res.ok) {
    const err = await errorOf(res);
    if (res.status === 401 && token === getState().token)
      signOut(`The token was refused (${err.code}); sign in again.`);
    throw err;
  }
  return (await res.json()) as T;
}

export async function serverVersion(): Promise<string | null> {
  try {
    const res = await fetch('/api/health');
    return res.ok ? ((await res.json()) as { version: string }).version : null;
  } catch {
    return null;
  }
}

export interface StreamOptions {
  /** Send the last `id:` seen as `Last-Event-ID` on reconnect (ids that mean something to the server). */
  resume: boolean;
  onEvent(event: string, data: string, id: string | null): void;
  /** Connected (true) or waiting to reconnect (false). */
  onState(connected: boolean): void;
  /** A refusal that reconnecting will not cure (404, 409): the stream stops. */
  onFatal?(err: ApiError): void;
}

const MIN_RETRY_MS = 500;
const MAX_RETRY_MS = 15_000;

/** Opens a stream that reconnects until closed; returns the close. */
export function openStream(path: string, options: StreamOptions): () => void {
  const controller = new AbortController();
  let lastId: string | null = null;
  let retryMs = 2_000;
  let failures = 0;

  const run = async () => {
    while (!controller.signal.aborted) {
      const token = getState().token;
      if (!token) return;
      let res: Response | null = null;
      try {
        res = await fetch(`/api${path}`, {
          headers: {
            ...authHeaders(token),
            accept: 'text/event-stream',
            ...(options.resume && lastId !== null ? { 'last-event-id': lastId } : {}),
          },
          signal: controller.signal,
          cache: 'no-store',
        });
      } catch {
        res = null;
      }
      if (controller.signal.aborted) return;
      if (res && !res.ok) {
        const err = await errorOf(res);
        if (res.status === 401) {
          options.onState(false);
          if (token === getState().token) signOut(`The token was refused (${err.code}); sign in again.`);
          return;
        }
        if (res.status === 404 || res.status === 409) {
          options.onState(false);
          options.onFatal?.(err);
          return;
        }
        // A resume point the server does not know (a reset home): start over; the reader drops what it has seen.
        if (res.status === 400 && lastId !== null) lastId = null;
      } else if (res?.body) {
        failures = 0;
        options.onState(true);
        await read(res.body, controller.signal, {
          onEvent: (event, data, id) => {
            if (id !== null) lastId = id;
            options.onEvent(event, data, id);
          },
          onRetry: (ms) => (retryMs = ms),
        });
        if (controller.signal.aborted) return;
      }
      options.onState(false);
      failures++;
      const wait = Math.min(MAX_RETRY_MS, Math.max(MIN_RETRY_MS, retryMs) * 2 ** Math.min(failures - 1, 4));
      await sleep(wait, controller.signal);
    }
  };
  void run();
  return () => controller.abort();
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/** The text/event-stream format (WHATWG HTML, server-sent events), line by line. */
async function read(
  body: ReadableStream<Uint8Array>,
  signal: AbortSignal,
  on: { onEvent(event: string, data: string, id: string | null): void; onRetry(ms: number): void },
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data: string[] = [];
  let id: string | null = null;
  const line = (text: string) => {
    if (text === '') {
      if (data.length > 0) on.onEvent(event || 'message', data.join('\n'), id);
      event = '';
      data = [];
      id = null;
      return;
    }
    if (text.startsWith(':')) return;
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id' && !value.includes('\0')) id = value;
    else if (field === 'retry' && /^\d+$/.test(value)) on.onRetry(Number(value));
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done || signal.aborted) break;
      buffer += decoder.decode(value, { stream: true });
      let cut: number;
      while ((cut = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const width = buffer.startsWith('\r\n', cut) ? 2 : 1;
        // A lone \r at the end may be the first half of \r\n: wait for more.
        if (buffer[cut] === '\r' && width === 1 && cut === buffer.length - 1) break;
        line(buffer.slice(0, cut));
        buffer = buffer.slice(cut + width);
      }
    }
  } catch {
    // The connection dropped: the caller reconnects.
  } finally {
    reader.releaseLock();
  }
}
