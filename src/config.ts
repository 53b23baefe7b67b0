import { accessSync, chmodSync, constants, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';

/**
 * The one place where flags and environment become a validated Config and where every
 * default lives. Precedence: flag, then environment, then default.
 */

const portSchema = z.coerce
  .number({ error: 'must be a number' })
  .int('must be an integer')
  .min(0, 'must be between 0 and 65535')
  .max(65535, 'must be between 0 and 65535');

const seconds = (fallback: number) =>
  z.coerce.number({ error: 'must be a number of seconds' }).positive('must be positive').default(fallback);

const count = (fallback: number) =>
  z.coerce
    .number({ error: 'must be a number' })
    .int('must be an integer')
    .positive('must be positive')
    .default(fallback);

const configSchema = z.object({
  host: z.string().min(1, 'must not be empty').default('127.0.0.1'),
  port: portSchema.default(7777),
  home: z.string().min(1, 'must not be empty'),
  adminToken: z.string().min(16, 'must be at least 16 characters').optional(),
  secret: z.string().min(32, 'must be at least 32 characters').optional(),
  /** The PostgreSQL store; unset: the embedded one (JSONL files and SQLite in the home). */
  databaseUrl: z
    .string()
    .regex(/^postgres(ql)?:\/\/[^\s]+$/, 'must be a postgres:// (or postgresql://) URL')
    .optional(),
  /** With a database URL: the lease of the active replica, in seconds (renewed every third of it). */
  leaseS: seconds(3),
  inboxCap: count(1000),
  inboxMaxChars: count(64 * 1024 * 1024),
  maxDepth: count(8),
  depthWarning: count(6),
  watchdogS: seconds(30),
  reviewPingS: seconds(60),
  idleNudgeS: seconds(120),
  terminateGraceS: seconds(60),
  spawnerHeartbeatS: seconds(5),
  progressS: seconds(15),
  sessionIdleS: seconds(30 * 60),
  tokenTtlS: seconds(30 * 24 * 3600),
  /** How long an ended task stays in memory before it is unloaded (read from the store when asked for). */
  archiveAfterS: seconds(600),
  // Limits (hostile input and overload): see docs/security.md.
  bodyTimeoutS: seconds(30),
  maxConnections: count(10_000),
  maxSessionsPerAgent: count(16),
  maxAdminStreams: count(64),
  maxAgentsPerTask: count(1000),
  maxPlanTasks: count(1000),
  maxTeamsPerLeader: count(100),
  /** ask_user questions one agent may have pending at once (docs/security.md). */
  maxPendingQuestionsPerAgent: count(20),
  maxContentChars: count(200_000),
  /** The most agents one spawner token may run, its instances together (`--max-agents`); more is refused, `limit_exceeded`. */
  maxAgentsPerSpawner: z.coerce
    .number({ error: 'must be a number' })
    .int('must be an integer')
    .positive('must be positive')
    .max(10_000, 'must be at most 10000 (the protocol bound)')
    .default(1000),
  /** Bytes of events one agent's calls may add to the log per minute, on each replica (docs/security.md). */
  maxWriteBytesPerMinute: count(16 * 1024 * 1024),
  /** A live task's newest events held in memory by the log (older ones are read from the store), by count and by bytes. */
  liveEventsInMemory: count(10_000),
  liveEventBytesInMemory: count(32 * 1024 * 1024),
  /** MCP stream resumability: how long a dropped stream's events (and its calls) wait, and the per-session bounds. */
  resumeS: seconds(60),
  resumeMaxEvents: count(500),
  resumeMaxBytes: count(1024 * 1024),
  /** Host names accepted in `Host` (and `Origin`) when bound off loopback; empty: no check. */
  allowedHosts: z.array(z.string()).default([]),
  /** Bound off loopback without `allowedHosts`: start anyway, checking no name (else the start is refused). */
  allowAnyHost: z
    .union([z.boolean(), z.enum(['1', 'true', '0', 'false'])], { error: 'must be 1 or 0' })
    .transform((v) => v === true || v === '1' || v === 'true')
    .default(false),
  skillsRoots: z.array(z.string()).default([]),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = z.infer<typeof configSchema>;

/** Names as a person types them, for the one-line error. */
const SOURCE_NAMES: Record<string, string> = {
  host: '--host / BEIDOU_HOST',
  port: '--port / BEIDOU_PORT',
  home: '--home / BEIDOU_HOME',
  adminToken: 'BEIDOU_ADMIN_TOKEN',
  secret: 'BEIDOU_SECRET',
  databaseUrl: '--database-url / BEIDOU_DATABASE_URL',
  leaseS: 'BEIDOU_LEASE_S',
  inboxCap: 'BEIDOU_INBOX_CAP',
  inboxMaxChars: 'BEIDOU_INBOX_MAX_CHARS',
  maxDepth: 'BEIDOU_MAX_DEPTH',
  watchdogS: 'BEIDOU_WATCHDOG_S',
  reviewPingS: 'BEIDOU_REVIEW_PING_S',
  idleNudgeS: 'BEIDOU_IDLE_NUDGE_S',
  terminateGraceS: 'BEIDOU_TERMINATE_GRACE_S',
  spawnerHeartbeatS: 'BEIDOU_SPAWNER_HEARTBEAT_S',
  progressS: 'BEIDOU_PROGRESS_S',
  sessionIdleS: 'BEIDOU_SESSION_IDLE_S',
  tokenTtlS: 'BEIDOU_TOKEN_TTL_S',
  archiveAfterS: 'BEIDOU_ARCHIVE_AFTER_S',
  logLevel: 'BEIDOU_LOG_LEVEL',
  bodyTimeoutS: 'BEIDOU_BODY_TIMEOUT_S',
  maxConnections: 'BEIDOU_MAX_CONNECTIONS',
  maxSessionsPerAgent: 'BEIDOU_MAX_SESSIONS_PER_AGENT',
  maxAdminStreams: 'BEIDOU_MAX_ADMIN_STREAMS',
  maxAgentsPerTask: 'BEIDOU_MAX_AGENTS_PER_TASK',
  maxPlanTasks: 'BEIDOU_MAX_PLAN_TASKS',
  maxTeamsPerLeader: 'BEIDOU_MAX_TEAMS_PER_LEADER',
  maxPendingQuestionsPerAgent: 'BEIDOU_MAX_PENDING_QUESTIONS_PER_AGENT',
  maxContentChars: 'BEIDOU_MAX_CONTENT_CHARS',
  maxAgentsPerSpawner: 'BEIDOU_MAX_AGENTS_PER_SPAWNER',
  maxWriteBytesPerMinute: 'BEIDOU_MAX_WRITE_BYTES_PER_MINUTE',
  liveEventsInMemory: 'BEIDOU_LIVE_EVENTS_IN_MEMORY',
  liveEventBytesInMemory: 'BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY',
  resumeS: 'BEIDOU_RESUME_S',
  resumeMaxEvents: 'BEIDOU_RESUME_MAX_EVENTS',
  resumeMaxBytes: 'BEIDOU_RESUME_MAX_BYTES',
  allowedHosts: 'BEIDOU_ALLOWED_HOSTS',
  allowAnyHost: '--allow-any-host / BEIDOU_ALLOW_ANY_HOST',
};

/** The environment variable behind a config key, for `details.setting` in refusals. */
export function settingName(key: keyof Config): string {
  return (SOURCE_NAMES[key] ?? key).replace(/^--\S+ \/ /, '');
}

export class ConfigError extends Error {}

const SECRET_KEYS = new Set(['adminToken', 'secret', 'databaseUrl']);

export interface ConfigFlags {
  host?: string;
  port?: string;
  home?: string;
  databaseUrl?: string;
  allowAnyHost?: boolean;
}

export function defaultHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.BEIDOU_HOME && env.BEIDOU_HOME.length > 0 ? env.BEIDOU_HOME : path.join(os.homedir(), '.beidou');
}

const emptyToUndefined = (v: string | undefined) => (v === undefined || v === '' ? undefined : v);

/** Parse and validate; throws ConfigError with one human line naming the bad setting. */
export function loadConfig(flags: ConfigFlags = {}, env: NodeJS.ProcessEnv = process.env): Config {
  const raw = {
    host: flags.host ?? emptyToUndefined(env.BEIDOU_HOST),
    port: flags.port ?? emptyToUndefined(env.BEIDOU_PORT),
    home: path.resolve(flags.home ?? defaultHome(env)),
    adminToken: emptyToUndefined(env.BEIDOU_ADMIN_TOKEN),
    secret: emptyToUndefined(env.BEIDOU_SECRET),
    databaseUrl: flags.databaseUrl ?? emptyToUndefined(env.BEIDOU_DATABASE_URL),
    leaseS: emptyToUndefined(env.BEIDOU_LEASE_S),
    inboxCap: emptyToUndefined(env.BEIDOU_INBOX_CAP),
    inboxMaxChars: emptyToUndefined(env.BEIDOU_INBOX_MAX_CHARS),
    maxDepth: emptyToUndefined(env.BEIDOU_MAX_DEPTH),
    watchdogS: emptyToUndefined(env.BEIDOU_WATCHDOG_S),
    reviewPingS: emptyToUndefined(env.BEIDOU_REVIEW_PING_S),
    idleNudgeS: emptyToUndefined(env.BEIDOU_IDLE_NUDGE_S),
    terminateGraceS: emptyToUndefined(env.BEIDOU_TERMINATE_GRACE_S),
    spawnerHeartbeatS: emptyToUndefined(env.BEIDOU_SPAWNER_HEARTBEAT_S),
    progressS: emptyToUndefined(env.BEIDOU_PROGRESS_S),
    sessionIdleS: emptyToUndefined(env.BEIDOU_SESSION_IDLE_S),
    tokenTtlS: emptyToUndefined(env.BEIDOU_TOKEN_TTL_S),
    archiveAfterS: emptyToUndefined(env.BEIDOU_ARCHIVE_AFTER_S),
    bodyTimeoutS: emptyToUndefined(env.BEIDOU_BODY_TIMEOUT_S),
    maxConnections: emptyToUndefined(env.BEIDOU_MAX_CONNECTIONS),
    maxSessionsPerAgent: emptyToUndefined(env.BEIDOU_MAX_SESSIONS_PER_AGENT),
    maxAdminStreams: emptyToUndefined(env.BEIDOU_MAX_ADMIN_STREAMS),
    maxAgentsPerTask: emptyToUndefined(env.BEIDOU_MAX_AGENTS_PER_TASK),
    maxPlanTasks: emptyToUndefined(env.BEIDOU_MAX_PLAN_TASKS),
    maxTeamsPerLeader: emptyToUndefined(env.BEIDOU_MAX_TEAMS_PER_LEADER),
    maxPendingQuestionsPerAgent: emptyToUndefined(env.BEIDOU_MAX_PENDING_QUESTIONS_PER_AGENT),
    maxContentChars: emptyToUndefined(env.BEIDOU_MAX_CONTENT_CHARS),
    maxAgentsPerSpawner: emptyToUndefined(env.BEIDOU_MAX_AGENTS_PER_SPAWNER),
    maxWriteBytesPerMinute: emptyToUndefined(env.BEIDOU_MAX_WRITE_BYTES_PER_MINUTE),
    liveEventsInMemory: emptyToUndefined(env.BEIDOU_LIVE_EVENTS_IN_MEMORY),
    liveEventBytesInMemory: emptyToUndefined(env.BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY),
    resumeS: emptyToUndefined(env.BEIDOU_RESUME_S),
    resumeMaxEvents: emptyToUndefined(env.BEIDOU_RESUME_MAX_EVENTS),
    resumeMaxBytes: emptyToUndefined(env.BEIDOU_RESUME_MAX_BYTES),
    allowedHosts: (emptyToUndefined(env.BEIDOU_ALLOWED_HOSTS) ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter((h) => h.length > 0),
    allowAnyHost: flags.allowAnyHost === true ? true : emptyToUndefined(env.BEIDOU_ALLOW_ANY_HOST),
    skillsRoots: (emptyToUndefined(env.BEIDOU_SKILLS) ?? '').split(path.delimiter).filter((s) => s.length > 0),
    logLevel: emptyToUndefined(env.BEIDOU_LOG_LEVEL),
  };
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = String(issue.path[0] ?? '');
    const shown = (raw as Record<string, unknown>)[key];
    // Credentials are never echoed (a database URL may carry a password).
    const value = typeof shown === 'string' && !SECRET_KEYS.has(key) ? ` (got "${shown}")` : '';
    throw new ConfigError(`invalid ${SOURCE_NAMES[key] ?? key}: ${issue.message}${value}`);
  }
  return parsed.data;
}

/** What prepareHome changed: the mode an existing home had before it was set to 0700 (null: nothing). */
export interface PreparedHome {
  tightenedFrom: number | null;
  /** The home is wider than 0700 and could not be changed (not ours): why. */
  couldNotTighten: string | null;
}

/**
 * Create the home and prove it writable, so a bad home fails at start and not mid-run. The
 * home is the server's alone (0700: its event logs, plans and keys are no other local
 * user's, an agent's included): created so, and an existing one that others may enter is
 * set to 0700, which the caller says in its log.
 */
export function prepareHome(home: string): PreparedHome {
  const prepared: PreparedHome = { tightenedFrom: null, couldNotTighten: null };
  try {
    mkdirSync(home, { recursive: true, mode: 0o700 });
    const mode = statSync(home).mode & 0o777;
    if ((mode & 0o077) !== 0) {
      try {
        chmodSync(home, 0o700);
        prepared.tightenedFrom = mode;
      } catch (err) {
        prepared.couldNotTighten = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      }
    }
    mkdirSync(path.join(home, 'events'), { recursive: true, mode: 0o700 });
    mkdirSync(path.join(home, 'plans'), { recursive: true, mode: 0o700 });
    accessSync(home, constants.W_OK);
    const probe = path.join(home, `.write-probe-${process.pid}`);
    writeFileSync(probe, '');
    rmSync(probe);
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new ConfigError(`home ${home} is not writable (${reason})`);
  }
  return prepared;
}

export const homePaths = (home: string) => ({
  events: path.join(home, 'events'),
  plans: path.join(home, 'plans'),
  statsDb: path.join(home, 'stats.db'),
  secret: path.join(home, 'secret'),
  adminToken: path.join(home, 'admin.token'),
  skills: path.join(home, 'skills'),
  workspaces: path.join(home, 'workspaces'),
  lock: path.join(home, 'lock.db'),
  lockPid: path.join(home, 'lock.pid'),
});
