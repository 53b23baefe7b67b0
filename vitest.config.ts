import { defineConfig } from 'vitest/config';

/** Tests that kill servers, spawners and agents at random moments: run alone, after the rest. */
const CHAOS = ['test/crash.test.ts', 'test/chaos*.test.ts'];

/**
 * The store matrix: every integration test runs on the embedded store (project `main`) and
 * on PostgreSQL (project `postgres`: BEIDOU_TEST_STORE=postgres points each test server at
 * a database of its own on one real PostgreSQL the run starts; test/support/store.ts).
 * These stay embedded-only, each for its reason (and say so in the file):
 */
const EMBEDDED_ONLY: Record<string, string> = {
  'test/event-log.test.ts': 'drives JsonlEventLog and its events/*.jsonl files directly',
  'test/log-integrity.test.ts': 'corrupts events/*.jsonl to check verification, cuts and quarantine',
  'test/home-lock.test.ts': 'beidou doctor and its --repair of events/*.jsonl (with the home lock they respect)',
  'test/cli-quarantine.test.ts': 'writes a seq twice into events/*.jsonl',
  'test/dashboard-e2e.test.ts': "writes a seq twice into events/*.jsonl for the page's quarantine banner (the page reads the API that the matrix covers)",
  'test/docs-cli.test.ts': "docs/cli.md's examples run against a home: stats rebuild of its events/*.jsonl into stats.db",
};

/**
 * Files that start no server on the test run's store (none at all, or `npm run demo`'s own
 * embedded one): the store cannot change what they check, so they run once.
 */
const NO_STORE = [
  'test/answers.test.ts',
  'test/architecture.test.ts',
  'test/demo-flags.test.ts',
  'test/demo.test.ts',
  'test/docs-spawner-events.test.ts',
  'test/docs-tools.test.ts',
  'test/drain.test.ts',
  'test/plan-graph.test.ts',
  'test/reducer.test.ts',
  'test/schemas.test.ts',
  'test/skills.test.ts',
  'test/spawner-silence.test.ts',
  'test/testkit-guard.test.ts',
  'test/wake-units.test.ts',
];

/**
 * The real Claude Code under tmux: what these check is Claude Code's side (hooks, the relay,
 * the doorbell, attach). The inbox and its stream they read are in the matrix through
 * messaging, inbox-stream and delivery; run twice they would add some five minutes to CI.
 */
const CLAUDE_CODE = ['test/wake.test.ts', 'test/wake-faults.test.ts', 'test/wake-hostile.test.ts', 'test/attach.test.ts', 'test/claude.test.ts'];

/** The PostgreSQL store's own guarantees (group commit, the key fence, migrations, a cut connection; replicas, and what reconnects across a failover). */
const POSTGRES_ONLY = ['test/pg-*.test.ts'];

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
      { extends: true, test: { name: 'main', include: ['test/**/*.test.ts'], exclude: [...CHAOS, ...POSTGRES_ONLY], sequence: { groupOrder: 0 } } },
      {
        extends: true,
        test: {
          name: 'postgres',
          include: ['test/**/*.test.ts'],
          exclude: [...CHAOS, ...Object.keys(EMBEDDED_ONLY), ...NO_STORE, ...CLAUDE_CODE],
          ...postgres,
          // After the embedded run rather than beside it: on two cores the timing-sensitive
          // files of either would otherwise compete with twice the load.
          sequence: { groupOrder: 1 },
        },
      },
      // One file at a time, and only once every other file is done: their timing is what they test.
      { extends: true, test: { name: 'chaos', include: CHAOS, fileParallelism: false, sequence: { groupOrder: 2 } } },
      // SIGKILL of the server under load, on PostgreSQL: the same file, after the chaos project.
      { extends: true, test: { name: 'postgres-crash', include: ['test/crash.test.ts'], ...postgres, fileParallelism: false, sequence: { groupOrder: 3 } } },
    ],
  },
});
