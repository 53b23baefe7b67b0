import type { Config } from '../config.js';
import type { RegistryState } from '../registry/state.js';
import type { IdSource } from '../util/ids.js';

/**
 * What a decision may read: the registry state, the limits in the configuration, and the
 * id source that names what it creates. A decision returns event drafts (or throws a
 * DomainError) and never commits, waits or does I/O: whoever calls it commits the drafts.
 */
export interface DomainContext {
  readonly state: RegistryState;
  readonly config: Config;
  readonly ids: IdSource;
}
