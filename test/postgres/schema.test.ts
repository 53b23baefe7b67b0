import { afterEach, describe, expect, it } from 'vitest';
import { migrate, MIGRATIONS, MigrationError, SchemaTooNewError } from '../../src/store/postgres/schema.js';
import { startServer, type BeidouServer } from '../../src/server/server.js';
import { loadConfig } from '../../src/config.js';
import { withClient } from '../../src/testkit/postgres.js';
import { pino } from 'pino';
import { freshDatabase, replicaSecrets } from '../support/store.js';
import { removeHome, tempHome } from '../support/server.js';

/**
 * The PostgreSQL store's schema migrations against a real server: a fresh database, one
 * already migrated, two starts at once, a database newer than the code, and a migration
 * that fails (rolled back whole).
 */

const LATEST = MIGRATIONS.at(-1)!.version;

async function applied(url: string): Promise<Array<{ version: number; name: string }>> {
  return withClient(
    url,
    async (c) => (await c.query('SELECT version, name FROM schema_migrations ORDER BY version')).rows,
  );
}

async function tables(url: string): Promise<string[]> {
  return withClient(url, async (c) =>
    (await c.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")).rows.map(
      (r) => r.tablename,
    ),
  );
}

const servers: BeidouServer[] = [];
const homes: string[] = [];
afterEach(async () => {
  await Promise.allSettled(servers.splice(0).map((s) => s.close()));
  for (const home of homes.splice(0)) removeHome(home);
});

function start(url: string): Promise<BeidouServer> {
  const home = tempHome();
  homes.push(home);
  return startServer(loadConfig({ port: '0', home, databaseUrl: url }, replicaSecrets(home)), {
    logger: pino({ level: 'silent' }),
  });
}

describe('schema migrations', () => {
  it('migrate a fresh database to the latest version, then find nothing to do', async () => {
    const { url } = await freshDatabase();
    const first = await withClient(url, (c) => migrate(c));
    expect(first).toEqual({ applied: MIGRATIONS.map((m) => m.version), version: LATEST });
    expect(await applied(url)).toEqual(MIGRATIONS.map(({ version, name }) => ({ version, name })));
    expect(await tables(url)).toEqual([
      'agents',
      'archived_tasks',
      'events',
      'log_tasks',
      'log_writer',
      'plans',
      'questions',
      'schema_migrations',
      'tasks',
      'teams',
    ]);

    const stamps = await withClient(
      url,
      async (c) => (await c.query('SELECT applied_at FROM schema_migrations ORDER BY version')).rows,
    );
    expect(await withClient(url, (c) => migrate(c))).toEqual({ applied: [], version: LATEST });
    expect(
      await withClient(
        url,
        async (c) => (await c.query('SELECT applied_at FROM schema_migrations ORDER BY version')).rows,
      ),
    ).toEqual(stamps);
  });

  it('two migrations at once take turns: each version is applied once', async () => {
    const { url } = await freshDatabase();
    const reports = await Promise.all([withClient(url, (c) => migrate(c)), withClient(url, (c) => migrate(c))]);
    expect(reports.map((r) => r.applied).sort((a, b) => b.length - a.length)).toEqual([
      MIGRATIONS.map((m) => m.version),
      [],
    ]);
    expect((await applied(url)).map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
  });

  it('two servers starting at once on a fresh database: the schema is migrated once, one is active, the other a standby', async () => {
    const { url } = await freshDatabase();
    const started = await Promise.all([start(url), start(url)]);
    servers.push(...started);
    expect(started.map((s) => s.role()).sort()).toEqual(['active', 'standby']);
    expect((await applied(url)).map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
    const health = await Promise.all(started.map(async (s) => (await fetch(`${s.url}/api/health`)).status));
    expect(health.sort()).toEqual([200, 503]);
  });

  it('refuses a database migrated by a newer beidou, and the server does not start on it', async () => {
    const { url } = await freshDatabase();
    await withClient(url, (c) => migrate(c));
    await withClient(url, (c) =>
      c.query("INSERT INTO schema_migrations (version, name) VALUES ($1, 'from the future')", [LATEST + 1]),
    );
    await expect(withClient(url, (c) => migrate(c))).rejects.toThrow(SchemaTooNewError);
    await expect(start(url)).rejects.toThrow(
      `the database's schema is at version ${LATEST + 1}, newer than this beidou knows (${LATEST}): run a beidou at least as new as the one that migrated it`,
    );
  });

  it('a migration that fails is rolled back whole; the ones before it stay applied', async () => {
    const { url } = await freshDatabase();
    const broken = [
      ...MIGRATIONS,
      { version: LATEST + 1, name: 'broken', sql: 'CREATE TABLE half_done (x int); SELECT 1 / 0;' },
    ];
    const error = await withClient(url, (c) => migrate(c, broken)).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(MigrationError);
    expect((error as Error).message).toBe(
      `schema migration ${LATEST + 1} (broken) failed and was rolled back: division by zero`,
    );
    expect((await applied(url)).map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
    expect(await tables(url)).not.toContain('half_done');
    // The advisory lock was released: the next start migrates as usual.
    expect(await withClient(url, (c) => migrate(c))).toEqual({ applied: [], version: LATEST });
  });
});
