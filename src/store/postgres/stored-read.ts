import type pg from 'pg';
import type { StoredEvent } from '../../events/catalogue.js';
import { clientConfig } from './connect.js';

/**
 * Pages of stored events read from the `events` table (an archived task, a live task's
 * events older than its window), on connections of their own: never on the log's, which
 * carries the commits and the lease renewal, so a large read delays neither. A page stops
 * at `limit` rows and at `maxBytes` of JSON (summed in SQL, so rows past it never leave the
 * database), but always holds its first row (`through` is then its own length).
 */

/** How `pg_stat_activity` names these connections. */
const READ_APPLICATION = 'beidou-log-read';
/** Concurrent older-event reads (admin pages and streams); more wait for a connection. */
const READ_CONNECTIONS = 2;

export class StoredReader {
  private pool: pg.Pool | null = null;

  constructor(private readonly url: string) {}

  /** Events of `taskId` with `since < seq <= upTo` (`upTo` null: no bound), in seq order. */
  async page(
    taskId: string,
    since: number,
    upTo: number | null,
    limit: number,
    maxBytes: number,
  ): Promise<StoredEvent[]> {
    const pool = await this.connect();
    const { rows } = await pool.query<{ body: string }>(
      `SELECT body FROM (
         SELECT seq, body::text AS body, sum(octet_length(body::text)) OVER (ORDER BY seq) AS through
         FROM events WHERE task_id = $1 AND seq > $2 AND ($3::bigint IS NULL OR seq <= $3) ORDER BY seq LIMIT $4
       ) page WHERE through <= $5 OR through = octet_length(body) ORDER BY seq`,
      [taskId, since, upTo, limit, maxBytes],
    );
    return rows.map((r) => JSON.parse(r.body) as StoredEvent);
  }

  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = null;
    await pool?.end().catch(() => undefined);
  }

  private async connect(): Promise<pg.Pool> {
    if (this.pool) return this.pool;
    const { default: driver } = await import('pg');
    this.pool ??= new driver.Pool({ ...clientConfig(this.url, READ_APPLICATION), max: READ_CONNECTIONS });
    // An idle connection that drops is replaced at the next read; unhandled, its error would end the process.
    this.pool.on('error', () => undefined);
    return this.pool;
  }
}
