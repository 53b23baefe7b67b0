import { defineConfig } from 'vitest/config';

/** Tests that kill servers, spawners and agents at random moments: run alone, after the rest. */
const CHAOS = ['test/crash.test.ts', 'test/chaos*.test.ts'];

export default defineConfig({
  test: {
    // Integration tests start real servers and child processes; give them room.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    projects: [
      { extends: true, test: { name: 'main', include: ['test/**/*.test.ts'], exclude: CHAOS, sequence: { groupOrder: 0 } } },
      // One file at a time, and only once every other file is done: their timing is what they test.
      { extends: true, test: { name: 'chaos', include: CHAOS, fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
  },
});
