import { pino, type Logger } from 'pino';

/** Logs of the process itself (not events) go to stderr through pino. */
export function createLogger(level: string = process.env.BEIDOU_LOG_LEVEL ?? 'info'): Logger {
  return pino({ level, base: { name: 'beidou' } }, pino.destination({ fd: 2, sync: false }));
}

export type { Logger };
