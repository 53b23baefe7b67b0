import { createRequire } from 'node:module';
import { pino, type DestinationStream, type Logger } from 'pino';
import type pinoPrettyModule from 'pino-pretty';

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

/** The characters of a JWT's three parts (base64url): `[A-Za-z0-9_-]`. */
function isTokenChar(c: number): boolean {
  return (
    (c >= 97 && c <= 122) || // a-z
    (c >= 65 && c <= 90) || // A-Z
    (c >= 48 && c <= 57) || // 0-9
    c === 95 || // _
    c === 45 // -
  );
}

/** Where the run of token characters starting at `from` ends. */
function runEnd(text: string, from: number): number {
  let i = from;
  while (i < text.length && isTokenChar(text.charCodeAt(i))) i++;
  return i;
}

const DOT = 46;
/** Each of a JWT's parts has at least this many characters (the header's after its `eyJ`). */
const MIN_PART = 4;

/**
 * Text that may quote a token (an agent's own output, an error message): every JWT (our
 * agent, launch and spawner tokens) cut out. What it cuts is what the pattern
 * `eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}` matches, found by a scan
 * rather than that regular expression: its backtracking made a run of `eyJeyJ…` (an
 * agent's hostile output) quadratic, seconds for a few hundred kilobytes; the scan reads
 * each character a bounded number of times (at most three: as the header, the payload,
 * then the signature of a candidate).
 */
export function scrubTokens(text: string): string {
  let at = text.indexOf('eyJ');
  if (at === -1) return text;
  let out = '';
  let copied = 0;
  while (at !== -1) {
    // Greedy like the pattern: each part is a whole run of token characters, the first
    // from its leftmost `eyJ` (a later `eyJ` in the same run has fewer characters after it).
    const headerEnd = runEnd(text, at + 3);
    let end = -1;
    if (headerEnd - at - 3 >= MIN_PART && text.charCodeAt(headerEnd) === DOT) {
      const payloadEnd = runEnd(text, headerEnd + 1);
      if (payloadEnd - headerEnd - 1 >= MIN_PART && text.charCodeAt(payloadEnd) === DOT) {
        const signatureEnd = runEnd(text, payloadEnd + 1);
        if (signatureEnd - payloadEnd - 1 >= MIN_PART) end = signatureEnd;
      }
    }
    if (end === -1) {
      // No token starts in this run: the next may start in the payload (after the dot).
      at = text.indexOf('eyJ', headerEnd);
      continue;
    }
    out += `${text.slice(copied, at)}[redacted-token]`;
    copied = end;
    at = text.indexOf('eyJ', end);
  }
  return out + text.slice(copied);
}

/** Nested fields scrubbed down to this depth (what we log is shallow; the rest is left as it is). */
const SCRUB_DEPTH = 3;

/**
 * A log line's fields with tokens cut out of their strings (an agent's invalid event line,
 * an error's text), copied only where something changed.
 */
export function scrubFields<T>(value: T, depth = SCRUB_DEPTH): T {
  if (typeof value === 'string') return scrubTokens(value) as T;
  if (depth === 0 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    let copy: unknown[] | null = null;
    value.forEach((item, i) => {
      const scrubbed = scrubFields(item, depth - 1);
      if (scrubbed !== item) (copy ??= [...value])[i] = scrubbed;
    });
    return (copy ?? value) as T;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype) return value;
  let copy: Record<string, unknown> | null = null;
  for (const [key, item] of Object.entries(value)) {
    const scrubbed = scrubFields(item, depth - 1);
    if (scrubbed !== item) (copy ??= { ...(value as Record<string, unknown>) })[key] = scrubbed;
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
      // Field names cover what we log on purpose; a message text or a field's text can still
      // quote a token (an agent printing its own curl line, an invalid event line it printed),
      // so tokens are cut out of message strings and of the fields' strings too.
      formatters: { log: (fields) => scrubFields(fields) },
      hooks: {
        logMethod(args, method) {
          method.apply(
            this,
            args.map((a) => (typeof a === 'string' ? scrubTokens(a) : a)) as Parameters<typeof method>,
          );
        },
      },
    },
    out,
  );
}

export type { Logger };
