import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { TokenService } from '../identity/tokens.js';
import type { Registry } from '../registry/registry.js';
import type { SkillCatalog } from '../skills/loader.js';
import type { Clock, IdSource } from '../util/ids.js';
import type { Inboxes } from './inbox.js';
import { KeyedLock } from './locks.js';

/**
 * Everything a primitive or an API route may use, built once at start and passed down.
 * Time and ids are injected so the reducer and the watchdog are testable without sleeping.
 */
export interface Services {
  config: Config;
  registry: Registry;
  skills: SkillCatalog;
  tokens: TokenService;
  inboxes: Inboxes;
  clock: Clock;
  ids: IdSource;
  logger: Logger;
  locks: {
    spawn: KeyedLock;
    plan: KeyedLock;
  };
}

export function newLocks(): Services['locks'] {
  return { spawn: new KeyedLock(), plan: new KeyedLock() };
}
