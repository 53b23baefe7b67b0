import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';
import { liveSessions, type ClaudeSession } from '../../src/cli/wake/claude-sessions.js';
import { WakeState, type SessionWake } from '../../src/cli/wake/wake-state.js';
import {
  CLAUDE,
  claudeEnv,
  settleClaudeHome,
  startTmuxClaude,
  type TmuxClaude,
} from '../../src/testkit/claude-tmux.js';
import {
  resultText,
  startFakeAnthropic,
  toolResults,
  type FakeAnthropic,
  type RecordedRequest,
} from '../../src/testkit/fake-anthropic.js';
import { until } from '../../src/testkit/poll.js';
import { pidAlive } from '../../src/util/process.js';
import { CLI } from './process.js';

/**
 * A project folder attached to a Beidou agent, and the real Claude Code run in it under
 * tmux against a scripted Messages API stand-in: what the wake tests share
 * (test/claude-code/wake.test.ts, test/claude-code/wake-faults.test.ts). The server is in this process or a child
 * process; `server()` is asked each time, so it may be restarted.
 */
export const STEP_MS = 30_000;

export interface RigServer {
  url: string;
  home: string;
  api(method: string, route: string, body?: unknown): Promise<{ status: number; body: any }>;
}

export interface RigOptions {
  bypass?: boolean;
  extraEnv?: Record<string, string>;
}

export class WakeRig {
  private readonly cleanups: Array<() => Promise<void> | void> = [];

  private constructor(
    readonly server: () => RigServer,
    readonly fake: FakeAnthropic,
    readonly home: string,
    readonly project: string,
    readonly env: Record<string, string>,
    readonly task: { task_id: string; root_agent_id: string; token: string },
  ) {}

  static async create(server: () => RigServer, opts: RigOptions = {}): Promise<WakeRig> {
    const fake = await startFakeAnthropic();
    const home = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'beidou-wake-home-')));
    const project = path.join(home, 'project');
    mkdirSync(project);
    settleClaudeHome(home, { projects: [project], bypass: opts.bypass });
    const env = claudeEnv(fake, home, {
      PATH: `${path.dirname(CLAUDE)}${path.delimiter}${process.env.PATH ?? ''}`,
      ...opts.extraEnv,
    });
    const res = await server().api('POST', '/tasks', { task: 'work with me', spawn: false });
    if (res.status !== 201) throw new Error(`task creation failed: ${res.status} ${JSON.stringify(res.body)}`);
    const rig = new WakeRig(server, fake, home, project, env, res.body);
    rig.cleanups.push(
      () => fake.close(),
      () => rmSync(home, { recursive: true, force: true, maxRetries: 3 }),
    );
    return rig;
  }

  onClose(cleanup: () => Promise<void> | void): void {
    this.cleanups.push(cleanup);
  }

  async close(): Promise<void> {
    for (const c of this.cleanups.splice(0).reverse()) await c();
  }

  get state(): WakeState {
    return new WakeState(this.server().home);
  }

  /** The CLI as a child process (asynchronously: the server may run in this process). */
  beidou(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
    const { url, home } = this.server();
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [CLI, ...args, '--server', url, '--home', home],
        { cwd: this.project, env: this.env, encoding: 'utf8', timeout: STEP_MS },
        (err, stdout, stderr) => resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
  }

  async attach(): Promise<string> {
    const r = await this.beidou(['attach', '--agent', this.task.root_agent_id, '--claude-bin', CLAUDE]);
    expect(r.status, r.stderr).toBe(0);
    return r.stdout;
  }

  startClaude(args: string[] = []): TmuxClaude {
    const claude = startTmuxClaude(this.project, this.env, args);
    this.cleanups.push(async () => {
      const pids = liveSessions(this.env)
        .filter((x) => x.cwd === this.project)
        .map((x) => x.pid);
      claude.kill();
      // Its files are written until it is gone; the throwaway HOME is removed after.
      await until('Claude Code to exit', () => (pids.some((pid) => pidAlive(pid)) ? undefined : true), STEP_MS);
    });
    return claude;
  }

  /** The live session Claude Code registered for the project, once it is idle. */
  idleSession(claude: TmuxClaude): Promise<ClaudeSession> {
    return until(
      `an idle Claude Code session in ${this.project}; pane:\n${claude.capture()}`,
      () => liveSessions(this.env).find((x) => x.cwd === this.project && x.status === 'idle'),
      STEP_MS,
    );
  }

  /** What wakes the session (its relay or rewake waiter), as recorded in the wake folder. */
  waker(session: ClaudeSession): SessionWake | undefined {
    return (
      this.state.sessionWake(`pid:${session.pid}`) ??
      (session.sessionId ? this.state.sessionWake(`sid:${session.sessionId}`) : null) ??
      undefined
    );
  }

  /** Sends, then waits for the model request the doorbell starts; returns how long that took. */
  async wakeBy(
    claude: TmuxClaude,
    send: () => Promise<string>,
  ): Promise<{ ms: number; messageId: string; request: RecordedRequest }> {
    const before = this.fake.requests.length;
    const t0 = Date.now();
    const messageId = await send();
    const request = await this.fake
      .waitForRequest((r) => this.fake.requests.indexOf(r) >= before && r.kind === 'scripted', {
        timeoutMs: STEP_MS,
        what: 'the model request of the woken session',
      })
      .catch((err: Error) => {
        throw new Error(`${err.message}\n${this.diagnose(claude)}`);
      });
    return { ms: Date.now() - t0, messageId, request };
  }

  /** The session's read_inbox result, from the request that follows the read_inbox turn. */
  async readInboxResult(turn: number): Promise<any> {
    const after = await this.fake.waitForTurn(turn + 1, { timeoutMs: STEP_MS });
    const toolUseId = this.fake.scripted().find((r) => r.turn === turn)!.toolUseIds![0]!;
    const result = toolResults(after.body).find((b) => b.tool_use_id === toolUseId);
    expect(result, JSON.stringify(after.body.messages.at(-1))).toBeDefined();
    expect(result!.is_error ?? false, resultText(result!)).toBe(false);
    return JSON.parse(resultText(result!));
  }

  /** What went on, for a failure message: the pane and the wake folder's files. */
  diagnose(claude: TmuxClaude): string {
    const dir = this.state.dir;
    const files = existsSync(dir) ? readdirSync(dir) : [];
    const logs = files
      .filter((f) => f.endsWith('.log'))
      .map((f) => `--- ${f}\n${readFileSync(path.join(dir, f), 'utf8')}`);
    return `pane:\n${claude.capture()}\nwake files: ${files.join(' ')}\n${logs.join('\n')}`;
  }
}
