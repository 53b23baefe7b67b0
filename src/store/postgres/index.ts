import type { Clock } from '../../util/clock.js';
import type { LiveMemory } from '../recent-window.js';
import { clientConfig, describeDatabaseUrl, DatabaseUnreachableError, SIDE_APPLICATION } from './connect.js';
import type { LeaseOptions } from './lease.js';
import { PgEventLog } from './log.js';
import { migrate, type MigrationReport } from './schema.js';
import { PgArchiveIndex } from './archive-index.js';
import { PgPlanStore } from './plans.js';
import { PgRollups } from './rollups.js';
import type { RegistryState } from '../../registry/state.js';

/**
 * The PostgreSQL store (`openStore` with a database URL, which alone loads this module):
 * events, rollups and plans in one database, its schema migrated first. Typed by what it
 * returns; `openStore` checks that against `Store`.
 */
export async function openPgStore(url: string, clock: Clock, lease: LeaseOptions, memory: LiveMemory) {
  // Rollups and plans share a small pool; the log has a connection of its own. The driver is
  // loaded here, not at import: the embedded store never needs it.
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ ...clientConfig(url, SIDE_APPLICATION), max: 2 });
  // An idle connection that drops is replaced by the pool; unhandled, its error would end the process.
  pool.on('error', () => undefined);
  let migrations: MigrationReport;
  try {
    const client = await pool.connect().catch((err: unknown) => {
      throw new DatabaseUnreachableError(url, err);
    });
    try {
      migrations = await migrate(client);
    } finally {
      client.release();
    }
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw err;
  }
  return {
    kind: 'postgres' as const,
    where: describeDatabaseUrl(url),
    log: new PgEventLog(url, clock, lease, memory),
    plans: new PgPlanStore(pool, clock),
    archive: () => new PgArchiveIndex(pool),
    rollups: (state: RegistryState, onError?: (err: unknown) => void) => new PgRollups(pool, state, onError),
    migrations,
    // `rebuild({ replace: true })` empties the rollup tables in its own transaction: nothing to drop first.
    discardDerived: async () => undefined,
    close: () => pool.end(),
  };
}
