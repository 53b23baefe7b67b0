import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CLI, spawnServer, type ServerProcess } from '../support/process.js';
import { removeHome, tempHome } from '../support/server.js';

/**
 * One writer per home, as real processes: a second `beidou serve` is refused while the
 * first holds the home's lock, the OS frees it when the holder is SIGKILLed, and `beidou
 * doctor` finds, and with --repair cuts back, a damaged task log (refused, like `stats
 * rebuild`, while a server runs). Embedded store only (vitest.config.ts): `beidou doctor`
 * repairs `events/*.jsonl`; one server per database is in test/postgres/log.test.ts and
 * test/postgres/cli.test.ts.
 */

const ROOT = path.resolve(import.meta.dirname, '../..');

beforeAll(() => {
  // `npm test` builds first; build again so a bare `vitest run` tests the current source.
  try {
    execFileSync('npx', ['tsc', '-b'], { cwd: ROOT, stdio: 'pipe' });
  } catch (err) {
    if (!existsSync(CLI)) throw new Error(`build failed and ${CLI} is missing: ${String(err)}`);
  }
}, 120_000);

/** A CLI command to its end (killed after 20 s: a `serve` that was not refused runs on). */
function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, BEIDOU_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const deadline = setTimeout(() => child.kill('SIGKILL'), 20_000);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(deadline);
      resolve({ code, stdout, stderr });
    }),
  );
}

const nonEmpty = (text: string) => text.split('\n').filter((l) => l.length > 0);

describe('one writer per home', { timeout: 60_000 }, () => {
  let home = '';
  const running: ServerProcess[] = [];
  afterEach(async () => {
    for (const s of running.splice(0)) {
      if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
      await s.exited;
    }
    removeHome(home);
  });
  const serve = async () => {
    const s = await spawnServer(home);
    running.push(s);
    return s;
  };
  const stop = async (s: ServerProcess) => {
    s.child.kill('SIGTERM');
    expect(await s.exited).toBe(0);
  };
  const api = async (s: ServerProcess, method: string, route: string, body?: unknown) => {
    const token = readFileSync(path.join(home, 'admin.token'), 'utf8').trim();
    const res = await fetch(`${s.url}/api${route}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('refuses a second server on the same home with exit 2 naming the home and the pid; SIGKILL of the holder frees it', async () => {
    home = tempHome();
    const first = await serve();
    const second = await cli(['serve', '--port', '0', '--home', home]);
    expect(second.code).toBe(2);
    expect(second.stdout).toBe('');
    const lines = nonEmpty(second.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(home);
    expect(lines[0]).toContain(`pid ${first.child.pid}`);
    expect((await api(first, 'GET', '/health')).status).toBe(200);

    // The lock is the OS's: a holder killed without any clean-up leaves the home free.
    first.child.kill('SIGKILL');
    await first.exited;
    const third = await serve();
    expect((await api(third, 'GET', '/health')).status).toBe(200);
    // The third took the lock on a lock.db that already existed (its transaction wrote nothing): held all the same.
    const fourth = await cli(['serve', '--port', '0', '--home', home]);
    expect(fourth.code).toBe(2);
    expect(nonEmpty(fourth.stderr)[0]).toContain(`pid ${third.child.pid}`);
    await stop(third);
  });

  it('doctor reports a damaged task log; --repair and stats rebuild refuse while a server runs; --repair backs it up and cuts it back', async () => {
    home = tempHome();
    let server = await serve();
    const damaged = (await api(server, 'POST', '/tasks', { task: 'to be damaged', spawn: false })).body;
    const intact = (await api(server, 'POST', '/tasks', { task: 'intact', spawn: false })).body;
    for (const n of [1, 2])
      expect((await api(server, 'POST', `/agents/${damaged.root_agent_id}/send`, { content: `m${n}` })).status).toBe(
        200,
      );
    await stop(server);

    expect(await cli(['doctor', '--home', home])).toMatchObject({
      code: 0,
      stdout: expect.stringContaining('no problems'),
    });

    // The last message's line is garbage: the task is quarantined, the other one runs.
    const file = path.join(home, 'events', `${damaged.task_id}.jsonl`);
    const original = nonEmpty(readFileSync(file, 'utf8'));
    const corrupted = `${[...original.slice(0, -1), '{"seq":'].join('\n')}\n`;
    writeFileSync(file, corrupted);
    const check = await cli(['doctor', '--home', home]);
    expect(check.code).toBe(1);
    expect(nonEmpty(check.stdout)[0]).toBe(`${file}:${original.length}: not valid JSON`);

    server = await serve();
    const listed = (await api(server, 'GET', '/tasks')).body.tasks as Array<Record<string, any>>;
    expect(listed.find((t) => t.task_id === damaged.task_id)).toMatchObject({
      status: 'quarantined',
      quarantine: { file, line: original.length },
    });
    expect(listed.find((t) => t.task_id === intact.task_id)).toMatchObject({ status: 'running' });

    for (const args of [
      ['doctor', '--repair'],
      ['stats', 'rebuild'],
    ]) {
      const refused = await cli([...args, '--home', home]);
      expect(refused.code, args.join(' ')).toBe(2);
      expect(refused.stderr).toContain(home);
      expect(refused.stderr).toContain(`pid ${server.child.pid}`);
    }
    expect(readFileSync(file, 'utf8')).toBe(corrupted);
    await stop(server);

    const repaired = await cli(['doctor', '--repair', '--home', home]);
    expect(repaired.code).toBe(0);
    const backups = readdirSync(path.join(home, 'events')).filter((n) => n.startsWith(`${damaged.task_id}.jsonl.bak-`));
    expect(backups).toHaveLength(1);
    expect(readFileSync(path.join(home, 'events', backups[0]!), 'utf8')).toBe(corrupted);
    expect(repaired.stdout).toContain(backups[0]);
    expect(nonEmpty(readFileSync(file, 'utf8'))).toEqual(original.slice(0, -1));
    expect(await cli(['doctor', '--home', home])).toMatchObject({ code: 0 });
    expect(await cli(['stats', 'rebuild', '--home', home])).toMatchObject({ code: 0 });

    // The server loads the repaired task as an ordinary one, with what was kept.
    server = await serve();
    const detail = (await api(server, 'GET', `/tasks/${damaged.task_id}`)).body;
    expect(detail).not.toHaveProperty('quarantine');
    expect(detail.task.status).toBe('running');
    expect(detail.agents[0].inbox_depth).toBe(1);
    expect(
      (await api(server, 'POST', `/agents/${damaged.root_agent_id}/send`, { content: 'after repair' })).status,
    ).toBe(200);
    await stop(server);
  });
});
