#!/usr/bin/env node
import { hook, HookUsageError } from './hook.js';

/**
 * `beidou hook` as its own entry point: Claude Code runs a hook before and after every tool
 * call, so it must start fast; this loads neither the CLI parser nor the server's modules.
 */
hook(process.argv[2] ?? '').catch((err: unknown) => {
  process.stderr.write(`beidou hook: ${(err as Error).message}\n`);
  process.exit(err instanceof HookUsageError ? 2 : 1);
});
