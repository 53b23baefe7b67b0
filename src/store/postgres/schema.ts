import type pg from 'pg';

/**
 * The PostgreSQL store's schema, as numbered migrations applied on start. One list for the
 * whole database (event log, rollups, plans), so versions are totally ordered. Each
 * migration runs in a transaction of its own with its row in `schema_migrations`, so it is
 * applied whole or not at all; an advisory lock makes concurrent starts take turns, and
 * the second finds nothing left to do. A database migrated by a newer beidou is refused
 * rather than written with an older idea of its tables.
 *
 * A migration, once released, is never edited: a change is a new migration.
 */

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'event log',
    sql: `
      -- Every event, keyed by (task_id, seq): the key itself fences writers, so two servers
      -- can never both commit seq N of a task. body is the event's JSON exactly as served
      -- (json keeps the text as written, escapes such as \\u0000 included, where jsonb
      -- would refuse some of them); query it with body->>'field'.
      CREATE TABLE events (
        task_id text NOT NULL,
        seq integer NOT NULL CHECK (seq > 0),
        ts double precision NOT NULL,
        event text NOT NULL,
        body json NOT NULL,
        PRIMARY KEY (task_id, seq)
      );
      -- One row per task, written with its first event: where a start finds every task.
      CREATE TABLE log_tasks (
        task_id text PRIMARY KEY,
        created_ts double precision NOT NULL
      );
      -- The writer's epoch: a start bumps it, and every commit checks it in its own
      -- statement, holding the row, so a server whose database was opened by another
      -- since cannot append (replicas will keep their lease in this row).
      CREATE TABLE log_writer (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        epoch bigint NOT NULL,
        opened_at timestamptz
      );
      INSERT INTO log_writer (epoch) VALUES (0);
    `,
  },
  {
    version: 2,
    name: 'rollups',
    sql: `
      -- The same four tables as the embedded stats.db, derived from the registry state.
      CREATE TABLE tasks (
        task_id text PRIMARY KEY, name text, text text NOT NULL, status text NOT NULL,
        root_agent_id text NOT NULL, created_at double precision NOT NULL, ended_at double precision,
        agent_count integer NOT NULL, team_count integer NOT NULL, event_count integer NOT NULL,
        input_tokens bigint NOT NULL, output_tokens bigint NOT NULL, cost_usd double precision NOT NULL
      );
      CREATE TABLE teams (
        team_id text PRIMARY KEY, task_id text NOT NULL, name text NOT NULL, leader_id text NOT NULL,
        parent_team_id text, depth integer NOT NULL, member_count integer NOT NULL, created_at double precision NOT NULL
      );
      CREATE TABLE agents (
        agent_id text PRIMARY KEY, task_id text NOT NULL, team_id text, name text NOT NULL, role text,
        skill text NOT NULL, model text, leader_id text NOT NULL, status text NOT NULL,
        created_at double precision NOT NULL, terminated_at double precision,
        input_tokens bigint NOT NULL, output_tokens bigint NOT NULL, cost_usd double precision NOT NULL,
        tool_calls integer NOT NULL, llm_calls integer NOT NULL,
        messages_sent integer NOT NULL, messages_delivered integer NOT NULL, inbox_depth integer NOT NULL
      );
      CREATE TABLE questions (
        qid text PRIMARY KEY, task_id text NOT NULL, asker_agent_id text NOT NULL, holder text,
        status text NOT NULL, prompt text NOT NULL, created_at double precision NOT NULL, answered_at double precision
      );
      CREATE INDEX agents_by_task ON agents(task_id);
      CREATE INDEX teams_by_task ON teams(task_id);
      CREATE INDEX questions_by_task ON questions(task_id);
    `,
  },
  {
    version: 3,
    name: 'plans',
    sql: `
      -- declare_plan's readable copy of a plan (the plan_declared event is the truth),
      -- in the database rather than on one replica's disk.
      CREATE TABLE plans (
        task_id text NOT NULL,
        plan_id text NOT NULL,
        owner_agent_id text NOT NULL,
        body json NOT NULL,
        created_at double precision NOT NULL,
        removed_at double precision,
        PRIMARY KEY (task_id, plan_id)
      );
    `,
  },
  {
    version: 4,
    name: 'lease',
    sql: `
      -- The writer row becomes the lease of the one active replica: who holds it (a name
      -- of the replica, also in its connections' application_name), the backend pid of its
      -- log connection, and until when. The active renews expires_at; every commit checks
      -- epoch and expiry in its own statement; a standby takes over only once the lease has
      -- expired (or its holder's log connection is gone), ending the holder's connections
      -- and bumping the epoch.
      ALTER TABLE log_writer
        ADD COLUMN holder text,
        ADD COLUMN holder_pid integer,
        ADD COLUMN expires_at timestamptz;
    `,
  },
  {
    version: 5,
    name: 'archive index',
    sql: `
      -- Ended tasks unloaded from memory: what a start needs of them without replaying
      -- their events (the same rows as archived_tasks in the embedded stats.db). last_seq is
      -- checked against events at start: an entry that no longer matches is replayed.
      CREATE TABLE archived_tasks (
        task_id text PRIMARY KEY, last_seq integer NOT NULL, bytes bigint, status text NOT NULL,
        created_at double precision NOT NULL, ended_at double precision, archived_at double precision NOT NULL,
        agents_total integer NOT NULL, agents_live integer NOT NULL, cost_usd double precision NOT NULL, record text NOT NULL
      );
    `,
  },
  {
    version: 6,
    name: 'log position',
    sql: `
      -- Where each event sits in the order commits landed, across tasks: a standby follows
      -- the log by it (LISTEN beidou_events, then the rows past the last position it
      -- applied). One writer at a time (the lease's fence, held by every commit) makes the
      -- order of positions the order of commits, so no row can land below one already read.
      ALTER TABLE events ADD COLUMN pos bigserial;
      CREATE INDEX events_by_pos ON events (pos);
    `,
  },
];

/** Advisory lock keys: one namespace ('beid'), one key per purpose. */
export const LOCK_NAMESPACE = 0x62656964;
export const MIGRATION_LOCK = 1;
export const WRITER_LOCK = 2;

export class SchemaTooNewError extends Error {
  constructor(
    readonly found: number,
    readonly known: number,
  ) {
    super(
      `the database's schema is at version ${found}, newer than this beidou knows (${known}): run a beidou at least as new as the one that migrated it`,
    );
  }
}

export class MigrationError extends Error {
  constructor(
    readonly migration: Migration,
    cause: unknown,
  ) {
    super(
      `schema migration ${migration.version} (${migration.name}) failed and was rolled back: ${(cause as Error)?.message ?? String(cause)}`,
    );
  }
}

export interface MigrationReport {
  /** Versions applied by this call, in order (empty when the database was up to date). */
  applied: number[];
  /** The schema version now. */
  version: number;
}

/** Brings the database's schema up to date; safe to call from several starts at once. */
export async function migrate(
  client: pg.ClientBase,
  migrations: readonly Migration[] = MIGRATIONS,
): Promise<MigrationReport> {
  const ordered = [...migrations].sort((a, b) => a.version - b.version);
  const known = ordered.at(-1)?.version ?? 0;
  await client.query('SELECT pg_advisory_lock($1, $2)', [LOCK_NAMESPACE, MIGRATION_LOCK]);
  try {
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version');
    const done = new Set(rows.map((r) => r.version));
    const found = rows.at(-1)?.version ?? 0;
    if (found > known) throw new SchemaTooNewError(found, known);
    const applied: number[] = [];
    for (const m of ordered) {
      if (done.has(m.version)) continue;
      try {
        await client.query('BEGIN');
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw new MigrationError(m, err);
      }
      applied.push(m.version);
    }
    return { applied, version: Math.max(found, known) };
  } finally {
    await client.query('SELECT pg_advisory_unlock($1, $2)', [LOCK_NAMESPACE, MIGRATION_LOCK]).catch(() => undefined);
  }
}
