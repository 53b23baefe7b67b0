import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { inject } from 'vitest';
import { createDatabase, dropDatabase, quoteIdent, withClient } from '../../src/testkit/postgres.js';

/**
 * The store the integration tests run against: `BEIDOU_TEST_STORE=postgres` (the vitest
 * project `postgres`) points every test server at a database of its own on the test run's
 * PostgreSQL (test/support/postgres-global.ts); unset, the embedded store (JSONL files and
 * SQLite in the home). A home names its database, so a restart on the same home finds the
 * same state, as the embedded store finds its files.
 */

export type StoreKind = 'embedded' | 'postgres';
export const STORE: StoreKind = process.env.BEIDOU_TEST_STORE === 'postgres' ? 'postgres' : 'embedded';

/** The databases this test file created: dropped when it ends (test/support/postgres-file.ts). */
const created = new Map<string, Promise<void>>();

export const databaseName = (home: string) =>
  `beidou_${createHash('sha256').update(path.resolve(home)).digest('hex').slice(0, 20)}`;

/** The URL of the database of `home`, created (from template0) the first time. */
export async function databaseUrlFor(home: string): Promise<string> {
  const { adminUrl } = inject('postgres');
  const name = databaseName(home);
  if (!created.has(name)) created.set(name, createDatabase(adminUrl, name));
  await created.get(name);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** A fresh database of its own (dropped with the file's others), for a test that drives the store directly. */
export async function freshDatabase(): Promise<{ url: string; name: string }> {
  const key = `fresh-${process.pid}-${Date.now()}-${Math.random()}`;
  return { url: await databaseUrlFor(key), name: databaseName(key) };
}

export async function dropCreatedDatabases(): Promise<void> {
  if (created.size === 0) return;
  const { adminUrl } = inject('postgres');
  for (const [db, creation] of created) {
    await creation.catch(() => undefined);
    await dropDatabase(adminUrl, db);
  }
  created.clear();
}

/** What a server (in process or a child) needs in its environment to use this home's store. */
export async function storeEnv(home: string): Promise<Record<string, string>> {
  return STORE === 'postgres' ? { BEIDOU_DATABASE_URL: await databaseUrlFor(home), ...replicaSecrets(home) } : {};
}

/**
 * With a database URL the server takes its signing secret and admin token from the
 * environment (every replica the same); a home's are derived from its path, so a restart
 * on that home, or a second replica given them, signs and checks alike.
 */
export function replicaSecrets(home: string): { BEIDOU_SECRET: string; BEIDOU_ADMIN_TOKEN: string } {
  const of = (what: string) =>
    createHash('sha256')
      .update(`${what}:${path.resolve(home)}`)
      .digest('base64url');
  return { BEIDOU_SECRET: of('secret') + of('secret2'), BEIDOU_ADMIN_TOKEN: `bdu_admin_${of('admin')}` };
}

/** Runs `fn` on the home's database (postgres only). */
export async function withDatabase<T>(home: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  return withClient(await databaseUrlFor(home), fn);
}

/** Rows of the rollups of `home`, by `?`-parameterised SQL that both SQLite and PostgreSQL run. */
export async function rollupRows(
  home: string,
  sql: string,
  params: unknown[] = [],
): Promise<Array<Record<string, unknown>>> {
  if (STORE === 'embedded') {
    const db = new Database(path.join(home, 'stats.db'), { readonly: true });
    try {
      return db.prepare(sql).all(...params) as Array<Record<string, unknown>>;
    } finally {
      db.close();
    }
  }
  let n = 0;
  const text = sql.replace(/\?/g, () => `$${++n}`);
  return withDatabase(home, async (client) => {
    // bigint columns (token counts) as numbers, as SQLite gives them.
    const { rows } = await client.query({
      text,
      values: params,
      types: {
        getTypeParser: (oid, format) => (oid === 20 ? Number : pg.types.getTypeParser(oid, format)),
      } as pg.CustomTypesConfig,
    });
    return rows as Array<Record<string, unknown>>;
  });
}

/**
 * Every event of a task as the store holds it (read behind the server's back: the JSONL
 * file's lines, or the rows of `events`), for a test that kills the server.
 */
export async function storedEvents(home: string, taskId: string): Promise<Array<Record<string, any>>> {
  if (STORE === 'embedded') {
    const file = path.join(home, 'events', `${taskId}.jsonl`);
    if (!existsSync(file)) return [];
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as Record<string, any>);
  }
  return withDatabase(home, async (client) => {
    const { rows } = await client.query<{ body: Record<string, any> }>(
      'SELECT body FROM events WHERE task_id = $1 ORDER BY seq',
      [taskId],
    );
    return rows.map((r) => r.body);
  });
}

/** A task's stored plan copies as file names (`{plan_id}.json`, `{plan_id}.removed.json`), whichever the store. */
export async function storedPlans(home: string, taskId: string): Promise<string[]> {
  if (STORE === 'embedded') {
    const dir = path.join(home, 'plans', taskId);
    return existsSync(dir) ? readdirSync(dir).sort() : [];
  }
  return withDatabase(home, async (client) => {
    const { rows } = await client.query<{ plan_id: string; removed: boolean }>(
      'SELECT plan_id, removed_at IS NOT NULL AS removed FROM plans WHERE task_id = $1',
      [taskId],
    );
    return rows.map((r) => `${r.plan_id}${r.removed ? '.removed' : ''}.json`).sort();
  });
}

/** Where the store keeps a plan: what `plan_path` says. */
export function planLocation(home: string, taskId: string, planId: string): string {
  return STORE === 'embedded'
    ? path.join(home, 'plans', taskId, `${planId}.json`)
    : `postgres:plans/${taskId}/${planId}`;
}

export { quoteIdent };
