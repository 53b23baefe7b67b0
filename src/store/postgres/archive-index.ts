import type pg from 'pg';
import {
  ARCHIVE_LOAD_COLUMNS,
  archiveRow,
  fromArchiveColumns,
  type ArchivedTask,
  type ArchiveIndex,
} from '../../registry/archive.js';

/** Rows per statement when many entries are written at once. */
const CHUNK = 2_000;

const UPSERT = `INSERT INTO archived_tasks SELECT * FROM json_populate_recordset(NULL::archived_tasks, $1::json)
  ON CONFLICT (task_id) DO UPDATE SET (last_seq, bytes, status, created_at, ended_at, archived_at, agents_total, agents_live, cost_usd, record) =
  ROW(EXCLUDED.last_seq, EXCLUDED.bytes, EXCLUDED.status, EXCLUDED.created_at, EXCLUDED.ended_at, EXCLUDED.archived_at, EXCLUDED.agents_total, EXCLUDED.agents_live, EXCLUDED.cost_usd, EXCLUDED.record)`;

/** The archive index in PostgreSQL: table `archived_tasks` (migration 5), the same rows as in `stats.db`. */
export class PgArchiveIndex implements ArchiveIndex {
  constructor(private readonly pool: pg.Pool) {}

  async load(): Promise<ArchivedTask[]> {
    const { rows } = await this.pool.query<unknown[]>({
      text: `SELECT ${ARCHIVE_LOAD_COLUMNS} FROM archived_tasks`,
      rowMode: 'array',
    });
    return rows.map(fromArchiveColumns);
  }

  async put(entries: readonly ArchivedTask[]): Promise<void> {
    for (let at = 0; at < entries.length; at += CHUNK) {
      await this.pool.query(UPSERT, [JSON.stringify(entries.slice(at, at + CHUNK).map(archiveRow))]);
    }
    // Standbys following the log unload these tasks too.
    if (entries.length > 0) await this.pool.query("SELECT pg_notify('beidou_archive', '')");
  }

  async remove(taskIds: readonly string[]): Promise<void> {
    if (taskIds.length > 0)
      await this.pool.query('DELETE FROM archived_tasks WHERE task_id = ANY($1::text[])', [taskIds]);
  }

  async replaceAll(entries: readonly ArchivedTask[]): Promise<void> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('DELETE FROM archived_tasks');
      for (let at = 0; at < entries.length; at += CHUNK) {
        await client.query(UPSERT, [JSON.stringify(entries.slice(at, at + CHUNK).map(archiveRow))]);
      }
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  async loadFor(taskIds: readonly string[]): Promise<ArchivedTask[]> {
    if (taskIds.length === 0) return [];
    const { rows } = await this.pool.query<unknown[]>({
      text: `SELECT ${ARCHIVE_LOAD_COLUMNS} FROM archived_tasks WHERE task_id = ANY($1::text[])`,
      values: [taskIds],
      rowMode: 'array',
    });
    return rows.map(fromArchiveColumns);
  }

  async close(): Promise<void> {}
}
