// In src/ (not test/support/) so the bench, compiled from src/, can run against the PostgreSQL the tests use.
import { execFileSync } from 'node:child_process';
import {
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startGuarded } from './guard.js';
import { until } from './poll.js';
import { pidAlive } from '../util/process.js';
import { freePort } from './ports.js';

/**
 * A real PostgreSQL server for tests and the bench: Debian's binaries
 * (`/usr/lib/postgresql/<version>/bin`) run into a temp folder by an unprivileged user
 * (PostgreSQL refuses to run as root), on a free loopback port with its socket folder
 * given by `-k`, `fsync` left on. One server per test run; each test server gets a
 * database of its own (`createDatabase`).
 *
 * It must never outlive the process that started it, however that process ends: the
 * postmaster runs under the testkit's guard shell (./guard.ts), which stops it (fast
 * shutdown) when our pipe to it closes, SIGKILL of the test run included. A cluster left
 * behind anyway (the guard killed too) has a folder of its own and a port of its own, so
 * it cannot block the next run, and the next start sweeps it away.
 */

const DIR_PREFIX = 'beidou-pg-';
/** The unprivileged user that runs the server when we are root. */
const PG_USER = 'beidou-pg';
/** The superuser role `initdb` creates (trust auth on loopback only). */
const ROLE = 'postgres';

export class PostgresMissingError extends Error {
  constructor(searched: string) {
    super(
      `PostgreSQL server binaries (initdb, postgres) not found under ${searched}: install them with \`apt-get install postgresql\` (Debian 12: postgresql-15)`,
    );
  }
}

/** The newest `/usr/lib/postgresql/<version>/bin` holding `initdb` and `postgres`, or a clear error. */
export function findPostgresBin(root = '/usr/lib/postgresql'): string {
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter(
          (v) => existsSync(path.join(root, v, 'bin', 'initdb')) && existsSync(path.join(root, v, 'bin', 'postgres')),
        )
        .sort((a, b) => Number.parseFloat(b) - Number.parseFloat(a))
    : [];
  if (versions.length === 0) throw new PostgresMissingError(`${root}/*/bin`);
  return path.join(root, versions[0]!, 'bin');
}

export interface TestPostgres {
  host: string;
  port: number;
  user: string;
  /** The folder of its unix socket (`-k`). */
  socketDir: string;
  dataDir: string;
  /** The server's log (stderr): statements logged with `log_statement` land here, prefixed with the database and application name. */
  logFile: string;
  /** A connection URL for `database`. */
  url(database: string): string;
  stop(): Promise<void>;
}

/** Who runs the server: ourselves, or an unprivileged system user when we are root. */
function serverUser(): string | null {
  if (process.getuid?.() !== 0) return null;
  try {
    execFileSync('id', ['-u', PG_USER], { stdio: 'ignore' });
    return PG_USER;
  } catch {
    // Created once per machine; nobody's home or shell is touched.
  }
  try {
    execFileSync(
      'useradd',
      ['--system', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', PG_USER],
      { stdio: 'ignore' },
    );
    return PG_USER;
  } catch {
    return 'nobody';
  }
}

function asUser(user: string | null, command: string, args: string[]): [string, string[]] {
  return user ? ['runuser', ['-u', user, '--', command, ...args]] : [command, args];
}

/**
 * Clusters of earlier runs whose owner is gone (the guard could not stop them: it was
 * killed too): their postmaster is stopped and their folder removed.
 */
export function sweepStaleClusters(tmp = os.tmpdir()): void {
  for (const name of readdirSync(tmp)) {
    if (!name.startsWith(DIR_PREFIX)) continue;
    const dir = path.join(tmp, name);
    let owner: number;
    try {
      owner = Number.parseInt(readFileSync(path.join(dir, 'owner.pid'), 'utf8'), 10);
    } catch {
      continue; // not ours, or still being set up
    }
    if (Number.isInteger(owner) && pidAlive(owner)) continue;
    try {
      const postmaster = Number.parseInt(
        readFileSync(path.join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]!,
        10,
      );
      if (Number.isInteger(postmaster) && pidAlive(postmaster)) process.kill(postmaster, 'SIGQUIT'); // immediate shutdown
    } catch {
      // no postmaster left
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface StartPostgresOptions {
  /** Extra `-c name=value` settings. */
  settings?: Record<string, string>;
}

export async function startPostgres(opts: StartPostgresOptions = {}): Promise<TestPostgres> {
  const bin = findPostgresBin();
  sweepStaleClusters();
  const user = serverUser();
  const dir = mkdtempSync(path.join(os.tmpdir(), DIR_PREFIX));
  writeFileSync(path.join(dir, 'owner.pid'), `${process.pid}\n`);
  const dataDir = path.join(dir, 'data');
  const socketDir = path.join(dir, 'sock');
  const logFile = path.join(dir, 'postgres.log');
  mkdirSync(socketDir);
  writeFileSync(logFile, '');
  if (user) {
    const id = (flag: string) => Number.parseInt(execFileSync('id', [flag, user], { encoding: 'utf8' }), 10);
    for (const p of [dir, socketDir, logFile]) chownSync(p, id('-u'), id('-g'));
  }
  // --no-sync: only initdb's final flush of the fresh cluster is skipped; the server keeps fsync on.
  const [initCmd, initArgs] = asUser(user, path.join(bin, 'initdb'), [
    '-D',
    dataDir,
    '-U',
    ROLE,
    '--auth=trust',
    '-E',
    'UTF8',
    '--locale=C',
    '--no-sync',
  ]);
  try {
    execFileSync(initCmd, initArgs, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${(err as { stderr?: Buffer }).stderr?.toString() ?? (err as Error).message}`);
  }

  const settings: Record<string, string> = {
    listen_addresses: '127.0.0.1',
    fsync: 'on',
    max_connections: '300',
    // Each line names its database and connection, so a test can pick out its own statements.
    log_line_prefix: '%m [%p] db=%d app=%a ',
    ...opts.settings,
  };
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const args = [
      '-D',
      dataDir,
      '-p',
      String(port),
      '-k',
      socketDir,
      ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`]),
    ];
    // Neither the guard nor its pipe may keep a finished test run alive.
    const postmaster = await startGuarded(path.join(bin, 'postgres'), args, {
      stopSignal: 'INT',
      stderrFile: logFile,
      user,
      detached: true,
      keepsOwnerAlive: false,
    });
    const url = (database: string) => `postgres://${ROLE}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
    try {
      await until(
        `PostgreSQL to accept connections on port ${port}`,
        async () => {
          if (postmaster.exitCode())
            throw new Error(`postgres exited at start: ${readFileSync(logFile, 'utf8').slice(-2000)}`);
          const client = new pg.Client({ connectionString: url('postgres') });
          client.on('error', () => undefined);
          try {
            await client.connect();
            await client.end();
            return true;
          } catch {
            return undefined;
          }
        },
        30_000,
      );
    } catch (err) {
      await postmaster.stop();
      if (attempt < 3 && /could not bind|Address already in use/.test(readFileSync(logFile, 'utf8'))) continue; // the port was taken meanwhile
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    let stopping: Promise<void> | null = null;
    return {
      host: '127.0.0.1',
      port,
      user: ROLE,
      socketDir,
      dataDir,
      logFile,
      url,
      stop: () =>
        (stopping ??= (async () => {
          await postmaster.stop();
          rmSync(dir, { recursive: true, force: true });
        })()),
    };
  }
}

/** A fresh, empty database (from `template0`); `adminUrl` names any database of the server. */
export async function createDatabase(adminUrl: string, name: string): Promise<void> {
  await withClient(adminUrl, (c) => c.query(`CREATE DATABASE ${quoteIdent(name)} TEMPLATE template0`));
}

/** Drops a database, ending whatever connections it still has. */
export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  await withClient(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`));
}

export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

export const quoteIdent = (name: string) => `"${name.replace(/"/g, '""')}"`;
