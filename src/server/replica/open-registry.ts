/** A store opened and a registry rebuilt on it, for an activation (activate.ts) or a standby's follower (role.ts). */
import type { Config, homePaths } from '../../config.js';
import type { ReplayReport } from '../../events/event-log.js';
import type { ArchiveIndex } from '../../registry/archive.js';
import { Registry } from '../../registry/registry.js';
import { openStore, type LeaseLost, type Store } from '../../store/index.js';
import type { Clock } from '../../util/clock.js';
import type { Logger } from '../../util/logger.js';

/**
 * A store opened and a registry rebuilt on it: by a writer (`open`, taking the lease) or by
 * a standby that follows the active's commits (`follow`) and becomes one by `promote`.
 */
export interface OpenedRegistry {
  store: Store;
  registry: Registry;
  index: ArchiveIndex;
  /** Where the log's lease-lost call goes: set by the activation that builds on it. */
  route: { onLost: (lost: LeaseLost) => void };
  /** Closes the log, the index and the store (a follower's, or one whose activation failed). */
  close(): Promise<void>;
}

export async function openRegistry(
  config: Config,
  paths: ReturnType<typeof homePaths>,
  clock: Clock,
  logger: Logger,
  holder: string | null,
  mode: 'writer' | 'follower',
): Promise<OpenedRegistry> {
  const route: OpenedRegistry['route'] = { onLost: () => undefined };
  const store = await openStore(config, paths, clock, {
    ...(holder ? { holder } : {}),
    leaseS: config.leaseS,
    onLost: (lost) => route.onLost(lost),
  });
  if (store.migrations?.applied.length) {
    logger.info(
      { applied: store.migrations.applied, version: store.migrations.version },
      `migrated the database schema to version ${store.migrations.version}`,
    );
  }
  const registry = new Registry(store.log);
  let index: ArchiveIndex | null = null;
  const close = async () => {
    await store.log.close().catch(() => undefined);
    await index?.close().catch(() => undefined);
    await store.close().catch(() => undefined);
  };
  try {
    index = store.archive();
    const entries = await index.load();
    logReplay(logger, mode === 'follower' ? await registry.follow(entries) : await registry.open(entries));
    // Entries the log no longer matches (replayed instead) or no longer has: dropped by the
    // writer (a follower writes nothing); the archiver writes them anew.
    const stale = entries.filter((e) => !registry.archived.has(e.task_id)).map((e) => e.task_id);
    if (stale.length > 0 && mode === 'writer') {
      logger.warn(
        { tasks: stale.length },
        `${stale.length} archive index entr${stale.length === 1 ? 'y' : 'ies'} did not match the event log: replayed those tasks`,
      );
      await index.remove(stale);
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { store, registry, index, route, close };
}
/** What the replay cut or quarantined, one warning each: the operator should know. */
function logReplay(logger: Logger, report: ReplayReport): void {
  for (const cut of report.cut) {
    const { incomplete } = cut;
    if (incomplete) {
      logger.warn(
        { file: cut.file, first_seq: incomplete.firstSeq, last_seq: incomplete.lastSeq, of: incomplete.of },
        `${cut.file}: dropped an incomplete commit (seqs ${incomplete.firstSeq}-${incomplete.lastSeq} of a commit of ${incomplete.of} lines, cut short before its end; never acknowledged)`,
      );
    } else {
      logger.warn({ file: cut.file }, `${cut.file}: cut a torn last line (a write cut short; never acknowledged)`);
    }
  }
  for (const q of report.quarantined) {
    logger.error(
      { task_id: q.taskId, file: q.file, line: q.line, reason: q.reason },
      `task ${q.taskId} quarantined: ${q.file} line ${q.line}: ${q.reason}; the other tasks run (see beidou doctor)`,
    );
  }
}
