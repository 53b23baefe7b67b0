import { defineConfig } from 'vitest/config';

/**
 * Where a test file lives says how it runs:
 * - `unit/`, `demo/`, `docs/`: start no server on the run's store (none at all, `npm run demo`'s own
 *   embedded one, or a home the docs' examples make): the store cannot change what they check, so once.
 * - `integration/`: the store matrix, on the embedded store (project `main`) and on PostgreSQL
 *   (project `postgres`: BEIDOU_TEST_STORE=postgres points each test server at a database of its own
 *   on one real PostgreSQL the run starts; test/support/store.ts).
 * - `embedded/`: the embedded store's own files (events/*.jsonl, the home lock, doctor), once.
 * - `postgres/`: the PostgreSQL store's own guarantees (group commit, the key fence, migrations, a cut
 *   connection; replicas, and what reconnects across a failover).
 * - `claude-code/`: the real Claude Code under tmux; what they check is Claude Code's side (hooks, the
 *   relay, the doorbell, attach), once: the inbox they read is in the matrix.
 * - `chaos/`: servers, spawners and agents killed at random moments, one file at a time, after the rest.
 */
const ONCE = ['unit', 'demo', 'docs', 'embedded', 'claude-code'].map((tier) => `test/${tier}/**/*.test.ts`);
const MATRIX = ['test/integration/**/*.test.ts'];

/** The PostgreSQL projects' shared setup: one server for the run, a database per test server. */
const postgres = {
  env: { BEIDOU_TEST_STORE: 'postgres' },
  globalSetup: ['test/support/postgres-global.ts'],
  setupFiles: ['test/support/postgres-file.ts'],
};

export default defineConfig({
  test: {
    // Integration tests start real servers and child processes; give them room.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    projects: [
      { extends: true, test: { name: 'main', include: [...ONCE, ...MATRIX], sequence: { groupOrder: 0 } } },
      {
        extends: true,
        test: {
          name: 'postgres',
          include: [...MATRIX, 'test/postgres/**/*.test.ts'],
          ...postgres,
          // After the embedded run rather than beside it: on two cores the timing-sensitive
          // files of either would otherwise compete with twice the load.
          sequence: { groupOrder: 1 },
        },
      },
      // One file at a time, and only once every other file is done: their timing is what they test.
      {
        extends: true,
        test: {
          name: 'chaos',
          include: ['test/chaos/**/*.test.ts'],
          fileParallelism: false,
          sequence: { groupOrder: 2 },
        },
      },
      // SIGKILL of the server under load, on PostgreSQL: the same file, after the chaos project.
      {
        extends: true,
        test: {
          name: 'postgres-crash',
          include: ['test/chaos/crash.test.ts'],
          ...postgres,
          fileParallelism: false,
          sequence: { groupOrder: 3 },
        },
      },
    ],
  },
});
