import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { DomainContext } from '../domain/context.js';
import type { TokenService } from '../identity/tokens.js';
import type { PlanStore } from '../registry/plan-store.js';
import type { Registry } from '../registry/registry.js';
import type { SkillCatalog } from '../skills/loader.js';
import type { Clock } from '../util/clock.js';
import type { IdSource } from '../util/ids.js';
import type { Activity } from './activity.js';
import type { Inboxes } from './inbox.js';
import { KeyedLock, KeyedMutex } from './locks.js';
import type { QuestionWaiters } from './question-waiters.js';
import type { SpawnerHub } from './spawners/hub.js';
import type { WriteBudget } from './write-budget.js';

/**
 * What a tool handler or an HTTP route may use, built once per activation (`server/replica/activate.ts`). The
 * runtime parts below it each take only what they need in their constructors; this bag is
 * for the top layers. Decisions get `domain` (state, limits, ids) and nothing else.
 */
export interface Services {
  config: Config;
  registry: Registry;
  /** The read-only context every decision in `domain/` takes. */
  domain: DomainContext;
  skills: SkillCatalog;
  /** Where declare_plan keeps each plan's readable copy (files in the home, or the database). */
  plans: PlanStore;
  tokens: TokenService;
  inboxes: Inboxes;
  /** Blocked `ask_user` calls. */
  questions: QuestionWaiters;
  /** The spawners connected to this server and the agents they run. */
  spawners: SpawnerHub;
  /** Tool calls in flight and the last call per agent (runtime only, for the watchdog). */
  activity: Activity;
  /** Each agent's bytes written per minute (BEIDOU_MAX_WRITE_BYTES_PER_MINUTE): refuses a call past it. */
  writeBudget: WriteBudget;
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
