export * from '../../src/testkit/fake-anthropic.js';
