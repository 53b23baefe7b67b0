// In src/ (not test/support/) so the bench, compiled from src/, can put the same load balancer in front of replicas.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGuarded } from './guard.js';
import { until } from './poll.js';
import { freePort } from './ports.js';

/**
 * A real HAProxy (Debian's `haproxy` package) in front of Beidou replicas, as a deployment
 * runs it: `option httpchk GET /api/health` sends traffic only to the replica answering
 * 200 (the active one; a standby answers 503). Checks run every `checkMs` so a test sees
 * a failover at the speed the replicas manage, not the balancer's. It must not outlive
 * its owner: it runs under the testkit's guard shell (./guard.ts), which stops it when our
 * pipe to it closes (our death included).
 */

export class HaproxyMissingError extends Error {
  constructor() {
    super('haproxy not found: install it with `apt-get install haproxy`');
  }
}

export function findHaproxy(): string {
  for (const candidate of ['/usr/sbin/haproxy', '/usr/bin/haproxy', '/usr/local/sbin/haproxy']) {
    try {
      execFileSync(candidate, ['-v'], { stdio: 'ignore' });
      return candidate;
    } catch {
      // next
    }
  }
  throw new HaproxyMissingError();
}

export interface TestHaproxy {
  /** The balanced base URL (`http://127.0.0.1:PORT`). */
  url: string;
  config: string;
  /** Each backend server's state as HAProxy sees it (`UP`, `DOWN`, ...), from its stats page. */
  servers(): Promise<Array<{ name: string; status: string }>>;
  stop(): Promise<void>;
}

/** The configuration a deployment would use (examples/haproxy.cfg), with the check interval given. */
export function haproxyConfig(
  listenPort: number,
  backends: Array<{ name: string; address: string }>,
  checkMs = 1000,
  statsPort: number | null = null,
): string {
  return `global
  log stderr format raw local0 warning

defaults
  mode http
  log global
  timeout connect 2s
  timeout client 10m
  timeout server 10m
  timeout tunnel 1h
  # A request that could not reach its server goes to another one that is up.
  option redispatch
  retries 2

frontend beidou
  bind 127.0.0.1:${listenPort}
  default_backend replicas

backend replicas
  # Only the active replica answers 200 here; standbys answer 503 {"role":"standby"}.
  option httpchk GET /api/health
  http-check expect status 200
  # A replica marked down (a standby, or an active that cannot confirm its lease) has its
  # open connections cut: clients reconnect to the active one instead of waiting on it.
  default-server inter ${checkMs} fall 1 rise 1 on-marked-down shutdown-sessions
${backends.map((b) => `  server ${b.name} ${b.address} check`).join('\n')}
${statsPort === null ? '' : `\nfrontend stats\n  bind 127.0.0.1:${statsPort}\n  stats enable\n  stats uri /stats\n`}`;
}

/** Starts HAProxy in front of `backends` (`host:port` each); resolves once it accepts connections. */
export async function startHaproxy(backends: string[], opts: { checkMs?: number } = {}): Promise<TestHaproxy> {
  const bin = findHaproxy();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'beidou-haproxy-'));
  const port = await freePort();
  const statsPort = await freePort();
  const config = haproxyConfig(
    port,
    backends.map((address, i) => ({ name: `replica${i + 1}`, address })),
    opts.checkMs ?? 200,
    statsPort,
  );
  const file = path.join(dir, 'haproxy.cfg');
  writeFileSync(file, config);
  let stderr = '';
  const haproxy = await startGuarded(bin, ['-db', '-f', file], { stderr: 'pipe' });
  haproxy.guard.stderr!.on('data', (d: Buffer) => (stderr += d.toString())).on('error', () => undefined);
  const url = `http://127.0.0.1:${port}`;
  try {
    await until(
      'haproxy accepting connections',
      async () => {
        if (haproxy.exitCode()) throw new Error(`haproxy exited: ${stderr}`);
        return fetch(`${url}/api/health/live`).then(
          () => true,
          () => undefined,
        );
      },
      10_000,
    );
  } catch (err) {
    await haproxy.stop();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const servers = async () => {
    const csv = await (await fetch(`http://127.0.0.1:${statsPort}/stats;csv`)).text();
    const [head, ...rows] = csv
      .replace(/^# /, '')
      .trim()
      .split('\n')
      .map((l) => l.split(','));
    const at = (name: string) => head!.indexOf(name);
    return rows
      .filter((r) => r[at('pxname')] === 'replicas' && r[at('svname')] !== 'BACKEND')
      .map((r) => ({ name: r[at('svname')]!, status: r[at('status')]! }));
  };
  return {
    url,
    config,
    servers,
    stop: async () => {
      await haproxy.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
