import { createRequire } from 'node:module';
import { pino, type DestinationStream, type Logger } from 'pino';
import type pinoPrettyModule from 'pino-pretty';
import { scrubTokens } from './scrub.js';

export { scrubTokens } from './scrub.js';

// pino-pretty (a CommonJS package) is required only for the pretty format: a server logging
// JSON, as under a supervisor or in a container, does not load it.
const requirePretty = (): typeof pinoPrettyModule =>
  createRequire(import.meta.url)('pino-pretty') as typeof pinoPrettyModule;

/** `pretty`: one readable line per entry (for a person at a terminal); `json`: one JSON object per line. */
export type LogFormat = 'json' | 'pretty';
export const LOG_FORMATS: readonly LogFormat[] = ['json', 'pretty'];

/**
 * `--log-format`, else `BEIDOU_LOG_FORMAT`, else pretty on a terminal and JSON otherwise
 * (a file, a pipe, a log collector). Throws on a value that is neither.
 */
export function resolveLogFormat(
  flag: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
  isTTY = Boolean(process.stderr.isTTY),
): LogFormat {
  const wanted = flag ?? (env.BEIDOU_LOG_FORMAT || undefined);
  if (wanted === undefined) return isTTY ? 'pretty' : 'json';
  if (!(LOG_FORMATS as readonly string[]).includes(wanted))
    throw new Error(`invalid --log-format / BEIDOU_LOG_FORMAT: must be json or pretty (got "${wanted}")`);
  return wanted as LogFormat;
}

/**
 * Credentials never reach a log line, whatever level: authorization headers and every
 * token or secret field are replaced before a line is written.
 */
export const REDACT_PATHS = [
  'authorization',
  'token',
  'adminToken',
  'admin_token',
  'secret',
  'password',
  'databaseUrl',
  'database_url',
  'connectionString',
  'headers.authorization',
  'headers.cookie',
  'req.headers.authorization',
  'req.headers.cookie',
  '*.authorization',
  '*.token',
  '*.adminToken',
  '*.admin_token',
  '*.secret',
  '*.password',
  '*.databaseUrl',
  '*.database_url',
  '*.connectionString',
  '*.*.token',
  '*.*.secret',
];

/** Nested fields looked at down to this depth: as deep as a redact path reaches (`*.*.token`). */
const URL_DEPTH = 3;

/**
 * A log line's fields with each `URL` object (a server address, a database URL) as its text,
 * its password hidden: the redact paths read `password` of every field, and a `URL`'s
 * `password` getter throws on the copy the redaction makes. Copied only where something changed.
 */
export function urlsAsText<T>(value: T, depth = URL_DEPTH): T {
  if (value instanceof URL) {
    const shown = new URL(value.href);
    if (shown.password) shown.password = 'redacted';
    return shown.href as T;
  }
  if (depth === 0 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    let copy: unknown[] | null = null;
    value.forEach((item, i) => {
      const shown = urlsAsText(item, depth - 1);
      if (shown !== item) (copy ??= [...value])[i] = shown;
    });
    return (copy ?? value) as T;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype) return value;
  let copy: Record<string, unknown> | null = null;
  for (const [key, item] of Object.entries(value)) {
    const shown = urlsAsText(item, depth - 1);
    if (shown !== item) (copy ??= { ...(value as Record<string, unknown>) })[key] = shown;
  }
  return (copy ?? value) as T;
}

/**
 * Logs of the process itself (not events) go to stderr through pino, or to `destination`.
 * Redaction happens before formatting, so both formats hide the same things. The pretty
 * format is a plain stream in this thread (no transport worker), written synchronously, so
 * nothing is lost when the process exits.
 */
export function createLogger(
  level: string = process.env.BEIDOU_LOG_LEVEL ?? 'info',
  destination?: DestinationStream,
  format: LogFormat = 'json',
): Logger {
  const out =
    format === 'pretty'
      ? requirePretty()({
          destination: destination ?? 2,
          sync: true,
          singleLine: true,
          colorize: destination === undefined && Boolean(process.stderr.isTTY),
          translateTime: 'SYS:HH:MM:ss',
          ignore: 'pid,hostname,name',
        })
      : (destination ?? pino.destination({ fd: 2, sync: false }));
  return pino(
    {
      level,
      base: { name: 'beidou' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      // A URL logged as the merging object itself becomes a field of its own.
      formatters: { log: (fields) => (fields instanceof URL ? { url: urlsAsText(fields) } : urlsAsText(fields)) },
      // Field names cover what we log on purpose; a text can still quote a token (an agent
      // printing its own curl line, an error's message or stack, a child logger's bindings, a
      // `%o` argument), so the finished line is scrubbed, in one pass, before it is written:
      // JSON escaping leaves a token's characters as they are, and the pretty format is made
      // from this line.
      hooks: { streamWrite: scrubTokens },
    },
    out,
  );
}

export type { Logger };
