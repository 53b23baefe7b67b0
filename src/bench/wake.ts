import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { BeidouServer } from '../server/server.js';
import {
  CLAUDE,
  claudeEnv,
  sessionStatus,
  settleClaudeHome,
  startTmuxClaude,
  type TmuxClaude,
} from '../testkit/claude-tmux.js';
import { resultText, startFakeAnthropic, toolResults, type FakeAnthropic } from '../testkit/fake-anthropic.js';
import { until } from '../testkit/poll.js';
import { ownProcessAlive } from '../util/process.js';

/**
 * Bench section 6: how long a message takes to wake an idle Claude Code session that
 * `beidou attach` set up (docs/claude-code.md), from `POST /api/agents/:id/send` to the
 * session's next model request as the scripted stand-in for the Messages API receives it.
 * The real Claude Code binary runs interactive under tmux with a throwaway HOME, as in
 * test/claude-code/wake.test.ts. Each woken turn calls read_inbox and ends with text, so every send
 * finds an empty inbox and an idle session.
 */

/** `socket`: the relay rings the session's messaging socket; `rewake`: the asyncRewake hook exits 2 (CLAUDE_CODE_HARBOR_KITE=0 turns the socket off). */
export type WakeWay = 'socket' | 'rewake';

export interface WakeFigures {
  latenciesMs: number[];
  /** The first wake after Claude Code started, not among the latencies (its first model request of the session). */
  firstMs: number;
  /** Woken turns whose read_inbox did not return the message sent. */
  errors: number;
}

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'main.js');
const STEP_MS = 30_000;
/**
 * The relay rings one session at most every 2 s (MIN_RING_GAP_MS, cli/wake/relay.ts), and
 * Claude Code slows down a faster sender: sends are spaced wider, so none waits on that gap
 * and each finds a session that has been idle a while, as a real one would.
 */
const PACE_MS = 2_500;

const run = promisify(execFile);

/** Why the section cannot run here, or null. */
export function wakeUnavailable(): string | null {
  if (!existsSync(CLAUDE)) return `no Claude Code binary at ${CLAUDE} (the @anthropic-ai/claude-code devDependency)`;
  try {
    execFileSync('tmux', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'tmux not found on PATH';
  }
  return null;
}

/** The pid of the live relay or rewake waiter the wake state (`<home>/wake/session-*.json`) names for this way, or undefined. */
function waker(beidouHome: string, way: WakeWay): number | undefined {
  const dir = path.join(beidouHome, 'wake');
  const names = existsSync(dir) ? readdirSync(dir).filter((n) => n.startsWith('session-') && n.endsWith('.json')) : [];
  for (const name of names) {
    try {
      const wake = JSON.parse(readFileSync(path.join(dir, name), 'utf8')) as { path?: unknown; pid?: unknown };
      if (wake.path === way && typeof wake.pid === 'number' && ownProcessAlive(wake.pid)) return wake.pid;
    } catch {
      // Being replaced (written by rename): the next probe reads it.
    }
  }
  return undefined;
}

async function createTask(server: BeidouServer): Promise<string> {
  const res = await fetch(`${server.url}/api/tasks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ task: 'bench: wake an idle Claude Code session', spawn: false }),
  });
  if (res.status !== 201) throw new Error(`task creation: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { root_agent_id: string }).root_agent_id;
}

async function send(server: BeidouServer, agentId: string, content: string): Promise<void> {
  const res = await fetch(`${server.url}/api/agents/${agentId}/send`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ content }),
  });
  if (res.status !== 200) throw new Error(`send: ${res.status} ${await res.text()}`);
  await res.body?.cancel();
}

/** `sends` wakes of one attached session (plus the first, reported apart), against `server` whose home is `beidouHome`. */
export async function wakeLatencies(
  server: BeidouServer,
  beidouHome: string,
  way: WakeWay,
  sends: number,
): Promise<WakeFigures> {
  const cleanups: Array<() => Promise<void> | void> = [];
  let claude: { tmux: TmuxClaude; pid: number } | null = null;
  try {
    const fake: FakeAnthropic = await startFakeAnthropic();
    cleanups.push(() => fake.close());
    const home = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-claude-')));
    cleanups.push(() => rmSync(home, { recursive: true, force: true, maxRetries: 3 }));
    const project = path.join(home, 'project');
    mkdirSync(project);
    settleClaudeHome(home, { projects: [project] });
    const env = claudeEnv(fake, home, {
      PATH: `${path.dirname(CLAUDE)}${path.delimiter}${process.env.PATH ?? ''}`,
      ...(way === 'rewake' ? { CLAUDE_CODE_HARBOR_KITE: '0' } : {}),
    });
    const agentId = await createTask(server);
    await run(
      process.execPath,
      [CLI, 'attach', '--agent', agentId, '--claude-bin', CLAUDE, '--server', server.url, '--home', beidouHome],
      { cwd: project, env, timeout: STEP_MS },
    );

    // Each wake: read_inbox, then a closing text, after which the session is idle again.
    for (let i = 0; i <= sends; i++)
      fake.push({ tools: [{ name: 'mcp__beidou__read_inbox', input: {} }] }, { text: `Read message ${i}.` });
    const tmux = startTmuxClaude(project, env);
    cleanups.push(() => tmux.kill());
    const pid = tmux.pid();
    claude = { tmux, pid };
    const failed = (err: Error) => new Error(`${err.message} (${way}); pane:\n${tmux.capture()}`);

    const latencies: number[] = [];
    let firstMs = NaN;
    let errors = 0;
    let lastWaker = 0;
    let lastWakeAt = -Infinity;
    for (let i = 0; i <= sends; i++) {
      // Idle, with a relay (or a rewake waiter newer than the one that fired last) following the inbox.
      const ready = await until(
        `an idle session and its ${way === 'socket' ? 'relay' : 'new rewake waiter'}`,
        () => {
          if (sessionStatus(home, pid) !== 'idle') return undefined;
          const w = waker(beidouHome, way);
          return w !== undefined && (way === 'socket' || w !== lastWaker) ? w : undefined;
        },
        STEP_MS,
      ).catch((err: Error) => Promise.reject(failed(err)));
      lastWaker = ready;
      const wait = lastWakeAt + PACE_MS - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));

      const before = fake.requests.length;
      const content = `bench wake ${i}`;
      const t0 = performance.now();
      await send(server, agentId, content);
      const request = await fake
        .waitForRequest((r) => fake.requests.indexOf(r) >= before && r.kind === 'scripted', {
          timeoutMs: STEP_MS,
          what: `the model request of wake ${i}`,
        })
        .catch((err: Error) => Promise.reject(failed(err)));
      const ms = request.at - t0;
      lastWakeAt = request.at;
      if (i === 0) firstMs = ms;
      else latencies.push(ms);

      // The turn after read_inbox carries its result: the message just sent, once.
      const turn = request.turn!;
      const after = await fake
        .waitForTurn(turn + 1, { timeoutMs: STEP_MS })
        .catch((err: Error) => Promise.reject(failed(err)));
      const toolUseId = fake.scripted().find((r) => r.turn === turn)?.toolUseIds?.[0];
      const result = toolResults(after.body).find((b) => b.tool_use_id === toolUseId);
      if (!result || result.is_error || !resultText(result).includes(content)) errors++;
    }
    return { latenciesMs: latencies, firstMs, errors };
  } finally {
    if (claude) {
      const waiting = [claude.pid, waker(beidouHome, way)].filter((p): p is number => p !== undefined);
      claude.tmux.kill();
      // Claude Code, and the relay or waiter that ends with it, go before their homes are removed.
      await until(
        'Claude Code and its waker to end',
        () => (waiting.some(ownProcessAlive) ? undefined : true),
        STEP_MS,
      ).catch(() => {});
    }
    // A cleanup that fails must not hide why the section failed.
    for (const c of cleanups.reverse())
      await Promise.resolve()
        .then(c)
        .catch((err: Error) => console.error(`  cleanup: ${err.message}`));
  }
}
