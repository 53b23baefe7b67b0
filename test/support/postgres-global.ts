import type { TestProject } from 'vitest/node';
import { startPostgres, type TestPostgres } from '../../src/testkit/postgres.js';

/**
 * The globalSetup of the postgres projects: one real PostgreSQL for the whole run, started
 * before the first test file and stopped after the last (its guard stops it too if the
 * run is killed). Each project runs its own globalSetup, so the server is shared through
 * the main process and stopped by the last project to finish. Test files reach it through
 * `inject('postgres')` (test/support/store.ts).
 */

declare module 'vitest' {
  export interface ProvidedContext {
    postgres: { adminUrl: string; logFile: string; port: number };
  }
}

interface Shared {
  server: Promise<TestPostgres>;
  users: number;
}

const KEY = Symbol.for('beidou.test.postgres');
const registry = globalThis as unknown as Record<symbol, Shared | undefined>;

export async function setup(project: TestProject): Promise<() => Promise<void>> {
  const shared = (registry[KEY] ??= { server: startPostgres(), users: 0 });
  shared.users++;
  const server = await shared.server;
  project.provide('postgres', { adminUrl: server.url('postgres'), logFile: server.logFile, port: server.port });
  return async () => {
    if (--shared.users > 0) return;
    registry[KEY] = undefined;
    await server.stop();
  };
}
