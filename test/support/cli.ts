import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { freePort } from '../../src/testkit/ports.js';

/**
 * The `beidou` binary as a person runs it: child processes of `node dist/cli/main.js`,
 * run asynchronously (the server under test runs in the test process), synchronised on
 * their output lines and exits, never on timers.
 */

export const ROOT = path.resolve(import.meta.dirname, '../..');
export const MAIN = path.join(ROOT, 'dist', 'cli', 'main.js');

/**
 * Builds the binary for a test file's `beforeAll`: `always` rebuilds so a bare `vitest run`
 * tests the current source; otherwise only when it is missing (`npm test` builds first).
 */
export function buildCli(always: boolean): void {
  if (!always && existsSync(MAIN)) return;
  try {
    execFileSync('npx', ['tsc', '-b'], { cwd: ROOT, stdio: 'pipe' });
  } catch (err) {
    // tsc -b still emits on type errors; only a missing binary is fatal here.
    if (!existsSync(MAIN))
      throw new Error(
        `build failed and ${MAIN} is missing:\n${(err as { stdout?: Buffer }).stdout?.toString() ?? err}`,
      );
  }
}

/** The environment of a child: ours without any BEIDOU_* setting, plus the given ones. */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('BEIDOU_')) env[k] = v;
  return { ...env, BEIDOU_LOG_LEVEL: 'silent', ...extra };
}

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `beidou ARGS` to completion (in `cwd`, default the checkout). */
export function beidou(args: string[], env: Record<string, string> = {}, cwd = ROOT): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [MAIN, ...args], { cwd, env: childEnv(env) }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A running `beidou ARGS` whose stdout lines are collected and can be awaited. */
export class CliChild {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  stderr = '';
  readonly exited: Promise<Exit>;
  private exit: Exit | null = null;
  private waiters: Array<() => void> = [];

  constructor(args: string[], env: Record<string, string> = {}) {
    this.proc = spawn(process.execPath, [MAIN, ...args], {
      cwd: ROOT,
      env: childEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    createInterface({ input: this.proc.stdout! }).on('line', (line) => {
      this.lines.push(line);
      this.notify();
    });
    this.proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => (this.stderr += chunk));
    this.exited = new Promise((resolve) => {
      this.proc.on('close', (code, signal) => {
        this.exit = { code, signal };
        this.notify();
        resolve(this.exit);
      });
    });
  }

  private notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Resolves with the first line (already printed or to come) matching; rejects if the child exits first. */
  waitForLine(match: (line: string, index: number) => boolean): Promise<string> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.lines.find(match);
        if (found !== undefined) return resolve(found);
        if (this.exit) {
          return reject(
            new Error(
              `child exited (${JSON.stringify(this.exit)}) before the line; stdout:\n${this.lines.join('\n')}\nstderr:\n${this.stderr}`,
            ),
          );
        }
        this.waiters.push(check);
      };
      check();
    });
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<Exit> {
    if (!this.exit) this.proc.kill(signal);
    return this.exited;
  }
}

/** A loopback port nothing listens on: bound by the OS, then closed. */
export const closedPort = freePort;
