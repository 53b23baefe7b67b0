import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../config.js';
import { startServer } from '../server/server.js';
import { until } from '../testkit/poll.js';
import { createLogger, scrubTokens } from '../util/logger.js';

/**
 * Section 10: what an agent's output costs its spawner. The token scrub on hostile text (the
 * pattern it replaced next to it), and the heartbeat gap of a real `beidou spawner` while its
 * command agent prints lines of 1 MB of `eyJ…` (cut to 64 KiB, scrubbed, logged at info):
 * the heartbeats are timed as the server's request log sees them arrive.
 */

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'main.js');

/** The token pattern before the scan (src/util/logger.ts), for comparison only. */
const OLD_PATTERN = /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}/g;

export interface ScrubFigure {
  chars: number;
  scanMs: number;
  /** The old pattern's time, when measured (it is quadratic: only the small input). */
  oldMs: number | null;
}

const timed = (fn: () => void): number => {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
};

/** The scan and the old pattern on `eyJ` repeated (one run, no dot: the old pattern's worst case). */
export function scrubTimes(sizes: number[], oldUpTo: number): ScrubFigure[] {
  return sizes.map((chars) => {
    const text = 'eyJ'.repeat(Math.ceil(chars / 3)).slice(0, chars);
    scrubTokens(text); // warm
    const scanMs = Math.min(...[0, 1, 2].map(() => timed(() => scrubTokens(text))));
    const oldMs = chars <= oldUpTo ? timed(() => text.replace(OLD_PATTERN, '[redacted-token]')) : null;
    return { chars, scanMs, oldMs };
  });
}

/** Hostile texts of each shape the scrub cuts, a unit repeated. */
const SHAPES: Record<string, string> = {
  'JWT fragments': 'eyJaaaa.eyJa ',
  'JWTs split at an escaped line break': 'eyJaaaa.\\n',
  'whole JWTs': 'eyJaaaa.bbbb.cccc ',
  dots: '.',
  'admin token prefixes': 'bdu_admin_',
};

/**
 * The scan on `chars` characters of each shape, one after the other in one process, twice
 * each: a time in proportion to the text is the claim (a JIT state left by the shapes before
 * once made `indexOf(…, from)` cost the rest of the text at each call: seconds for 250 kB).
 */
export function scrubShapeTimes(chars: number): Array<{ shape: string; ms: number }> {
  return Object.entries(SHAPES).map(([shape, unit]) => {
    const text = unit.repeat(Math.ceil(chars / unit.length)).slice(0, chars);
    scrubTokens(text);
    return {
      shape,
      ms: Math.min(
        timed(() => scrubTokens(text)),
        timed(() => scrubTokens(text)),
      ),
    };
  });
}

export interface HeartbeatFigure {
  heartbeatMs: number;
  lines: number;
  lineBytes: number;
  /** Heartbeat intervals from the first line printed to the agent's last event posted. */
  gapsMs: number[];
  lost: boolean;
}

/**
 * A server (in process, heartbeat `heartbeatS`) and a real spawner process whose command
 * agent prints `lines` lines of `lineBytes` bytes of `eyJ`, then an event line; the
 * heartbeat intervals the server saw from the agent's start until that event arrived.
 */
export async function heartbeatGap(heartbeatS: number, lines: number, lineBytes: number): Promise<HeartbeatFigure> {
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-output-'));
  const beats: number[] = [];
  const requestLog = {
    write(line: string) {
      if (!line.includes('/api/spawner/heartbeat')) return;
      const entry = JSON.parse(line) as { msg?: string; req?: { url?: string } };
      if (entry.msg === 'request' && entry.req?.url === '/api/spawner/heartbeat') beats.push(performance.now());
    },
  };
  const server = await startServer(
    loadConfig({ port: '0', home }, { BEIDOU_SPAWNER_HEARTBEAT_S: String(heartbeatS) }),
    { logger: createLogger('trace', requestLog) },
  );
  const agent = path.join(home, 'loud-agent.mjs');
  writeFileSync(
    agent,
    [
      `const line = 'eyJ'.repeat(${Math.ceil(lineBytes / 3)}).slice(0, ${lineBytes});`,
      `for (let i = 0; i < ${lines}; i++) process.stdout.write(line + '\\n');`,
      `process.stdout.write(JSON.stringify({ event: 'assistant_text', message_id: 'done', text: 'done', stop_reason: 'end_turn' }) + '\\n');`,
      'process.stdin.resume();',
    ].join('\n'),
  );
  const admin = (route: string, body: unknown) =>
    fetch(`${server.url}/api${route}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    }).then((res) => res.json() as Promise<Record<string, string>>);
  const { token } = (await admin('/spawner-tokens', {})) as { token: string };
  const child = spawn(
    process.execPath,
    [
      MAIN,
      'spawner',
      '--server',
      server.url,
      '--token',
      token,
      '--adapter',
      'command',
      '--command',
      `"${process.execPath}" "${agent}"`,
      '--spool-dir',
      path.join(home, 'spool'),
      '--workdir',
      path.join(home, 'agents'),
    ],
    { env: { ...process.env, BEIDOU_LOG_LEVEL: 'info', BEIDOU_LOG_FORMAT: 'json' }, stdio: 'ignore' },
  );
  try {
    const { task_id: taskId } = (await admin('/tasks', { task: 'print a lot' })) as { task_id: string };
    const log = server.services.registry.log;
    const seen = (name: string, where: (e: Record<string, unknown>) => boolean = () => true) =>
      log.read(taskId, 0, 100_000).some((e) => e.event === name && where(e as unknown as Record<string, unknown>));
    await until('the agent started', () => (seen('agent_started') ? true : undefined), 30_000);
    const from = performance.now();
    await until(
      "the agent's last event (or its spawner lost)",
      () => (seen('assistant_text') || seen('spawner.lost') ? true : undefined),
      120_000,
    );
    const to = performance.now();
    // The beat after the event closes the last interval that overlapped the lines.
    const count = beats.length;
    await until('one more heartbeat', () => (beats.length > count ? true : undefined), 30_000);
    const gapsMs: number[] = [];
    for (let i = 1; i < beats.length; i++) {
      if (beats[i]! >= from && beats[i - 1]! <= to) gapsMs.push(beats[i]! - beats[i - 1]!);
    }
    return { heartbeatMs: heartbeatS * 1000, lines, lineBytes, gapsMs, lost: seen('spawner.lost') };
  } finally {
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
    await server.close();
    rmSync(home, { recursive: true, force: true });
  }
}
