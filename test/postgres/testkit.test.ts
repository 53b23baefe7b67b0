import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { findPostgresBin, PostgresMissingError, sweepStaleClusters } from '../../src/testkit/postgres.js';
import { buildCli } from '../support/cli.js';
import { until } from '../../src/testkit/poll.js';

/**
 * The test PostgreSQL itself (src/testkit/postgres.ts): missing binaries are named with the
 * package to install, and a cluster never outlives the process that started it, SIGKILL
 * included, nor blocks the next run.
 */

const TESTKIT = path.resolve(import.meta.dirname, '../../dist/testkit/postgres.js');

// The child runs the compiled testkit.
beforeAll(() => buildCli(false), 120_000);

describe('the test PostgreSQL', () => {
  it('names the package to install when the server binaries are missing', () => {
    expect(() => findPostgresBin('/nonexistent/postgresql')).toThrow(PostgresMissingError);
    expect(() => findPostgresBin('/nonexistent/postgresql')).toThrow(
      'PostgreSQL server binaries (initdb, postgres) not found under /nonexistent/postgresql/*/bin: install them with `apt-get install postgresql` (Debian 12: postgresql-15)',
    );
    expect(findPostgresBin()).toMatch(/^\/usr\/lib\/postgresql\/[\d.]+\/bin$/);
  });

  it('stops when the process that started it is killed with SIGKILL, and the next start sweeps its folder', async () => {
    const script = `import(${JSON.stringify(TESTKIT)}).then(async (m) => { const p = await m.startPostgres(); console.log(p.port + ' ' + p.dataDir); setInterval(() => {}, 1000); });`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const [port, dataDir] = await new Promise<[number, string]>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once('line', (line) => {
        const [p, d] = line.split(' ');
        resolve([Number(p), d!]);
      });
      void exited.then(() => reject(new Error('the child exited before its PostgreSQL was up')));
    });
    const connects = async () => {
      const client = new pg.Client({
        connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`,
        connectionTimeoutMillis: 2000,
      });
      client.on('error', () => undefined);
      try {
        await client.connect();
        await client.end();
        return true;
      } catch {
        return false;
      }
    };
    expect(await connects()).toBe(true);

    child.kill('SIGKILL');
    await exited;
    // The guard saw its pipe close and shut the postmaster down.
    await until(
      'the orphaned PostgreSQL to stop',
      async () => (!(await connects()) && !existsSync(path.join(dataDir, 'postmaster.pid')) ? true : undefined),
      20_000,
    );
    const folder = path.dirname(dataDir);
    expect(existsSync(folder)).toBe(true);
    sweepStaleClusters(path.dirname(folder));
    expect(existsSync(folder)).toBe(false);
  });
});
