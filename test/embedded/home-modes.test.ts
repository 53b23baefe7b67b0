import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { buildCli } from '../support/cli.js';
import { CLI } from '../support/process.js';
import { connectAgent, removeHome, tempHome } from '../support/server.js';

/**
 * The home is the server's alone: a real `beidou serve` (under umask 022, the usual one, so
 * nothing here comes from the umask) creates it 0700 and every file it writes 0600: the event
 * logs, the plans (removed ones too), `stats.db` with its `-wal` and `-shm` (the rollups and
 * the archive index), the home lock and its pid file, `secret` and `admin.token`. A home an
 * older version left open to others is set to 0700 at start, with a warning, and every file of
 * the server in it to 0600 (folders 0700), the ones it does not open again included. Embedded store only: the PostgreSQL store keeps these in the database.
 */

beforeAll(() => buildCli(false), 120_000);

interface Served {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  stop(): Promise<number | null>;
}

async function serve(ctx: TestContext, home: string): Promise<Served> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('BEIDOU_')) env[k] = v;
  const child = spawn(
    '/bin/sh',
    ['-c', 'umask 022 && exec "$0" "$@"', process.execPath, CLI, 'serve', '--port', '0', '--home', home],
    { env: { ...env, BEIDOU_LOG_LEVEL: 'warn', BEIDOU_LOG_FORMAT: 'json' }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  ctx.onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^beidou listening on (http:\/\/\S+)$/.exec(line);
      if (m) resolve(m[1]!);
    });
    void exited.then((code) => reject(new Error(`serve exited ${code}: ${stderr}`)));
  });
  return {
    child,
    url,
    stderr: () => stderr,
    stop: () => {
      child.kill('SIGTERM');
      return exited;
    },
  };
}

/** Every folder and file under `dir` with its mode, relative to it. */
function modes(dir: string): Record<string, string> {
  const out: Record<string, string> = { '.': (statSync(dir).mode & 0o777).toString(8) };
  const walk = (rel: string) => {
    for (const entry of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const name = path.join(rel, entry.name);
      out[name] = (statSync(path.join(dir, name)).mode & 0o777).toString(8);
      if (entry.isDirectory()) walk(name);
    }
  };
  walk('');
  return out;
}

/** What `found` (modes()) should be: every folder 0700, every file 0600. */
const expected = (home: string, found: Record<string, string>) =>
  Object.fromEntries(
    Object.keys(found).map((name) => [
      name,
      name === '.' || statSync(path.join(home, name)).isDirectory() ? '700' : '600',
    ]),
  );

/** Work that writes every kind of file: a task's log, a plan and a removed plan, rollups. */
async function work(url: string, home: string): Promise<{ taskId: string }> {
  const admin = readFileSync(path.join(home, 'admin.token'), 'utf8').trim();
  const res = await fetch(`${url}/api/tasks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ task: 'write private files', spawn: false }),
  });
  const created = (await res.json()) as { task_id: string; token: string };
  const root = await connectAgent(url, created.token);
  try {
    const task = (id: string) => ({ id, role: 'writer', skill: 'worker', task: `write ${id}` });
    expect((await root.call('declare_plan', { tasks: [task('c')] })).ok).toBe(true);
    expect((await root.call('remove_plan', {})).ok).toBe(true);
    expect((await root.call('declare_plan', { tasks: [task('a'), task('b')] })).ok).toBe(true);
  } finally {
    await root.close();
  }
  return { taskId: created.task_id };
}

describe("the home and its files are the server user's alone", () => {
  it('a new home is made 0700 and every file the server writes in it 0600, while it runs and after', async (ctx) => {
    const home = path.join(tempHome(), 'home');
    ctx.onTestFinished(() => removeHome(path.dirname(home)));
    const server = await serve(ctx, home);
    const { taskId } = await work(server.url, home);

    const running = modes(home);
    // What this run wrote: its log, both plans (one removed), stats.db and its WAL, the lock, the keys.
    const plans = readdirSync(path.join(home, 'plans', taskId));
    expect(plans.filter((p) => p.endsWith('.removed.json'))).toHaveLength(1);
    expect(plans).toHaveLength(2);
    expect(Object.keys(running)).toEqual(
      expect.arrayContaining([
        'events',
        `events/${taskId}.jsonl`,
        'plans',
        `plans/${taskId}`,
        ...plans.map((p) => `plans/${taskId}/${p}`),
        'stats.db',
        'stats.db-wal',
        'stats.db-shm',
        'lock.db',
        'lock.pid',
        'secret',
        'admin.token',
      ]),
    );
    expect(running).toEqual(expected(home, running));

    expect(await server.stop()).toBe(0);
    const stopped = modes(home);
    expect(stopped).toEqual(expected(home, stopped));
    expect(server.stderr()).not.toMatch(/set to 0700/);
  });

  it('a home left open to others (an older version) is set to 0700 at start, with a warning, and every file of the server in it to 0600', async (ctx) => {
    const home = tempHome();
    ctx.onTestFinished(() => removeHome(home));
    const first = await serve(ctx, home);
    const { taskId } = await work(first.url, home);
    expect(await first.stop()).toBe(0);
    // As an older beidou (or a person) left them.
    const log = path.join(home, 'events', `${taskId}.jsonl`);
    chmodSync(home, 0o755);
    chmodSync(log, 0o644);
    chmodSync(path.join(home, 'stats.db'), 0o644);
    // Files a start does not open again (a file's mode is set only when it is made): a plan,
    // the log of an archived task, an old lock.pid, a token `task start` kept; their folders.
    const plans = path.join(home, 'plans', taskId);
    for (const plan of readdirSync(plans)) chmodSync(path.join(plans, plan), 0o644);
    chmodSync(plans, 0o755);
    chmodSync(path.join(home, 'plans'), 0o755);
    chmodSync(path.join(home, 'events'), 0o755);
    writeFileSync(path.join(home, 'events', 'tsk_0123456789ab.jsonl.bak-1'), '', { mode: 0o644 });
    writeFileSync(path.join(home, 'lock.pid'), '1\n', { mode: 0o644 });
    mkdirSync(path.join(home, 'agents'), { mode: 0o755 });
    writeFileSync(path.join(home, 'agents', 'ag_0123456789ab.token'), 'x\n', { mode: 0o644 });
    chmodSync(path.join(home, 'secret'), 0o644);

    const again = await serve(ctx, home);
    expect((statSync(home).mode & 0o777).toString(8)).toBe('700');
    expect((statSync(log).mode & 0o777).toString(8)).toBe('600');
    expect((statSync(path.join(home, 'stats.db')).mode & 0o777).toString(8)).toBe('600');
    const now = modes(home);
    expect(Object.keys(now)).toEqual(
      expect.arrayContaining(['agents/ag_0123456789ab.token', 'events/tsk_0123456789ab.jsonl.bak-1', 'lock.pid']),
    );
    expect(now).toEqual(expected(home, now));
    const warnings = again
      .stderr()
      .split('\n')
      .filter((l) => l.includes('set to 0700'))
      .map((l) => JSON.parse(l));
    expect(warnings).toEqual([
      expect.objectContaining({
        level: 40,
        home,
        mode: '0755',
        msg: `the home ${home} was mode 0755, open to other users of this machine: set to 0700 (its event logs, plans and keys are the server's alone)`,
      }),
    ]);
    const code = await again.stop();
    expect(code, again.stderr()).toBe(0);
  });
});
