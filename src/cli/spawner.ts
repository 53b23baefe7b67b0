import os from 'node:os';
import path from 'node:path';
import { createLogger, resolveLogFormat } from '../util/logger.js';
import { commandAdapter } from '../spawner/adapters/command.js';
import type { Adapter } from '../spawner/adapter.js';
import { Spawner } from '../spawner/spawner.js';
import { api, CliError } from './client.js';

export interface SpawnerCliOptions {
  server?: string;
  token?: string;
  home?: string;
  adapter: string;
  command?: string;
  maxAgents: string;
  workdir?: string;
  name?: string;
  permissionMode: string;
  sandbox?: boolean;
  claudeBin?: string;
  skipPreflight?: boolean;
  logFormat?: string;
}

/** `beidou spawner --server URL [--token T] [--adapter claude|command] ...` */
export async function spawner(opts: SpawnerCliOptions): Promise<void> {
  const serverUrl = (opts.server ?? process.env.BEIDOU_SERVER ?? 'http://127.0.0.1:7777').replace(/\/+$/, '');
  const maxAgents = Number.parseInt(opts.maxAgents, 10);
  if (!Number.isInteger(maxAgents) || maxAgents < 1) throw new CliError('--max-agents must be a positive integer', 2);
  let logger;
  try {
    logger = createLogger(undefined, undefined, resolveLogFormat(opts.logFormat));
  } catch (err) {
    throw new CliError((err as Error).message, 2);
  }
  let adapter: Adapter;
  if (opts.adapter === 'command') {
    if (!opts.command) throw new CliError('--adapter command needs --command "CMD"', 2);
    adapter = commandAdapter(opts.command, {
      line: (agentId, line) => logger.info({ agent: agentId }, line),
      invalid: (agentId, line, problem) => logger.error({ agent: agentId, line }, `agent ${agentId} printed an event the server would refuse, not posted: ${problem}`),
    });
  } else if (opts.adapter === 'claude') {
    const bin = opts.claudeBin ?? process.env.BEIDOU_CLAUDE_BIN ?? 'claude';
    if (!opts.skipPreflight) {
      const { claudePreflight } = await import('../spawner/preflight.js');
      const check = await claudePreflight(bin);
      if (!check.ok) throw new CliError(check.problem, 2);
      process.stdout.write(`preflight: ${bin} ${check.version}; credentials: ${check.credentials}\n`);
    }
    const { claudeAdapter } = await import('../spawner/adapters/claude.js');
    adapter = claudeAdapter({
      bin,
      permissionMode: opts.permissionMode,
      sandbox: Boolean(opts.sandbox),
      logger,
    });
  } else {
    throw new CliError(`--adapter must be claude or command (got "${opts.adapter}")`, 2);
  }
  // Without --token, a spawner on the server's own machine mints one with the admin token.
  const token =
    opts.token ??
    process.env.BEIDOU_SPAWNER_TOKEN ??
    (await api<{ token: string }>({ server: serverUrl, ...(opts.home ? { home: opts.home } : {}) }, 'POST', '/spawner-tokens', {})).token;
  const instance = new Spawner({
    serverUrl,
    token,
    adapter,
    maxAgents,
    name: opts.name ?? `${os.hostname()}:${process.pid}`,
    workdir: opts.workdir ? path.resolve(opts.workdir) : null,
    logger,
  });
  instance.onHello = () => logger.info({ server: serverUrl, adapter: adapter.name, maxAgents }, 'spawner connected');
  const stop = () => {
    instance.stop();
    setTimeout(() => process.exit(0), 200).unref();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  process.stdout.write(`beidou spawner serving ${serverUrl} with the ${adapter.name} adapter (max ${maxAgents} agents)\n`);
  await instance.run();
}
