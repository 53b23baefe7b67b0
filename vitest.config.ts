import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Integration tests start real servers and child processes; give them room.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
  },
});
