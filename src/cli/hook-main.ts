#!/usr/bin/env node
import { hook, HookUsageError, parseHookArgs } from './hook.js';

/**
 * `beidou hook` as its own entry point: Claude Code runs a hook before and after every tool
 * call, so it must start fast; this loads neither the CLI parser nor the server's modules.
 */
Promise.resolve()
  .then(() => {
    const { event, opts } = parseHookArgs(process.argv.slice(2));
    return hook(event, opts);
  })
  .then((code) => {
    process.exitCode = code;
  })
  .catch((err: unknown) => {
    process.stderr.write(`beidou hook: ${(err as Error).message}\n`);
    // Exit 1, never 2: to Claude Code 2 blocks the tool (or, with asyncRewake, wakes the model).
    void HookUsageError;
    process.exit(1);
  });
