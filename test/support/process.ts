import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { storeEnv } from './store.js';

export const CLI = path.resolve(import.meta.dirname, '../../dist/cli/main.js');

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  exited: Promise<number | null>;
}

/**
 * `beidou serve` as a child process; resolves once it printed its listening line. `port`
 * (default 0: a free one) lets a restarted server come back where its spawners look for it.
 * Its store is the test run's (test/support/store.ts).
 */
export async function spawnServer(home: string, env: Record<string, string> = {}, port = 0): Promise<ServerProcess> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', String(port), '--home', home], {
    env: { ...process.env, BEIDOU_LOG_LEVEL: 'warn', ...(await storeEnv(home)), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      const m = /^beidou listening on (http:\/\/\S+)$/.exec(line);
      if (m) resolve({ child, url: m[1]!, exited });
    });
    void exited.then((code) => reject(new Error(`server exited with ${code} before listening: ${stderr}`)));
  });
}

export const SCRIPTED_AGENT = path.resolve(import.meta.dirname, '../../examples/scripted-agent.mjs');

export interface SpawnerProcess {
  child: ChildProcess;
  exited: Promise<number | null>;
  stderr: () => string;
}

/**
 * What a spawner must be told for the scripted agent on `scriptFile` to run in its sandbox:
 * the script's variables (agents get only the environment the spawner allows) and the script
 * itself (the sandbox hides the temporary folder it is usually written to).
 */
export const scriptedAgentArgs = (scriptFile: string) => [
  '--pass-env',
  'BEIDOU_SCRIPT',
  '--pass-env',
  'BEIDOU_SCRIPT_DELAY_MS',
  '--sandbox-bind',
  `${scriptFile}:ro`,
];

/**
 * `beidou spawner` with the command adapter running the scripted agent on `scriptFile` (in
 * the default sandbox, shown the script); its spool in a fresh temp dir unless `extraArgs`
 * names one (`--spool-dir`), and short restart backoffs unless `extraArgs` sets them
 * (`--restart-backoff`).
 */
export function spawnSpawner(
  serverUrl: string,
  token: string,
  scriptFile: string,
  extraArgs: string[] = [],
): SpawnerProcess {
  const agentCmd = `"${process.execPath}" "${SCRIPTED_AGENT}"`;
  const defaults = [
    ...(extraArgs.includes('--spool-dir') ? [] : ['--spool-dir', mkdtempSync(path.join(os.tmpdir(), 'beidou-spool-'))]),
    ...(extraArgs.includes('--restart-backoff') ? [] : ['--restart-backoff', '0.2,0.5,1']),
  ];
  const child = spawn(
    process.execPath,
    [
      CLI,
      'spawner',
      '--server',
      serverUrl,
      '--token',
      token,
      '--adapter',
      'command',
      '--command',
      agentCmd,
      ...scriptedAgentArgs(scriptFile),
      ...defaults,
      ...extraArgs,
    ],
    {
      env: { ...process.env, BEIDOU_SCRIPT: scriptFile, BEIDOU_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exited, stderr: () => stderr };
}

/**
 * The admin API of a server process whose admin token is in `home` (the current process of
 * `current()`, so it follows a restart on another port).
 */
export function processApi(home: string, current: () => { url: string }) {
  const adminToken = readFileSync(path.join(home, 'admin.token'), 'utf8').trim();
  return async (method: string, route: string, body?: unknown): Promise<any> => {
    const res = await fetch(`${current().url}/api${route}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return res.json();
  };
}
