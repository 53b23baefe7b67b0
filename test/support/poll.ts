export * from '../../src/testkit/poll.js';
