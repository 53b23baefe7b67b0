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

/** A JWT (our agent, launch and spawner tokens) anywhere in a text. */
const JWT = /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}/g;

/** Text that may quote a token (an agent's own output, an error message): tokens cut out. */
export function scrubTokens(text: string): string {
  return text.replace(JWT, '[redacted-token]');
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
      // Field names cover what we log on purpose; a message text can still quote a token
      // (an agent printing its own curl line), so tokens are cut out of message strings too.
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
