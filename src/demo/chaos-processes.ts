import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { ownProcessAlive } from '../util/process.js';
import { PACKAGE_ROOT } from '../util/version.js';

/**
 * The processes a chaos run starts and kills: `beidou serve` on a fixed port (so a restart
 * on the same home is found at the same address), `beidou spawner` with the command adapter
 * running the scripted agent, and the agent processes themselves.
 */

export const CLI = path.join(PACKAGE_ROOT, 'dist', 'cli', 'main.js');
export const SCRIPTED_AGENT = path.join(PACKAGE_ROOT, 'examples', 'scripted-agent.mjs');

/** mulberry32: a seeded generator, so a run can be replayed from the seed it prints. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A loopback port nobody listens on now (the server binds it, dies, and binds it again). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

export interface ChildHandle {
  child: ChildProcess;
  pid: number;
  exited: Promise<number | null>;
  output: () => string;
}

function track(child: ChildProcess): ChildHandle {
  let output = '';
  const keep = (d: Buffer) => (output = (output + d.toString()).slice(-20_000));
  child.stderr?.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, pid: child.pid!, exited, output: () => output };
}

/** `beidou serve --port PORT --home HOME`; resolves once it printed its listening line. */
export function startServerProcess(
  home: string,
  port: number,
  env: Record<string, string> = {},
): Promise<ChildHandle & { url: string }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', String(port), '--home', home], {
    env: { ...process.env, BEIDOU_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const handle = track(child);
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^beidou listening on (http:\/\/\S+)$/.exec(line);
      if (m) resolve({ ...handle, url: m[1]! });
    });
    void handle.exited.then((code) =>
      reject(new Error(`server exited with ${code} before listening: ${handle.output()}`)),
    );
  });
}

/** Each spawner started keeps a spool folder of its own (one spawner per folder). */
let spawnersStarted = 0;

/** `beidou spawner --adapter command` running the scripted agent on `scriptFile` in `workdir`. */
export function startSpawnerProcess(
  url: string,
  token: string,
  scriptFile: string,
  workdir: string,
  env: Record<string, string> = {},
): ChildHandle {
  const agentCmd = `"${process.execPath}" "${SCRIPTED_AGENT}"`;
  const child = spawn(
    process.execPath,
    [
      CLI,
      'spawner',
      '--server',
      url,
      '--token',
      token,
      '--adapter',
      'command',
      '--command',
      agentCmd,
      '--max-agents',
      '16',
      '--workdir',
      workdir,
      '--spool-dir',
      path.join(path.dirname(workdir), 'spools', `spawner-${++spawnersStarted}`),
      // In the sandbox an agent gets only the variables named, and sees the script only if shown it.
      '--pass-env',
      'BEIDOU_SCRIPT',
      '--pass-env',
      'BEIDOU_SCRIPT_DELAY_MS',
      '--sandbox-bind',
      `${scriptFile}:ro`,
    ],
    {
      env: { ...process.env, BEIDOU_SCRIPT: scriptFile, BEIDOU_LOG_LEVEL: 'warn', ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  return track(child);
}

export interface AgentProcess {
  agentId: string;
  pid: number;
}

/**
 * The scripted agents of a task that are alive now. On Linux, from `/proc` (each process's
 * environment names its agent and task), so a process nobody keeps a record of (an orphan of
 * a dead spawner) is found too; elsewhere, from the pid files the agents write in `workdir`.
 */
export function agentProcesses(workdir: string, taskId: string): AgentProcess[] {
  if (existsSync('/proc/self/environ')) return fromProc(taskId);
  const dir = path.join(workdir, taskId);
  if (!existsSync(dir)) return [];
  const out: AgentProcess[] = [];
  for (const agentId of readdirSync(dir)) {
    try {
      const pid = Number(readFileSync(path.join(dir, agentId, '.scripted-agent.pid'), 'utf8'));
      if (ownProcessAlive(pid)) out.push({ agentId, pid });
    } catch {
      // no pid file yet, or the process is gone
    }
  }
  return out;
}

function fromProc(taskId: string): AgentProcess[] {
  const out: AgentProcess[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The node process itself, not a shell wrapping it: its argv[1] is the script.
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv[1] !== SCRIPTED_AGENT) continue;
      const vars = readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0');
      if (!vars.includes(`BEIDOU_TASK_ID=${taskId}`)) continue;
      const agentId = vars.find((v) => v.startsWith('BEIDOU_AGENT_ID='))?.slice('BEIDOU_AGENT_ID='.length);
      const state = readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]?.[0];
      if (agentId && state !== 'Z') out.push({ agentId, pid: Number(entry) });
    } catch {
      // gone while we looked
    }
  }
  return out;
}

export async function killHard(handle: ChildHandle): Promise<void> {
  if (handle.child.exitCode === null && handle.child.signalCode === null) handle.child.kill('SIGKILL');
  await handle.exited;
}
