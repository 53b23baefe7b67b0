import { pino, type DestinationStream, type Logger } from 'pino';

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
  'headers.authorization',
  'headers.cookie',
  'req.headers.authorization',
  'req.headers.cookie',
  '*.authorization',
  '*.token',
  '*.adminToken',
  '*.admin_token',
  '*.secret',
  '*.*.token',
  '*.*.secret',
];

/** A JWT (our agent, launch and spawner tokens) anywhere in a text. */
const JWT = /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}/g;

/** Text that may quote a token (an agent's own output, an error message): tokens cut out. */
export function scrubTokens(text: string): string {
  return text.replace(JWT, '[redacted-token]');
}

/** Logs of the process itself (not events) go to stderr through pino, or to `destination`. */
export function createLogger(level: string = process.env.BEIDOU_LOG_LEVEL ?? 'info', destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { name: 'beidou' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      // Field names cover what we log on purpose; a message text can still quote a token
      // (an agent printing its own curl line), so tokens are cut out of message strings too.
      hooks: {
        logMethod(args, method) {
          method.apply(this, args.map((a) => (typeof a === 'string' ? scrubTokens(a) : a)) as Parameters<typeof method>);
        },
      },
    },
    destination ?? pino.destination({ fd: 2, sync: false }),
  );
}

export type { Logger };
