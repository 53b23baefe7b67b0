import os from 'node:os';
import path from 'node:path';
import { createLogger, resolveLogFormat, type Logger } from '../util/logger.js';
import { commandAdapter } from '../spawner/adapters/command.js';
import type { Adapter } from '../spawner/adapter.js';
import { AgentLauncher } from '../spawner/agent-launcher.js';
import { LaunchFiles, LaunchFolderError } from '../spawner/launch-files.js';
import { Spawner } from '../spawner/spawner.js';
import { Spool } from '../spawner/spool.js';
import { newInstanceId, savedToken, saveToken, SpoolBusy } from '../spawner/spool-folder.js';
import { api, CliError } from './client.js';
import { readTokenFile, resolveSandbox, sandboxPolicy, type SandboxChoice } from './spawner-sandbox.js';

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
  tokenFile?: string;
  sandbox?: string;
  sandboxBind?: string[];
  passEnv?: string[];
  claudeBin?: string;
  skipPreflight?: boolean;
  logFormat?: string;
  spoolDir?: string;
  spoolMaxMb: string;
  restartBackoff: string;
}

/** `1,5,30` → [1, 5, 30]: seconds before the restart after the 1st, 2nd, 3rd… crash in a row. */
export function parseBackoff(text: string): number[] {
  const steps = text.split(',').map((s) => Number(s.trim()));
  if (steps.length === 0 || steps.some((s) => !Number.isFinite(s) || s < 0 || s > 3600)) {
    throw new CliError(`--restart-backoff must be seconds separated by commas, e.g. 1,5,30 (got "${text}")`, 2);
  }
  return steps;
}

/** Where every spawner of this user keeps its spool dir unless told otherwise. */
export const spoolRoot = () => process.env.BEIDOU_SPAWNER_HOME || path.join(os.homedir(), '.beidou-spawner');

/** The spool dir when none is given: the spawner's own folder, one per --name. */
export function defaultSpoolDir(name: string | undefined): string {
  return path.join(spoolRoot(), (name ?? 'default').replace(/[^A-Za-z0-9._-]/g, '_'));
}

/** `beidou spawner --server URL [--token T] [--adapter claude|command] ...` */
export async function spawner(opts: SpawnerCliOptions): Promise<void> {
  const serverUrl = (opts.server ?? process.env.BEIDOU_SERVER ?? 'http://127.0.0.1:7777').replace(/\/+$/, '');
  const maxAgents = Number.parseInt(opts.maxAgents, 10);
  if (!Number.isInteger(maxAgents) || maxAgents < 1) throw new CliError('--max-agents must be a positive integer', 2);
  const restartBackoffS = parseBackoff(opts.restartBackoff);
  const spoolMaxMb = Number(opts.spoolMaxMb);
  if (!Number.isFinite(spoolMaxMb) || spoolMaxMb <= 0)
    throw new CliError('--spool-max-mb must be a positive number', 2);
  let logger: Logger;
  try {
    logger = createLogger(undefined, undefined, resolveLogFormat(opts.logFormat));
  } catch (err) {
    throw new CliError((err as Error).message, 2);
  }
  if (opts.token && opts.tokenFile) throw new CliError('give --token or --token-file, not both', 2);
  const fileToken = opts.tokenFile ? readTokenFile(opts.tokenFile) : null;
  let claude: { bin: string } | null = null;
  if (opts.adapter === 'command') {
    if (!opts.command) throw new CliError('--adapter command needs --command "CMD"', 2);
  } else if (opts.adapter === 'claude') {
    const bin = opts.claudeBin ?? process.env.BEIDOU_CLAUDE_BIN ?? 'claude';
    if (!opts.skipPreflight) {
      const { claudePreflight } = await import('../spawner/preflight.js');
      const check = await claudePreflight(bin);
      if (!check.ok) throw new CliError(check.problem, 2);
      process.stdout.write(`preflight: ${bin} ${check.version}; credentials: ${check.credentials}\n`);
    }
    claude = { bin };
  } else {
    throw new CliError(`--adapter must be claude or command (got "${opts.adapter}")`, 2);
  }
  // Before anything starts: a sandbox that cannot run refuses the start (spawner-sandbox.ts).
  const sandbox: SandboxChoice = resolveSandbox(opts);
  const spoolDir = path.resolve(opts.spoolDir ?? process.env.BEIDOU_SPOOL_DIR ?? defaultSpoolDir(opts.name));
  let spool: Spool;
  try {
    spool = await Spool.open(spoolDir, {
      maxBytes: spoolMaxMb * 1024 * 1024,
      newInstance: () => newInstanceId(os.hostname()),
      warn: (msg, fields) => logger.warn(fields, msg),
    });
  } catch (err) {
    if (err instanceof SpoolBusy) throw new CliError(err.message, 2);
    throw err;
  }
  let launchFiles: LaunchFiles;
  try {
    launchFiles = LaunchFiles.open(spool.instance);
  } catch (err) {
    await spool.close();
    if (err instanceof LaunchFolderError) throw new CliError(err.message, 2);
    throw err;
  }
  const workdir = opts.workdir ? path.resolve(opts.workdir) : null;
  const launcher = new AgentLauncher({
    sandbox:
      sandbox.mode === 'bwrap'
        ? {
            bin: sandbox.bin,
            policy: sandboxPolicy(sandbox, {
              home: opts.home,
              spoolDirs: [spoolRoot(), spoolDir],
              launchRoot: launchFiles.root,
              workdir,
              tokenFile: opts.tokenFile ?? null,
            }),
          }
        : null,
    passEnv: sandbox.passEnv,
    launchFiles,
    stateDir: spoolDir,
    logger,
  });
  let adapter: Adapter;
  if (claude) {
    const { claudeAdapter } = await import('../spawner/adapters/claude.js');
    adapter = claudeAdapter({ bin: claude.bin, permissionMode: opts.permissionMode, launcher, logger });
  } else {
    adapter = commandAdapter(
      opts.command!,
      {
        line: (agentId, line) => logger.info({ agent: agentId }, line),
        invalid: (agentId, line, problem) =>
          logger.error(
            { agent: agentId, line },
            `agent ${agentId} printed an event the server would refuse, not posted: ${problem}`,
          ),
        cut: (agentId, bytes, kept) =>
          logger.warn(
            { agent: agentId, bytes, kept },
            `agent ${agentId} printed a line of ${bytes} bytes; only its first ${kept} bytes are logged`,
          ),
      },
      launcher,
    );
  }
  if (sandbox.mode === 'none') logger.warn({ sandbox: 'none' }, sandbox.warning);
  // Without --token, a spawner on the server's own machine mints one with the admin token,
  // and keeps it in its spool dir: its identity (and the agents it runs) survive a restart.
  let token = opts.token ?? fileToken ?? process.env.BEIDOU_SPAWNER_TOKEN ?? usableToken(savedToken(spoolDir));
  if (!token) {
    token = (
      await api<{ token: string }>(
        { server: serverUrl, ...(opts.home ? { home: opts.home } : {}) },
        'POST',
        '/spawner-tokens',
        {},
      )
    ).token;
    saveToken(spoolDir, token);
  }
  const instance = new Spawner({
    serverUrl,
    token,
    adapter,
    maxAgents,
    name: opts.name ?? `${os.hostname()}:${process.pid}`,
    workdir,
    logger,
    spool,
    restartBackoffS,
  });
  instance.onHello = () => logger.info({ server: serverUrl, adapter: adapter.name, maxAgents }, 'spawner connected');
  const stop = () => {
    instance.stop();
    launchFiles.close();
    void spool.close().finally(() => setTimeout(() => process.exit(0), 200).unref());
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  process.stdout.write(
    `beidou spawner serving ${serverUrl} with the ${adapter.name} adapter (max ${maxAgents} agents; spool ${spoolDir}; sandbox ${sandbox.mode})\n`,
  );
  await instance.run();
  // Refused for good (its token, its --max-agents): say so and exit 1 rather than retry for ever.
  if (instance.refusal) throw new CliError(instance.refusal, 1);
}

/** A saved token still good for a day (its `exp` read without verifying: the server will). */
function usableToken(token: string | null): string | null {
  if (!token) return null;
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as {
      exp?: number;
    };
    return typeof payload.exp === 'number' && payload.exp > Date.now() / 1000 + 86_400 ? token : null;
  } catch {
    return null;
  }
}
