import { existsSync, readFileSync } from 'node:fs';
import { createParser } from 'eventsource-parser';
import { defaultHome, homePaths } from '../config.js';
import type { StoredEvent } from '../events/catalogue.js';

/**
 * What CLI commands other than `serve` need to reach a server: its base URL and the admin
 * token (`BEIDOU_ADMIN_TOKEN`, else the home's `admin.token`).
 */
export interface ClientOptions {
  server?: string;
  home?: string;
}

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
    /** The server's error code when the server refused (`unknown_agent`, `invalid_input`, ...). */
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

export function serverUrl(opts: ClientOptions): string {
  const url = opts.server ?? process.env.BEIDOU_SERVER ?? `http://127.0.0.1:${process.env.BEIDOU_PORT || '7777'}`;
  return url.replace(/\/+$/, '');
}

export function adminToken(opts: ClientOptions): string {
  const fromEnv = process.env.BEIDOU_ADMIN_TOKEN;
  if (fromEnv) return fromEnv;
  const file = homePaths(opts.home ?? defaultHome()).adminToken;
  if (!existsSync(file)) {
    throw new CliError(`no admin token: set BEIDOU_ADMIN_TOKEN or start the server once so ${file} exists`, 2);
  }
  return readFileSync(file, 'utf8').trim();
}

/**
 * Which command-line flag an input field of the request came from (`answers[0].text` →
 * `--text`), so an error names what the user typed; undefined keeps the field's own name.
 */
export type FlagOf = (field: string) => string | undefined;

export const flagsFrom =
  (table: Record<string, string>): FlagOf =>
  (field) =>
    table[field];

/** The one "no server" message, for every command that talks to a server (streams included). */
function unreachable(opts: ClientOptions, err: unknown): CliError {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  const why =
    typeof cause?.code === 'string'
      ? cause.code
      : typeof cause?.message === 'string' && cause.message
        ? cause.message
        : (err as Error).message;
  return new CliError(
    `cannot reach ${serverUrl(opts)} (${why}): is beidou serve running there? (--server or BEIDOU_SERVER says where)`,
  );
}

/** A non-2xx answer as a CliError: `STATUS CODE: message`, with the field at fault renamed to its flag. */
async function refusal(res: Response, flagOf?: FlagOf): Promise<CliError> {
  const text = await res.text().catch(() => '');
  let body: { error?: string; message?: string; details?: { field?: unknown; available?: unknown } } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    // Not our JSON (a proxy's page): show the text as it came.
  }
  let message = body.message ?? text;
  const field = body.details?.field;
  const flag = typeof field === 'string' ? flagOf?.(field) : undefined;
  if (flag !== undefined && typeof field === 'string') {
    // Messages name the field first: `field: …` (validation) or `field "x" …` (unknown_skill).
    if (message.startsWith(`${field}:`) || message.startsWith(`${field} `))
      message = flag + message.slice(field.length);
    else message = `${flag}: ${message}`;
  }
  if (body.error === 'unknown_skill' && Array.isArray(body.details?.available))
    message += ` (skills: ${body.details.available.join(', ')})`;
  return new CliError(`${res.status} ${body.error ?? 'error'}: ${message}`, 1, body.error ?? null);
}

/** One request to the admin API; an unreachable server and a refusal both become CliErrors. */
async function request(
  opts: ClientOptions,
  method: string,
  path: string,
  init: { body?: unknown; stream?: boolean; flagOf?: FlagOf } = {},
): Promise<Response> {
  // Read first: a missing token is a configuration error (exit 2), not an unreachable server.
  const token = adminToken(opts);
  let res: Response;
  try {
    res = await fetch(`${serverUrl(opts)}/api${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(init.stream ? { accept: 'text/event-stream' } : {}),
        ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    });
  } catch (err) {
    throw unreachable(opts, err);
  }
  if (!res.ok) throw await refusal(res, init.flagOf);
  return res;
}

/** Calls the admin API; a non-2xx answer becomes a CliError carrying the server's message. */
export async function api<T>(
  opts: ClientOptions,
  method: string,
  path: string,
  body?: unknown,
  flagOf?: FlagOf,
): Promise<T> {
  const res = await request(opts, method, path, { body, ...(flagOf ? { flagOf } : {}) });
  const text = await res.text();
  return (text.length > 0 ? JSON.parse(text) : {}) as T;
}

/** `events` and `tail` name the cursor `--since`, as the API's query does `since`. */
const EVENT_FLAGS = flagsFrom({ since: '--since' });

/** Every durable event of a task after `since`, page by page. */
export async function readEvents(
  opts: ClientOptions,
  taskId: string,
  since: number,
  onEvent: (e: StoredEvent) => void,
): Promise<void> {
  for (;;) {
    const page = await api<{ events: StoredEvent[]; cursor: number }>(
      opts,
      'GET',
      `/tasks/${encodeURIComponent(taskId)}/events?since=${since}&limit=10000`,
      undefined,
      EVENT_FLAGS,
    );
    page.events.forEach(onEvent);
    if (page.events.length === 0) return;
    since = page.cursor;
  }
}

/**
 * A task's events after `since`, then each new one as it becomes durable, until the server
 * ends the stream (it stops) or the process is stopped.
 */
export async function followEvents(
  opts: ClientOptions,
  taskId: string,
  since: number,
  onEvent: (e: StoredEvent) => void,
): Promise<void> {
  const res = await request(opts, 'GET', `/tasks/${encodeURIComponent(taskId)}/events/stream?since=${since}`, {
    stream: true,
    flagOf: EVENT_FLAGS,
  });
  const parser = createParser({ onEvent: (e) => onEvent(JSON.parse(e.data) as StoredEvent) });
  const decoder = new TextDecoder();
  try {
    for await (const chunk of res.body!) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
  } catch (err) {
    throw new CliError(`lost the event stream of ${serverUrl(opts)} (${(err as Error).message})`);
  }
}

/** A `--since` value: a whole number ≥ 0 (exit 2 otherwise). */
export function sinceOption(value: string | undefined): number {
  const since = value === undefined ? 0 : Number(value);
  if (!Number.isInteger(since) || since < 0 || value?.trim() === '')
    throw new CliError('--since must be a non-negative integer', 2);
  return since;
}

/** Prints one JSON value on its own line (`--json`). */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}
