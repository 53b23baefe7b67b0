import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { RollupStore } from '../events/rollups.js';
import type { TokenService } from '../identity/tokens.js';
import type { Registry } from '../registry/registry.js';
import type { SkillCatalog } from '../skills/loader.js';
import type { Clock, IdSource } from '../util/ids.js';
import type { Activity } from './activity.js';
import type { Inboxes } from './inbox.js';
import type { Questions } from './questions.js';
import type { Spawners } from './spawners.js';
import { KeyedLock, KeyedMutex } from './locks.js';

/**
 * Everything a primitive or an API route may use, built once at start and passed down.
 * Time and ids are injected so the reducer and the watchdog are testable without sleeping.
 */
export interface Services {
  config: Config;
  registry: Registry;
  /** Rollups (SQLite by default): derived, batched off the hot path. */
  rollups: RollupStore;
  skills: SkillCatalog;
  tokens: TokenService;
  inboxes: Inboxes;
  /** Questions and the user gateway. */
  gateway: Questions;
  /** The spawners connected to this server and the agents they run. */
  spawners: Spawners;
  /** Tool calls in flight and the last call per agent (runtime only, for the watchdog). */
  activity: Activity;
  /** Aborts when the server stops: blocked calls end. */
  stopping: AbortSignal;
  clock: Clock;
  ids: IdSource;
  logger: Logger;
  locks: {
    /** One in-flight spawn_agent / create_team per agent: refuses, never queues. */
    spawn: KeyedLock;
    /** declare_plan / remove_plan: queues, separate from the spawn lock. */
    plan: KeyedMutex;
  };
}

export function newLocks(): Services['locks'] {
  return { spawn: new KeyedLock(), plan: new KeyedMutex() };
}
