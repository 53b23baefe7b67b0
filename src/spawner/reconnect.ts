/**
 * How the spawner keeps its command stream: the wait before each new attempt, and the one
 * line it logs for each failed one. The server may be restarting, failing over to another
 * replica (a standby answers 503 `standby` with `Retry-After` until it takes over), or gone
 * for a while (connections refused): in every case the spawner keeps trying, never exits.
 */

/** The first wait, doubled after each failed attempt up to the last. */
export const FIRST_WAIT_MS = 250;
export const MAX_WAIT_MS = 5_000;

/** The server answered the stream request with an error status. */
export class StreamRefused extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    /** The server's `Retry-After`, in milliseconds (null: none, or unreadable). */
    readonly retryAfterMs: number | null,
  ) {
    super(`stream refused: ${status} ${body.slice(0, 300)}`);
  }
}

/** Heartbeats of silence (the server sends a keep-alive every heartbeat) after which a stream is taken for dead. */
export const SILENT_BEATS = 3;

/** The stream opened but the server said nothing, not even a keep-alive, for too long. */
export class StreamSilent extends Error {
  constructor(readonly silentMs: number) {
    super(`no word from the server for ${silentMs} ms`);
  }
}

/** `Retry-After` (seconds, or an HTTP date) in milliseconds from now. */
export function retryAfterMs(header: string | null, now = Date.now()): number | null {
  if (!header) return null;
  if (/^\d+$/.test(header.trim())) return Number(header.trim()) * 1000;
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/**
 * Waits between attempts: 0.25 s doubling to 5 s, reset once a stream opens. A server's
 * `Retry-After` (a standby's is the lease) lengthens a wait to it, never past the cap: a
 * standby may become the active replica sooner than it said.
 */
export class Backoff {
  private attempt = 0;

  reset(): void {
    this.attempt = 0;
  }

  next(retryAfter: number | null = null): number {
    const base = Math.min(FIRST_WAIT_MS * 2 ** this.attempt, MAX_WAIT_MS);
    this.attempt = Math.min(this.attempt + 1, 30);
    return Math.min(Math.max(base, retryAfter ?? 0), MAX_WAIT_MS);
  }
}

/** Seconds as a person reads them: 0.25, 0.5, 1, 3. */
export function seconds(ms: number): string {
  return String(Number((ms / 1000).toFixed(2)));
}

/** What went wrong with the command stream, in one clause naming the server. */
export function describeStreamFailure(serverUrl: string, err: unknown): string {
  if (err instanceof StreamRefused) {
    if (err.status === 503) {
      const standby = standbyOf(err.body);
      if (standby)
        return `the server at ${serverUrl} is a standby replica (the active one is ${standby.active ?? 'not known yet'})`;
    }
    const body = err.body.replace(/\s+/g, ' ').trim().slice(0, 200);
    return `the server at ${serverUrl} refused the command stream (${err.status}${body ? `: ${body}` : ''})`;
  }
  if (err instanceof StreamSilent) {
    return `the command stream from ${serverUrl} went silent (no word, not even a keep-alive, for ${seconds(err.silentMs)} s: the server paused or gone, or a balancer holding a dead connection)`;
  }
  const why = innermost(err);
  // fetch() fails before any response (refused, reset, no route): the server is not there.
  if (err instanceof TypeError && err.message === 'fetch failed')
    return `cannot reach the server at ${serverUrl} (${why})`;
  return `the command stream from ${serverUrl} was cut (${why})`;
}

function standbyOf(body: string): { active: string | null } | null {
  try {
    const parsed = JSON.parse(body) as { error?: string; details?: { active?: string | null } };
    return parsed.error === 'standby' ? { active: parsed.details?.active ?? null } : null;
  } catch {
    return null;
  }
}

/** The root cause: a system error's code (ECONNREFUSED), else the deepest message (`other side closed`). */
function innermost(err: unknown): string {
  let message = String((err as Error | undefined)?.message ?? err);
  for (
    let e = err as { code?: unknown; cause?: unknown; message?: unknown } | undefined, depth = 0;
    e && depth < 5;
    e = e.cause as typeof e, depth++
  ) {
    if (typeof e.code === 'string' && /^E[A-Z]+$/.test(e.code)) return e.code;
    if (typeof e.message === 'string' && e.message) message = e.message;
  }
  return message;
}
