import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { startGuarded, type GuardedChild } from '../testkit/guard.js';

/**
 * One `beidou serve` replica for section 9, a child under the testkit's guard (so it never
 * outlives the bench), on a fixed port (the balancer's configuration names it; a replica
 * restarted after SIGKILL comes back there) and a home of its own. Its stdout lines and its
 * log (pino's JSON on stderr, each line with the replica's own `time`) are kept and can be
 * awaited; an unexpected exit fails whatever waits on it.
 */

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'main.js');

export interface LogLine {
  /** Milliseconds since the epoch, as the replica logged it (Date.now() there). */
  time: number;
  msg: string;
  [field: string]: unknown;
}

export class BenchReplica {
  readonly lines: string[] = [];
  readonly log: LogLine[] = [];
  private waiters = new Set<() => void>();

  private constructor(
    readonly name: string,
    readonly port: number,
    readonly home: string,
    readonly child: GuardedChild,
  ) {
    const { stdout, stderr } = child.guard;
    stdout!.on('error', () => undefined);
    stderr!.on('error', () => undefined);
    createInterface({ input: stdout! }).on('line', (line) => {
      this.lines.push(line);
      this.notify();
    });
    createInterface({ input: stderr! }).on('line', (line) => {
      this.log.push(parseLogLine(line));
      this.notify();
    });
    void child.exited.then(() => this.notify());
  }

  static async start(name: string, port: number, env: Record<string, string>): Promise<BenchReplica> {
    const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-replica-'));
    const child = await startGuarded(process.execPath, [MAIN, 'serve', '--port', String(port), '--home', home], {
      stdout: 'pipe',
      stderr: 'pipe',
      env: { ...process.env, BEIDOU_LOG_LEVEL: 'info', ...env },
    });
    const replica = new BenchReplica(name, port, home, child);
    try {
      // The third line: `role: active (...)` or `role: standby (...)`.
      await replica.waitFor('its role line', () => (replica.lines.length >= 3 ? true : undefined), 30_000);
    } catch (err) {
      await replica.stop();
      throw err;
    }
    return replica;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get pid(): number {
    return this.child.pid;
  }

  get role(): string {
    return this.lines[2] ?? '';
  }

  /** The first log line from index `from` on matching `match`. */
  logLine(what: string, match: RegExp, from: number, deadlineMs: number): Promise<LogLine> {
    return this.waitFor(what, () => this.log.slice(from).find((l) => match.test(l.msg)), deadlineMs);
  }

  /** Resolves with the probe's value once it has one; rejects after the deadline or if the replica exits first. */
  waitFor<T>(what: string, probe: () => T | undefined, deadlineMs: number): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          finish(() =>
            reject(new Error(`${this.name}: timed out after ${deadlineMs} ms waiting for ${what}${this.tail()}`)),
          ),
        deadlineMs,
      );
      const finish = (settle: () => void) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        settle();
      };
      const check = () => {
        const value = probe();
        if (value !== undefined) return finish(() => resolve(value));
        const exit = this.child.exitCode();
        if (exit)
          finish(() =>
            reject(
              new Error(
                `${this.name} exited (${JSON.stringify(exit)}) while the bench waited for ${what}${this.tail()}`,
              ),
            ),
          );
      };
      this.waiters.add(check);
      check();
    });
  }

  private notify(): void {
    for (const check of [...this.waiters]) check();
  }

  private tail(): string {
    const out = [...this.lines.slice(-5), ...this.log.slice(-10).map((l) => l.msg)];
    return out.length ? `; its last output:\n    ${out.join('\n    ')}` : '';
  }

  /** Stops it (SIGTERM through the guard; a paused one is continued) and removes its home. */
  async stop(): Promise<void> {
    await this.child.stop();
    rmSync(this.home, { recursive: true, force: true });
  }
}

function parseLogLine(line: string): LogLine {
  try {
    const parsed = JSON.parse(line) as LogLine;
    if (typeof parsed.time === 'number' && typeof parsed.msg === 'string') return parsed;
  } catch {
    // not pino's: a plain `beidou: ...` line
  }
  return { time: Date.now(), msg: line };
}
