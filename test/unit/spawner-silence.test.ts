import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { buildCli } from '../support/cli.js';
import { until } from '../../src/testkit/poll.js';
import { processApi, spawnServer, spawnSpawner, type ServerProcess, type SpawnerProcess } from '../support/process.js';
import { tempHome } from '../support/server.js';

/**
 * A command stream that goes silent: the server sends a keep-alive every heartbeat
 * (`BEIDOU_SPAWNER_HEARTBEAT_S`), and a spawner that hears nothing for three of them drops
 * the stream and reconnects. TCP alone would not tell it: a paused server (SIGSTOP here; a
 * frozen VM) keeps its socket open, and a balancer keeps a connection to a server it has
 * marked down. The subject is the spawner's side, so this runs on the embedded store only.
 */

let server: ServerProcess | null = null;
let spawner: SpawnerProcess | null = null;
const dirs: string[] = [];
afterEach(async () => {
  spawner?.child.kill('SIGKILL');
  if (server) {
    server.child.kill('SIGCONT');
    server.child.kill('SIGKILL');
    await server.exited;
  }
  server = null;
  spawner = null;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('a silent command stream', { timeout: 60_000 }, () => {
  it('a spawner that hears nothing for three heartbeats (the server paused) says so, reconnects, and is connected again once the server resumes', async () => {
    buildCli(false);
    const home = tempHome();
    dirs.push(home);
    server = await spawnServer(home, { BEIDOU_SPAWNER_HEARTBEAT_S: '1' });
    const api = processApi(home, () => server!);
    const work = mkdtempSync(path.join(os.tmpdir(), 'beidou-silence-'));
    dirs.push(work);
    const scriptFile = path.join(work, 'script.json');
    writeFileSync(scriptFile, JSON.stringify({}));
    const token = (await api('POST', '/spawner-tokens', {})).token as string;
    spawner = spawnSpawner(server.url, token, scriptFile);
    const connected = async () =>
      ((await api('GET', '/spawners')).spawners as Array<{ connected: boolean }>).some((s) => s.connected);
    await until('the spawner connected', async () => ((await connected()) ? true : undefined), 20_000);
    // Its heartbeats (every second once it has read the hello, which sets the interval) reach the server.
    const beat = async () =>
      ((await api('GET', '/spawners')).spawners as Array<{ last_heartbeat_at: number }>)[0]?.last_heartbeat_at ?? 0;
    const first = await until('a heartbeat', async () => ((await beat()) > 0 ? beat() : undefined), 20_000);
    await until('a later heartbeat', async () => ((await beat()) > first ? true : undefined), 20_000);
    // Keep-alives every second hold a quiet stream open: nothing went silent so far.
    expect(spawner.stderr()).not.toMatch(/went silent/);

    server.child.kill('SIGSTOP');
    await until(
      'the spawner says the stream went silent',
      () => (/went silent/.test(spawner!.stderr()) ? true : undefined),
      20_000,
    );
    expect(spawner.stderr()).toMatch(
      new RegExp(
        `the command stream from ${server.url.replace(/[.]/g, '\\.')} went silent \\(no word, not even a keep-alive, for 3 s: .*\\); retrying in \\d+(\\.\\d+)? s`,
      ),
    );
    expect(spawner.child.exitCode).toBeNull();

    server.child.kill('SIGCONT');
    await until('the spawner connected again', async () => ((await connected()) ? true : undefined), 20_000);
    expect(spawner.child.exitCode).toBeNull();
  });
});
