import { existsSync, readFileSync } from 'node:fs';
import { defaultHome, homePaths } from '../config.js';

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

/** Calls the admin API; a non-2xx answer becomes a CliError carrying the server's message. */
export async function api<T>(opts: ClientOptions, method: string, path: string, body?: unknown): Promise<T> {
  const url = `${serverUrl(opts)}/api${path}`;
  // Read first: a missing token is a configuration error (exit 2), not an unreachable server.
  const token = adminToken(opts);
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch (err) {
    throw new CliError(`cannot reach ${serverUrl(opts)} (${(err as Error).cause ?? (err as Error).message}); is beidou serve running?`);
  }
  const text = await res.text();
  const json = text.length > 0 ? (JSON.parse(text) as unknown) : {};
  if (!res.ok) {
    const e = json as { error?: string; message?: string };
    throw new CliError(`${res.status} ${e.error ?? 'error'}: ${e.message ?? text}`);
  }
  return json as T;
}
