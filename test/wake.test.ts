import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { liveSessions, pidAlive, type ClaudeSession } from '../src/cli/wake/claude-sessions.js';
import { WakeState } from '../src/cli/wake/wake-state.js';
import { CLAUDE, claudeEnv, settleClaudeHome, startTmuxClaude, type TmuxClaude } from './support/claude-tmux.js';
import { eventsNamed, waitForEvent, type AnyEvent } from './support/events.js';
import { lastUserText, resultText, startFakeAnthropic, toolResults, type FakeAnthropic, type RecordedRequest } from './support/fake-anthropic.js';
import { until } from './support/poll.js';
import { CLI } from './support/process.js';
import { agentToken, connectAgent, createTask, removeHome, startTestServer, type TestAgent, type TestServer } from './support/server.js';

/**
 * A message wakes an idle Claude Code session the user runs (docs/claude-code.md): the real
 * Claude Code binary, interactive under tmux, set up by `beidou attach`, against the real
 * server and a scripted stand-in for the Messages API. Every wait is on something observed:
 * a request the stand-in recorded, an event in the task's log, a file or process state.
 */

const STEP_MS = 30_000;

interface Setup {
  ts: TestServer;
  fake: FakeAnthropic;
  home: string;
  project: string;
  env: Record<string, string>;
  task: { task_id: string; root_agent_id: string; token: string };
}

describe('a message wakes an idle Claude Code session (beidou attach)', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function setup(opts: { bypass?: boolean; extraEnv?: Record<string, string> } = {}): Promise<Setup> {
    const ts = await startTestServer();
    cleanups.push(async () => {
      await ts.close();
      removeHome(ts.home);
    });
    const fake = await startFakeAnthropic();
    cleanups.push(() => fake.close());
    const home = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'beidou-wake-home-')));
    cleanups.push(() => rmSync(home, { recursive: true, force: true, maxRetries: 3 }));
    const project = path.join(home, 'project');
    mkdirSync(project);
    settleClaudeHome(home, { projects: [project], bypass: opts.bypass });
    const env = claudeEnv(fake, home, { PATH: `${path.dirname(CLAUDE)}${path.delimiter}${process.env.PATH ?? ''}`, ...opts.extraEnv });
    const task = await createTask(ts, { task: 'work with me' });
    return { ts, fake, home, project, env, task };
  }

  /** The CLI as a child process (asynchronously: the server runs in this process). */
  function beidou(s: Setup, args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      execFile(process.execPath, [CLI, ...args, '--server', s.ts.url, '--home', s.ts.home], { cwd: s.project, env: s.env, encoding: 'utf8', timeout: STEP_MS }, (err, stdout, stderr) =>
        resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
  }

  async function attach(s: Setup): Promise<string> {
    const r = await beidou(s, ['attach', '--agent', s.task.root_agent_id, '--claude-bin', CLAUDE]);
    expect(r.status, r.stderr).toBe(0);
    return r.stdout;
  }

  function startClaude(s: Setup, args: string[] = []): TmuxClaude {
    const claude = startTmuxClaude(s.project, s.env, args);
    cleanups.push(async () => {
      const pids = liveSessions(s.env).filter((x) => x.cwd === s.project).map((x) => x.pid);
      claude.kill();
      // Its files are written until it is gone; the throwaway HOME is removed after.
      await until('Claude Code to exit', () => (pids.some(pidAlive) ? undefined : true), STEP_MS);
    });
    return claude;
  }

  /** The live session Claude Code registered for the project, once it is idle. */
  async function idleSession(s: Setup, claude: TmuxClaude): Promise<ClaudeSession> {
    return until(
      `an idle Claude Code session in ${s.project}; pane:\n${claude.capture()}`,
      () => liveSessions(s.env).find((x) => x.cwd === s.project && x.status === 'idle'),
      STEP_MS,
    );
  }

  /** Sends, then waits for the model request the doorbell starts; returns how long that took. */
  async function wakeBy(s: Setup, send: () => Promise<string>): Promise<{ ms: number; messageId: string; request: RecordedRequest }> {
    const before = s.fake.requests.length;
    const t0 = Date.now();
    const messageId = await send();
    const request = await s.fake.waitForRequest((r) => s.fake.requests.indexOf(r) >= before && r.kind === 'scripted', {
      timeoutMs: STEP_MS,
      what: 'the model request of the woken session',
    });
    return { ms: Date.now() - t0, messageId, request };
  }

  /** The session's read_inbox result, from the request that follows the read_inbox turn. */
  async function readInboxResult(s: Setup, turn: number): Promise<any> {
    const after = await s.fake.waitForTurn(turn + 1, { timeoutMs: STEP_MS });
    const toolUseId = s.fake.scripted().find((r) => r.turn === turn)!.toolUseIds![0]!;
    const result = toolResults(after.body).find((b) => b.tool_use_id === toolUseId);
    expect(result, JSON.stringify(after.body.messages.at(-1))).toBeDefined();
    expect(result!.is_error ?? false, resultText(result!)).toBe(false);
    return JSON.parse(resultText(result!));
  }

  /** What went on, for a failure message: the pane and the wake folder's files. */
  function diagnose(s: Setup, claude: TmuxClaude): string {
    const dir = path.join(s.ts.home, 'wake');
    const files = existsSync(dir) ? readdirSync(dir) : [];
    const logs = files.filter((f) => f.endsWith('.log')).map((f) => `--- ${f}\n${readFileSync(path.join(dir, f), 'utf8')}`);
    return `pane:\n${claude.capture()}\nwake files: ${files.join(' ')}\n${logs.join('\n')}`;
  }

  const delivered = (events: AnyEvent[], messageId: string) => eventsNamed(events, 'agent_input', (e) => (e.message_ids ?? [e.message_id]).includes(messageId));

  /**
   * The session idle at its prompt: a message from the user (REST) and one from another agent
   * (send_message) each start a model request within 5 s; the session's read_inbox returns
   * each message once. Returns the session, and the pid of what woke it.
   */
  async function twoWakes(s: Setup, claude: TmuxClaude, path: 'socket' | 'rewake') {
    s.fake.push(
      { tools: [{ name: 'mcp__beidou__read_inbox', input: {} }] },
      { text: 'Read the first message.' },
      { tools: [{ name: 'mcp__beidou__read_inbox', input: {} }] },
      { text: 'Read the second message.' },
    );
    const session = await idleSession(s, claude);
    const state = new WakeState(s.ts.home);
    const waker = () => state.sessionWake(`pid:${session.pid}`) ?? state.sessionWake(`sid:${session.sessionId}`) ?? undefined;
    const wake = await until(`the session's ${path} waker`, waker, STEP_MS).catch((err: Error) => {
      throw new Error(`${err.message}\n${diagnose(s, claude)}`);
    });
    expect(wake).toMatchObject({ path, agent_id: s.task.root_agent_id });
    const check = await beidou(s, ['attach', '--check', '--claude-bin', CLAUDE]);
    expect(check.stdout, check.stderr).toMatch(new RegExp(`^${path}\t`));

    // 1. From the user, through the REST API.
    const first = await wakeBy(s, async () => {
      const res = await s.ts.api('POST', `/agents/${s.task.root_agent_id}/send`, { content: 'first: from the user' });
      expect(res.status).toBe(200);
      return res.body.message_id as string;
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n${diagnose(s, claude)}`);
    });
    expect(first.request.turn).toBe(0);
    expect(first.ms).toBeLessThan(5_000);
    expect(lastUserText(first.request.body)).toMatch(/\[Beidou\] 1 new message from user: call mcp__beidou__read_inbox/);
    expect(lastUserText(first.request.body)).not.toContain('first: from the user');
    const inbox1 = await readInboxResult(s, 0);
    expect(inbox1.messages.map((m: any) => m.content)).toEqual(['first: from the user']);

    // 2. From another agent of the task, through send_message.
    const root = await connectAgent(s.ts.url, s.task.token);
    cleanups.push(() => root.close());
    const made = await root.call('create_team', { name: 'helpers', task: 'help', roles: [{ role: 'helper', skill: 'worker', description: 'helps' }] });
    expect(made.ok, JSON.stringify(made)).toBe(true);
    const team = (made as { value: any }).value;
    const helperId: string = team.members?.[0]?.agent_id ?? team.agents?.[0]?.agent_id;
    const helper: TestAgent = await connectAgent(s.ts.url, await agentToken(s.ts, helperId));
    cleanups.push(() => helper.close());
    // Idle again, and (rewake) the waiter the last Stop re-armed is in place.
    await s.fake.waitForTurn(1);
    await idleSession(s, claude);
    await until('a waker for the next message', () => (waker()?.pid && (path === 'socket' || waker()!.pid !== wake.pid) ? true : undefined), STEP_MS);
    const second = await wakeBy(s, async () => {
      const sent = await helper.call('send_message', { to: s.task.root_agent_id, content: 'second: from the helper' });
      expect(sent.ok, JSON.stringify(sent)).toBe(true);
      return (sent as { value: { message_id: string } }).value.message_id;
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n${diagnose(s, claude)}`);
    });
    expect(second.request.turn).toBe(2);
    expect(second.ms).toBeLessThan(5_000);
    expect(lastUserText(second.request.body)).toMatch(/\[Beidou\] 1 new message from helper/);
    const inbox2 = await readInboxResult(s, 2);
    expect(inbox2.messages.map((m: any) => m.content)).toEqual(['second: from the helper']);

    // Each message delivered exactly once, by the session's read_inbox.
    await waitForEvent(s.ts, s.task.task_id, (e) => delivered([e], second.messageId).length > 0, { what: 'the second delivery' });
    const events = (await s.ts.api('GET', `/tasks/${s.task.task_id}/events?since=0&limit=10000`)).body.events as AnyEvent[];
    expect(delivered(events, first.messageId)).toHaveLength(1);
    expect(delivered(events, second.messageId)).toHaveLength(1);
    // Taken by the session's own read_inbox: the doorbell carried no message.
    expect([...delivered(events, first.messageId), ...delivered(events, second.messageId)].map((e) => e.via)).toEqual(['read_inbox', 'read_inbox']);
    return { session, wake };
  }

  it('socket: a REST message and a send_message each wake the idle session within 5 s; read_inbox returns each once; the relay ends with the session', async () => {
    const s = await setup();
    const printed = await attach(s);
    expect(printed).toContain(`attached ${s.task.root_agent_id}`);

    // No file in the project holds the token; the token file is 0600 and outside it.
    const tokenFile = path.join(s.ts.home, 'agents', `${s.task.root_agent_id}.token`);
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    const token = readFileSync(tokenFile, 'utf8').trim();
    const settingsText = readFileSync(path.join(s.project, '.claude', 'settings.local.json'), 'utf8');
    expect(settingsText).not.toContain(token);
    const settings = JSON.parse(settingsText);
    expect(settings.permissions.allow).toContain('mcp__beidou__*');
    expect(Object.keys(settings.hooks).sort()).toEqual(['PostToolUse', 'PreToolUse', 'SessionStart', 'Stop']);
    const claudeJson = readFileSync(path.join(s.home, '.claude.json'), 'utf8');
    expect(claudeJson).toContain(`${s.ts.url}/mcp`);
    expect(claudeJson).not.toContain(token);

    const claude = startClaude(s);
    const { session, wake } = await twoWakes(s, claude, 'socket');

    // The relay ends with the session.
    claude.kill();
    await until('the relay to exit with its session', () => (pidAlive(wake.pid) ? undefined : true), STEP_MS);
    expect(new WakeState(s.ts.home).relayOf(session.messagingSocketPath!)).toBeNull();
  }, 180_000);

  it('rewake: with the socket switched off (CLAUDE_CODE_HARBOR_KITE=0) the asyncRewake hooks wake the idle session, re-armed at each Stop', async () => {
    const s = await setup({ extraEnv: { CLAUDE_CODE_HARBOR_KITE: '0' } });
    await attach(s);
    const claude = startClaude(s);
    const { session, wake } = await twoWakes(s, claude, 'rewake');
    expect(session.messagingSocketPath).toBeNull();
    claude.kill();
    await until('the waiter to end with its session', () => (pidAlive(wake.pid) ? undefined : true), STEP_MS);
  }, 180_000);

  it('bypass-permissions: the doorbell attests the session\'s mode, so the session takes it instead of holding it', async () => {
    const s = await setup({ bypass: true, extraEnv: { IS_SANDBOX: '1' } });
    await attach(s);
    const claude = startClaude(s, ['--permission-mode', 'bypassPermissions']);
    await twoWakes(s, claude, 'socket');
    expect(claude.capture()).not.toMatch(/Held peer message/);
  }, 180_000);
});
