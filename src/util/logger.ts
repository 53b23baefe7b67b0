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

/** Logs of the process itself (not events) go to stderr through pino, or to `destination`. */
export function createLogger(level: string = process.env.BEIDOU_LOG_LEVEL ?? 'info', destination?: DestinationStream): Logger {
  return pino(
    { level, base: { name: 'beidou' }, redact: { paths: REDACT_PATHS, censor: '[redacted]' } },
    destination ?? pino.destination({ fd: 2, sync: false }),
  );
}

export type { Logger };
