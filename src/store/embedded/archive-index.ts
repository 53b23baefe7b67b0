import Database from 'better-sqlite3';
import {
  ARCHIVE_LOAD_COLUMNS,
  archiveRow,
  fromArchiveColumns,
  type ArchivedTask,
  type ArchiveIndex,
} from '../../registry/archive.js';
import { ensurePrivateFile } from '../../util/durable-file.js';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS archived_tasks (
  task_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, bytes INTEGER, status TEXT NOT NULL,
  created_at REAL NOT NULL, ended_at REAL, archived_at REAL NOT NULL,
  agents_total INTEGER NOT NULL, agents_live INTEGER NOT NULL, cost_usd REAL NOT NULL, record TEXT NOT NULL
);
`;

/**
 * The archive index on one machine: a table of the rollups' `stats.db`. Like the rollups
 * it is derived (from the logs, by `beidou stats rebuild`); unlike them a start trusts it,
 * entry by entry, only where it matches the file it describes. A missing `stats.db` is an
 * empty index: the start replays everything and the archiver fills it again.
 */
export class SqliteArchiveIndex implements ArchiveIndex {
  private readonly db: Database.Database;
  private readonly upsert: Database.Statement;

  constructor(file: string) {
    ensurePrivateFile(file);
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec(SCHEMA);
    this.upsert = this.db.prepare(
      `INSERT OR REPLACE INTO archived_tasks VALUES (@task_id, @last_seq, @bytes, @status, @created_at, @ended_at, @archived_at, @agents_total, @agents_live, @cost_usd, @record)`,
    );
  }

  async load(): Promise<ArchivedTask[]> {
    // Rows as arrays: no object per row just to be read once.
    return (this.db.prepare(`SELECT ${ARCHIVE_LOAD_COLUMNS} FROM archived_tasks`).raw().all() as unknown[][]).map(
      fromArchiveColumns,
    );
  }

  async loadFor(taskIds: readonly string[]): Promise<ArchivedTask[]> {
    const one = this.db.prepare(`SELECT ${ARCHIVE_LOAD_COLUMNS} FROM archived_tasks WHERE task_id = ?`).raw();
    return taskIds.flatMap((id) => {
      const row = one.get(id) as unknown[] | undefined;
      return row ? [fromArchiveColumns(row)] : [];
    });
  }

  async put(entries: readonly ArchivedTask[]): Promise<void> {
    this.db.transaction(() => {
      for (const e of entries) this.upsert.run(archiveRow(e));
    })();
  }

  async remove(taskIds: readonly string[]): Promise<void> {
    const del = this.db.prepare('DELETE FROM archived_tasks WHERE task_id = ?');
    this.db.transaction(() => {
      for (const id of taskIds) del.run(id);
    })();
  }

  async replaceAll(entries: readonly ArchivedTask[]): Promise<void> {
    this.db.transaction(() => {
      this.db.exec('DELETE FROM archived_tasks');
      for (const e of entries) this.upsert.run(archiveRow(e));
    })();
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
