export * from '../../src/testkit/claude-tmux.js';
