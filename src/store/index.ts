import { rmSync } from 'node:fs';
import type { Config, homePaths } from '../config.js';
import { JsonlEventLog } from './embedded/jsonl-log.js';
import type { EventLog } from '../events/event-log.js';
import type { LeaseOptions } from './postgres/lease.js';
import type { MigrationReport } from './postgres/schema.js';
import type { ArchiveIndex } from '../registry/archive.js';
import { SqliteArchiveIndex } from './embedded/archive-index.js';
import type { PlanStore } from '../registry/plan-store.js';
import { FilePlanStore } from './embedded/plans.js';
import type { RollupStore } from '../registry/rollups.js';
import { SqliteRollups } from './embedded/rollups.js';
import type { RegistryState } from '../registry/state.js';
import type { Clock } from '../util/clock.js';
import type { LiveMemory } from './recent-window.js';

/**
 * Where the server keeps its state: the embedded store (JSONL files, SQLite rollups and
 * plan files in the home), or PostgreSQL when a database URL is set (events, rollups and
 * plans in one database; the home keeps the admin token, the secret and the rest). The
 * rest of the server sees only the interfaces.
 */
export interface Store {
  kind: 'embedded' | 'postgres';
  /** Where, in words a log line may show (never a password). */
  where: string;
  log: EventLog;
  plans: PlanStore;
  /** The archive index: ended tasks out of memory (`stats.db`, or the database's `archived_tasks`). */
  archive(): ArchiveIndex;
  /** The rollups over a registry's state, once it is replayed. */
  rollups(state: RegistryState, onError?: (err: unknown) => void): RollupStore;
  /**
   * Throws the derived data (rollups, archive index) away before `beidou stats rebuild`
   * writes it again from the log: the embedded store deletes `stats.db` with its `-wal` and
   * `-shm` (so even a corrupt one is rebuilt); PostgreSQL keeps its tables, whose rows the
   * rebuild replaces in one transaction (readers see the old rows until it commits).
   */
  discardDerived(): Promise<void>;
  /** What the schema migrations did at open (PostgreSQL only). */
  migrations: MigrationReport | null;
  /** Closes what the store opened besides the log and the rollups (which are closed first). */
  close(): Promise<void>;
}

/**
 * `lease`: with a database URL, the log's lease (its holder's name, length, and what to do
 * once it is lost). The log holds of each live task at most BEIDOU_LIVE_EVENTS_IN_MEMORY
 * events and BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY bytes (characters of JSON, about bytes).
 */
export async function openStore(
  config: Pick<Config, 'databaseUrl' | 'liveEventsInMemory' | 'liveEventBytesInMemory'>,
  paths: ReturnType<typeof homePaths>,
  clock: Clock,
  lease: LeaseOptions = {},
): Promise<Store> {
  const url = config.databaseUrl;
  const memory: LiveMemory = { events: config.liveEventsInMemory, bytes: config.liveEventBytesInMemory };
  if (!url) {
    return {
      kind: 'embedded',
      where: paths.events,
      log: new JsonlEventLog(paths.events, clock, memory),
      plans: new FilePlanStore(paths.plans),
      archive: () => new SqliteArchiveIndex(paths.statsDb),
      rollups: (state, onError) => new SqliteRollups(paths.statsDb, state, onError),
      discardDerived: async () => {
        for (const suffix of ['', '-wal', '-shm']) rmSync(paths.statsDb + suffix, { force: true });
      },
      migrations: null,
      close: async () => undefined,
    };
  }
  // Loaded only with a database URL: the embedded store never needs the PostgreSQL modules.
  const { openPgStore } = await import('./postgres/index.js');
  // Nothing to discard up front: the rebuild's `replace` empties the tables in its transaction.
  return openPgStore(url, clock, lease, memory);
}

// What the replica's role needs of the PostgreSQL store besides the interfaces above: the
// refusal while another replica holds the log, the lease's loss, and the standby's LISTEN.
export { DatabaseInUseError, describeDatabaseUrl } from './postgres/connect.js';
// The embedded store's one-writer lock on the home: taken by every server, with or without a database.
export { acquireHomeLock, type HomeLock } from './embedded/home-lock.js';
export type { LeaseLost } from './postgres/lease.js';
export { NoticeListener, type ReplicaNotices } from './postgres/notices.js';
