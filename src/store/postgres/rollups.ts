import type pg from 'pg';
import type { StoredEvent } from '../../events/catalogue.js';
import { agentRow, questionRow, taskRow, teamRow, TouchedRows, type RollupStore } from '../../registry/rollups.js';
import type { RegistryState } from '../../registry/state.js';

/**
 * The rollups in PostgreSQL: the same four tables as the embedded `stats.db` (created by
 * the schema migrations), the same rows from the same derivation, batched off the hot path
 * the same way (100 ms after the first change). A batch's rows are taken from the state at
 * once, then written by one statement (one round trip, one transaction) while the next
 * batch gathers; a batch that fails is retried with the next one and reported, never
 * allowed to stop the server.
 */

const BATCH_MS = 100;
/** Rows per table in one statement when everything is rewritten (a start, `beidou stats rebuild`). */
const REBUILD_CHUNK = 2_000;

const TABLES = {
  tasks: {
    key: 'task_id',
    columns: [
      'name',
      'text',
      'status',
      'root_agent_id',
      'created_at',
      'ended_at',
      'agent_count',
      'team_count',
      'event_count',
      'input_tokens',
      'output_tokens',
      'cost_usd',
    ],
  },
  teams: {
    key: 'team_id',
    columns: ['task_id', 'name', 'leader_id', 'parent_team_id', 'depth', 'member_count', 'created_at'],
  },
  agents: {
    key: 'agent_id',
    columns: [
      'task_id',
      'team_id',
      'name',
      'role',
      'skill',
      'model',
      'leader_id',
      'status',
      'created_at',
      'terminated_at',
      'input_tokens',
      'output_tokens',
      'cost_usd',
      'tool_calls',
      'llm_calls',
      'messages_sent',
      'messages_delivered',
      'inbox_depth',
    ],
  },
  questions: {
    key: 'qid',
    columns: ['task_id', 'asker_agent_id', 'holder', 'status', 'prompt', 'created_at', 'answered_at'],
  },
} as const;
type Table = keyof typeof TABLES;
const TABLE_NAMES = Object.keys(TABLES) as Table[];

/** Every row of a batch, per table, in one statement: each table's rows arrive as one JSON parameter. */
const UPSERT = `WITH ${TABLE_NAMES.map((name, i) => {
  const { key, columns } = TABLES[name];
  return `w_${name} AS (
    INSERT INTO ${name} SELECT * FROM json_populate_recordset(NULL::${name}, $${i + 1}::json)
    ON CONFLICT (${key}) DO UPDATE SET (${columns.join(', ')}) = ROW(${columns.map((c) => `EXCLUDED.${c}`).join(', ')})
  )`;
}).join(', ')} SELECT 1`;

type Rows = Record<Table, Array<Record<string, unknown>>>;

export class PgRollups implements RollupStore {
  private touched = new TouchedRows();
  private timer: NodeJS.Timeout | null = null;
  /** The write in flight: batches are written one at a time, in order. */
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private readonly pool: pg.Pool,
    private readonly state: RegistryState,
    /** Rollups are derived data: a failed write is reported, never allowed to stop the server. */
    private readonly onError: (err: unknown) => void = () => undefined,
  ) {}

  track(events: readonly StoredEvent[]): void {
    this.touched.add(events);
    if (!this.timer) {
      this.timer = setTimeout(() => void this.flush().catch((err: unknown) => this.onError(err)), BATCH_MS);
      this.timer.unref();
    }
  }

  /** Rewrites every row from the state, in one transaction. */
  async rebuild(options: { replace?: boolean } = {}): Promise<void> {
    this.touched.addAll(this.state);
    const { rows, ids } = this.take();
    await this.enqueue(ids, async () => {
      const client = await this.pool.connect();
      try {
        await client.query('BEGIN');
        // DELETE, not TRUNCATE: readers (a dashboard's SQL) keep seeing the old rows until the commit.
        if (options.replace) await client.query(`DELETE FROM ${TABLE_NAMES.join('; DELETE FROM ')}`);
        for (let at = 0; ; at += REBUILD_CHUNK) {
          const chunk = TABLE_NAMES.map((t) => rows[t].slice(at, at + REBUILD_CHUNK));
          if (chunk.every((c) => c.length === 0)) break;
          await client.query(UPSERT, chunk.map(json));
        }
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw err;
      } finally {
        client.release();
      }
    });
  }

  /** Writes the pending batch now (after the one in flight). */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.touched.size === 0) return this.writing;
    const { rows, ids } = this.take();
    return this.enqueue(ids, async () => {
      await this.pool.query(
        UPSERT,
        TABLE_NAMES.map((t) => json(rows[t])),
      );
    });
  }

  async close(): Promise<void> {
    await this.flush();
  }

  /** Drops the pending batch unwritten (a replica stepping down: its state may be ahead of the log). */
  async discard(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.touched = new TouchedRows();
    await this.writing;
  }

  /** The rows of everything touched, as they are now; the next batch starts empty. */
  private take(): { rows: Rows; ids: TouchedRows } {
    const touched = this.touched;
    this.touched = new TouchedRows();
    const rows: Rows = { tasks: [], teams: [], agents: [], questions: [] };
    const collect = (
      table: Table,
      ids: Set<string>,
      row: (state: RegistryState, id: string) => Record<string, unknown> | undefined,
    ) => {
      for (const id of ids) {
        const r = row(this.state, id);
        if (r) rows[table].push(r);
      }
    };
    collect('tasks', touched.tasks, taskRow);
    collect('teams', touched.teams, teamRow);
    collect('agents', touched.agents, agentRow);
    collect('questions', touched.questions, questionRow);
    return { rows, ids: touched };
  }

  /** Queues a write; if it fails, what it covered (`ids`) goes back into the next batch. */
  private enqueue(ids: TouchedRows, write: () => Promise<void>): Promise<void> {
    const done = this.writing.then(write).then(
      () => undefined,
      (err: unknown) => {
        this.touched.merge(ids);
        throw err;
      },
    );
    // The queue goes on after a failure; the caller of this write sees it.
    this.writing = done.catch(() => undefined);
    return done;
  }
}

/**
 * Rows as one JSON parameter. PostgreSQL text holds no U+0000 and JSON does not allow a
 * lone surrogate to become text, so both (which an agent's text may carry) become U+FFFD
 * here: the rollups are a view, the event log keeps the text exactly.
 */
function json(rows: Array<Record<string, unknown>>): string {
  return JSON.stringify(rows, (_key, value: unknown) => (typeof value === 'string' ? pgSafe(value) : value));
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: U+0000 is what PostgreSQL text cannot hold, so it is matched on purpose
const UNSAFE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

function pgSafe(text: string): string {
  return text.replace(UNSAFE, '\uFFFD');
}
