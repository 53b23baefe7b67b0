import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { beidou, buildCli, CliChild, closedPort } from '../support/cli.js';
import { removeHome, tempHome } from '../support/server.js';
import { databaseUrlFor, replicaSecrets, rollupRows, withDatabase } from '../support/store.js';

/**
 * `beidou serve --database-url` and `beidou stats rebuild --database-url` as a person runs
 * them, against the test run's real PostgreSQL: where it listens, a second server refused,
 * the rebuild refused while a server runs and done once it stopped, and an unreachable
 * database named without its password.
 */

beforeAll(() => buildCli(false), 120_000);

const LISTENING = /^beidou listening on (http:\/\/127\.0\.0\.1:\d+)$/;
const children: CliChild[] = [];
const homes: string[] = [];
afterEach(async () => {
  await Promise.allSettled(children.splice(0).map((c) => c.stop()));
  for (const home of homes.splice(0)) removeHome(home);
});

function newHome(): string {
  const home = tempHome();
  homes.push(home);
  return home;
}

/** The secrets every replica of one database shares (with a database URL, from the environment only). */
const SHARED = replicaSecrets('/pg-cli');

async function serve(home: string, url: string): Promise<{ child: CliChild; url: string; role: string }> {
  const child = new CliChild(['serve', '--port', '0', '--home', home, '--database-url', url], SHARED);
  children.push(child);
  const first = await child.waitForLine((_l, i) => i === 0);
  const m = LISTENING.exec(first);
  if (!m) throw new Error(`unexpected first line: ${first}\n${child.stderr}`);
  const role = await child.waitForLine((_l, i) => i === 2);
  return { child, url: m[1]!, role };
}

describe('beidou serve and stats rebuild with --database-url', { timeout: 60_000 }, () => {
  it('serves from the database; a second server on it is a standby; stats rebuild is refused while one is active, then rebuilds the rollup tables', async () => {
    const home = newHome();
    const url = await databaseUrlFor(home);
    const shown = url; // it carries no password
    const server = await serve(home, url);
    expect(server.role).toMatch(/^role: active \(lease epoch \d+, as \S+\)$/);
    const admin = readFileSync(path.join(home, 'admin.token'), 'utf8').trim();
    expect(admin).toBe(SHARED.BEIDOU_ADMIN_TOKEN);
    const created = await fetch(`${server.url}/api/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ task: 'kept in PostgreSQL', spawn: false }),
    });
    expect(created.status).toBe(201);
    const task = (await created.json()) as { task_id: string };
    expect(
      await withDatabase(
        home,
        async (c) =>
          (await c.query('SELECT count(*)::int AS n FROM events WHERE task_id = $1', [task.task_id])).rows[0].n,
      ),
    ).toBeGreaterThan(0);

    // Another home, the same database: a standby, which says so and points at the active one.
    const second = await serve(newHome(), url);
    expect(second.role).toMatch(/^role: standby \(the lease is held by \S+; taking over when it expires\)$/);
    expect((await fetch(`${second.url}/api/health`)).status).toBe(503);
    await second.child.stop('SIGTERM');

    // Without the shared secrets in the environment, a server on a database does not start.
    const bare = await beidou(['serve', '--port', '0', '--home', newHome(), '--database-url', url]);
    expect(bare).toMatchObject({
      code: 2,
      stdout: '',
      stderr:
        'beidou: with a database URL, BEIDOU_SECRET and BEIDOU_ADMIN_TOKEN must be set in the environment (the same on every replica)\n',
    });

    const refused = await beidou(['stats', 'rebuild', '--database-url', url]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/is in use by another beidou server .*: stop it before rebuilding the rollups\n$/);

    expect(await server.child.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    await withDatabase(home, (c) => c.query('DELETE FROM tasks'));
    const rebuilt = await beidou(['stats', 'rebuild'], { BEIDOU_DATABASE_URL: url });
    expect(rebuilt).toEqual({
      code: 0,
      stdout: `rebuilt the rollup tables of ${shown}: 1 tasks, 0 teams, 1 agents, 0 questions\n`,
      stderr: '',
    });
    expect(await rollupRows(home, 'SELECT task_id, text FROM tasks')).toEqual([
      { task_id: task.task_id, text: 'kept in PostgreSQL' },
    ]);
  });

  it('an unreachable database exits 2 with one line naming it, without its password', async () => {
    const port = await closedPort();
    const run = await beidou(
      [
        'serve',
        '--port',
        '0',
        '--home',
        newHome(),
        '--database-url',
        `postgres://beidou:hunter2-secret@127.0.0.1:${port}/beidou`,
      ],
      SHARED,
    );
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(
      new RegExp(
        `^beidou: cannot connect to the database postgres://beidou@127\\.0\\.0\\.1:${port}/beidou: .*ECONNREFUSED.*\\n$`,
      ),
    );
    expect(run.stderr).not.toContain('hunter2');
  });
});
