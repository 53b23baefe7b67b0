import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { beforeAll, describe, expect, it } from 'vitest';
import { startGuarded } from '../../src/testkit/guard.js';
import { buildCli } from '../support/cli.js';
import { until, within } from '../../src/testkit/poll.js';
import { pidAlive } from '../../src/util/process.js';

/**
 * The testkit's guard shell (src/testkit/guard.ts), which PostgreSQL, HAProxy and the
 * bench's replicas run under: it reports the child's own pid, passes on how the child
 * ended, stops it with the stop signal when asked, survives the child being paused, and
 * stops it when its owner is killed with SIGKILL.
 */

const GUARD = path.resolve(import.meta.dirname, '../../dist/testkit/guard.js');

// The owner in the last test is a child running the compiled testkit.
beforeAll(() => buildCli(false), 120_000);

/** A node child that prints `ready` and, on `signal`, prints `got <signal>` and exits 0. */
const handling = (signal: string) =>
  [
    process.execPath,
    [
      '-e',
      `process.on('${signal}', () => { console.log('got ${signal}'); process.exit(0); }); console.log('ready'); setInterval(() => {}, 1000);`,
    ],
  ] as const;

const gone = (pid: number) => {
  if (!pidAlive(pid)) return true;
  // A zombie still answers signal 0: it is gone once nobody will wait on it.
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
};

/** The child's stdout lines, through the guard's. */
function lines(stdout: NodeJS.ReadableStream) {
  const seen: string[] = [];
  createInterface({ input: stdout }).on('line', (l) => seen.push(l));
  return { seen, until: (line: string) => until(`the line ${line}`, () => (seen.includes(line) ? true : undefined)) };
}

describe('the testkit guard', () => {
  it("reports the child's own pid and passes on its exit code, or the signal that ended it", async () => {
    const exits3 = await startGuarded('/bin/sh', ['-c', 'echo $$; exit 3'], { stdout: 'pipe' });
    const out = lines(exits3.guard.stdout!);
    expect(await exits3.exited).toEqual({ code: 3, signal: null });
    await until('the pid line', () => (out.seen.length > 0 ? true : undefined));
    expect(Number(out.seen[0])).toBe(exits3.pid);

    const sleeper = await startGuarded('/bin/sleep', ['600']);
    expect(sleeper.pid).not.toBe(sleeper.guard.pid);
    process.kill(sleeper.pid, 'SIGKILL');
    expect(await sleeper.exited).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('stop() sends the stop signal, and a paused child keeps its guard until then', async () => {
    const [cmd, args] = handling('SIGINT');
    const child = await startGuarded(cmd, [...args], { stdout: 'pipe', stopSignal: 'INT' });
    const out = lines(child.guard.stdout!);
    await out.until('ready');
    process.kill(child.pid, 'SIGSTOP');
    await until('the child stopped', () =>
      /^\d+ \(.*\) T/.test(readFileSync(`/proc/${child.pid}/stat`, 'utf8')) ? true : undefined,
    );
    process.kill(child.pid, 'SIGCONT');
    // Had the guard taken the pause for an end, it would have exited with SIGSTOP's status and the child never heard SIGINT.
    expect(await child.stop()).toEqual({ code: 0, signal: null });
    await out.until('got SIGINT');
  });

  it('stops a child left paused: the stop signal, then SIGCONT so it takes effect', async () => {
    const [cmd, args] = handling('SIGTERM');
    const child = await startGuarded(cmd, [...args], { stdout: 'pipe' });
    const out = lines(child.guard.stdout!);
    await out.until('ready');
    process.kill(child.pid, 'SIGSTOP');
    await until('the child stopped', () =>
      /^\d+ \(.*\) T/.test(readFileSync(`/proc/${child.pid}/stat`, 'utf8')) ? true : undefined,
    );
    expect(await within(child.stop(), 10_000, 'the paused child stopping')).toEqual({ code: 0, signal: null });
    await out.until('got SIGTERM');
  });

  it('stops the child when its owner is killed with SIGKILL', async () => {
    const [cmd, args] = handling('SIGTERM');
    const script = `import(${JSON.stringify(GUARD)}).then(async (m) => { const g = await m.startGuarded(${JSON.stringify(cmd)}, ${JSON.stringify(args)}); console.log(g.pid); setInterval(() => {}, 1000); });`;
    const owner = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const ownerExited = new Promise((resolve) => owner.once('exit', resolve));
    const pid = await new Promise<number>((resolve, reject) => {
      createInterface({ input: owner.stdout! }).once('line', (line) => resolve(Number(line)));
      void ownerExited.then(() => reject(new Error('the owner exited before its child was up')));
    });
    expect(gone(pid)).toBe(false);
    owner.kill('SIGKILL');
    await ownerExited;
    await until('the orphaned child to be stopped', () => (gone(pid) ? true : undefined), 10_000);
  });
});
