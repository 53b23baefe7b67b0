import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { StreamJsonDrain } from '../../src/spawner/drain.js';
import { findCredentials } from '../../src/spawner/preflight.js';
import { createLogger } from '../../src/util/logger.js';
import { durableEvents, waitUntil, type AnyEvent } from '../support/events.js';
import { CLI } from '../support/process.js';
import { removeHome, startTestServer, type TestServer } from '../support/server.js';

/**
 * Preflight and adapter failures: the spawner says what is wrong where the user looks. Real `beidou
 * spawner` processes (dist/), the real Claude Code binary, a real server.
 */

const CLAUDE = path.resolve(import.meta.dirname, '../../node_modules/.bin/claude');
const EXIT_BOUND_MS = 20_000;

/** The test runner's environment without anything of a Claude Code, Anthropic or Beidou setup. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(ANTHROPIC_|CLAUDE|BEIDOU_|MCP_)/.test(k) || k === 'IS_SANDBOX') continue;
    env[k] = v;
  }
  return {
    ...env,
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    BEIDOU_LOG_LEVEL: 'warn',
    ...extra,
  };
}

interface Proc {
  child: ChildProcess;
  exited: Promise<number | null>;
  stdout: () => string;
  stderr: () => string;
  stderrLines: () => string[];
}

const procs: Proc[] = [];
const dirs: string[] = [];
let ts: TestServer | undefined;

afterEach(async () => {
  // SIGTERM: a spawner kills its agents' process groups on the way out (SIGKILL would orphan them).
  for (const p of procs.splice(0)) {
    if (p.child.exitCode === null) p.child.kill('SIGTERM');
    await p.exited;
  }
  if (ts) {
    await ts.close();
    removeHome(ts.home);
    ts = undefined;
  }
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true, maxRetries: 5 });
});

function tempDir(): string {
  const d = mkdtempSync(path.join(os.tmpdir(), 'beidou-preflight-'));
  dirs.push(d);
  return d;
}

function run(args: string[], env: NodeJS.ProcessEnv): Proc {
  const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stdout = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const p = {
    child,
    exited,
    stdout: () => stdout,
    stderr: () => stderr,
    stderrLines: () => stderr.split('\n').filter((l) => l.length > 0),
  };
  procs.push(p);
  return p;
}

/** The exit code, or 'still running' if the process did not exit within the bound. */
async function exitWithin(p: Proc): Promise<number | null | 'still running'> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<'still running'>((r) => (timer = setTimeout(() => r('still running'), EXIT_BOUND_MS)));
  const out = await Promise.race([p.exited, bound]);
  clearTimeout(timer);
  return out;
}

/** A server, a spawner token and a task whose root is queued for a spawner. */
async function serverWithTask() {
  ts = await startTestServer();
  const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
  const task = (await ts.api('POST', '/tasks', { task: 'preflight' })).body as {
    task_id: string;
    root_agent_id: string;
  };
  return { ts, token, task };
}

const agentErrors = (events: AnyEvent[], id: string) =>
  events.filter((e) => e.event === 'agent_error' && e.caller_id === id);

/** A spawner with the command adapter running `command` for every agent. */
function commandSpawner(
  server: string,
  token: string,
  command: string,
  extra: string[] = [],
  env: Record<string, string> = {},
): Proc {
  return run(
    [
      'spawner',
      '--server',
      server,
      '--token',
      token,
      '--adapter',
      'command',
      '--command',
      command,
      '--workdir',
      tempDir(),
      ...extra,
    ],
    cleanEnv(env),
  );
}

describe('preflight of the claude adapter', () => {
  it('exits 2 with one line when claude is not on PATH', async () => {
    const empty = tempDir();
    const p = run(
      ['spawner', '--server', 'http://127.0.0.1:9', '--token', 'x'],
      cleanEnv({ PATH: empty, HOME: empty }),
    );
    expect(await exitWithin(p)).toBe(2);
    expect(p.stderrLines()).toEqual([
      expect.stringMatching(
        /^beidou: cannot run Claude Code: claude not found; install it .*--claude-bin PATH .*--skip-preflight/,
      ),
    ]);
  });

  it('exits 2 with one line when Claude Code runs but has no credentials', async () => {
    const home = tempDir();
    const p = run(
      ['spawner', '--server', 'http://127.0.0.1:9', '--token', 'x', '--claude-bin', CLAUDE],
      cleanEnv({ HOME: home }),
    );
    expect(await exitWithin(p)).toBe(2);
    expect(p.stderrLines()).toEqual([
      expect.stringMatching(
        /^beidou: Claude Code \(.*\) has no credentials: set ANTHROPIC_API_KEY .*\/login.*--skip-preflight/,
      ),
    ]);
  });

  it('passes with a key in the environment and serves the server', async () => {
    const { ts, token } = await serverWithTask();
    // The agent itself would fail (the key is fake): only the start matters here.
    const p = run(
      [
        'spawner',
        '--server',
        ts.url,
        '--token',
        token,
        '--claude-bin',
        CLAUDE,
        '--max-agents',
        '1',
        '--workdir',
        tempDir(),
      ],
      cleanEnv({ HOME: tempDir(), ANTHROPIC_API_KEY: 'sk-test', ANTHROPIC_BASE_URL: 'http://127.0.0.1:9' }),
    );
    await waitUntilApi(async () => ((await ts.api('GET', '/spawners')).body.spawners as unknown[]).length > 0);
    expect(p.child.exitCode).toBeNull();
    // It says what it found, where the serving line is.
    expect(p.stdout()).toMatch(/^preflight: \S+claude \d+\.\d+\.\d+.*; credentials: environment ANTHROPIC_API_KEY$/m);
  });

  it('finds a Claude Code login, an apiKeyHelper or a key in the settings, and nothing in an empty home', () => {
    const home = tempDir();
    const env = { HOME: home };
    expect(findCredentials(env)).toBeNull();
    mkdirSync(path.join(home, '.claude'));
    writeFileSync(path.join(home, '.claude', 'settings.json'), JSON.stringify({ apiKeyHelper: '/usr/local/bin/key' }));
    expect(findCredentials(env)).toBe(`apiKeyHelper in ${path.join(home, '.claude', 'settings.json')}`);
    writeFileSync(path.join(home, '.claude', 'settings.json'), JSON.stringify({ env: { ANTHROPIC_API_KEY: 'k' } }));
    expect(findCredentials(env)).toMatch(/^ANTHROPIC_API_KEY in /);
    writeFileSync(path.join(home, '.claude', 'settings.json'), '{}');
    writeFileSync(
      path.join(home, '.claude', '.credentials.json'),
      JSON.stringify({ claudeAiOauth: { accessToken: 'a', refreshToken: 'r' } }),
    );
    expect(findCredentials(env)).toBe(`login in ${path.join(home, '.claude', '.credentials.json')}`);
    expect(findCredentials({ ...env, CLAUDE_CODE_OAUTH_TOKEN: 't' })).toBe('environment CLAUDE_CODE_OAUTH_TOKEN');
  });
});

/** Polls an API condition (the spawner's connection is not an event of any task). */
async function waitUntilApi(check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('adapter failures are one line and an agent_error with a reason', () => {
  it('a missing binary (--skip-preflight): binary_missing, status error, one line per failure', async () => {
    const { ts, token, task } = await serverWithTask();
    const missing = path.join(tempDir(), 'no-such-claude');
    const p = run(
      [
        'spawner',
        '--server',
        ts.url,
        '--token',
        token,
        '--skip-preflight',
        '--claude-bin',
        missing,
        '--workdir',
        tempDir(),
      ],
      cleanEnv(),
    );
    const root = task.root_agent_id;
    // The spawner gives up after its strikes; the agent is left showing why.
    await waitUntil(
      ts,
      task.task_id,
      (ev) =>
        ev.find((e) => e.event === 'agent_completed' && e.agent_id === root && e.stop_reason === 'crash_escalated'),
      { timeoutMs: 60_000, what: 'the escalation' },
    );
    const errors = agentErrors(durableEvents(ts, task.task_id), root);
    expect(errors.length).toBeGreaterThan(0);
    expect(errors.every((e) => e.reason === 'binary_missing')).toBe(true);
    const { body: agent } = await ts.api('GET', `/agents/${root}`);
    expect(agent).toMatchObject({
      status: 'error',
      error: { reason: 'binary_missing', msg: expect.stringContaining(missing) },
    });
    const { body: detail } = await ts.api('GET', `/tasks/${task.task_id}`);
    expect(detail.agents.find((a: { agent_id: string }) => a.agent_id === root)).toMatchObject({
      status: 'error',
      error: { reason: 'binary_missing' },
    });
    // One line per failure, naming the agent, the reason and the cause.
    const failures = p.stderrLines().filter((l) => l.includes('[binary_missing]'));
    expect(failures).toHaveLength(errors.length);
    for (const l of failures)
      expect(JSON.parse(l).msg).toMatch(
        new RegExp(
          // In the sandbox bwrap runs the binary, and says it is missing.
          `^agent \\S+ \\(${root}\\) failed \\[binary_missing\\]: cannot run ${missing} \\((spawn .*ENOENT|No such file or directory)\\)`,
        ),
      );
  });

  it('a command agent exiting 1: exit_nonzero with its last stderr lines; a message after the fix relaunches it and clears the error', async () => {
    const { ts, token, task } = await serverWithTask();
    const flag = path.join(tempDir(), 'fixed');
    // Fails until the flag file exists; then idles until its input closes.
    const command = `if [ -f "${flag}" ]; then exec cat >/dev/null; fi; echo "loading config" >&2; echo "disk quota exceeded" >&2; exit 1`;
    // The sandbox hides the temporary folder: the flag's is shown to the agent.
    const p = commandSpawner(ts.url, token, command, ['--sandbox-bind', `${path.dirname(flag)}:ro`]);
    const root = task.root_agent_id;
    await waitUntil(
      ts,
      task.task_id,
      (ev) =>
        ev.find((e) => e.event === 'agent_completed' && e.agent_id === root && e.stop_reason === 'crash_escalated'),
      { timeoutMs: 60_000, what: 'the escalation' },
    );
    const errors = agentErrors(durableEvents(ts, task.task_id), root);
    expect(errors[0]).toMatchObject({
      reason: 'exit_nonzero',
      msg: 'exited with code 1: disk quota exceeded',
      stderr: 'loading config\ndisk quota exceeded',
    });
    const { body: agent } = await ts.api('GET', `/agents/${root}`);
    expect(agent).toMatchObject({
      status: 'error',
      running: false,
      error: { reason: 'exit_nonzero', stderr: 'loading config\ndisk quota exceeded' },
    });
    const failures = p.stderrLines().filter((l) => l.includes('[exit_nonzero]'));
    expect(failures).toHaveLength(errors.length);
    expect(JSON.parse(failures[0]!)).toMatchObject({
      agent: root,
      reason: 'exit_nonzero',
      msg: expect.stringMatching(/failed \[exit_nonzero\]: exited with code 1: disk quota exceeded/),
    });

    writeFileSync(flag, '');
    expect((await ts.api('POST', `/agents/${root}/send`, { content: 'try again' })).status).toBe(200);
    const seen = durableEvents(ts, task.task_id).length;
    await waitUntil(
      ts,
      task.task_id,
      (ev) => ev.slice(seen).find((e) => e.event === 'agent_input' && e.caller_id === root),
      { timeoutMs: 20_000, what: 'the message reaching the relaunched agent' },
    );
    const { body: after } = await ts.api('GET', `/agents/${root}`);
    expect(after).toMatchObject({ status: 'active', running: true, error: null });
  });

  it('an event line missing a field: the valid lines are posted, the invalid one is printed naming the field', async () => {
    const { ts, token, task } = await serverWithTask();
    const agent = path.join(tempDir(), 'agent.mjs');
    const line = (o: unknown) => `process.stdout.write(${JSON.stringify(`${JSON.stringify(o)}\n`)});`;
    writeFileSync(
      agent,
      [
        line({ event: 'assistant_text', message_id: 'm1', text: 'first', stop_reason: 'end_turn' }),
        line({ event: 'assistant_text', text: 'no stop reason', message_id: 'm2' }),
        line({ event: 'assistant_text', message_id: 'm3', text: 'third', stop_reason: 'end_turn' }),
        // Idle until terminated (stdin closes).
        'process.stdin.resume(); process.stdin.on("end", () => process.exit(0));',
      ].join('\n'),
    );
    const p = commandSpawner(ts.url, token, `"${process.execPath}" "${agent}"`, ['--sandbox-bind', `${agent}:ro`]);
    const root = task.root_agent_id;
    const texts = await waitUntil(
      ts,
      task.task_id,
      (ev) => {
        const t = ev.filter((e) => e.event === 'assistant_text' && e.caller_id === root).map((e) => e.text);
        return t.includes('third') ? t : undefined;
      },
      { what: 'the third line' },
    );
    expect(texts).toEqual(['first', 'third']);
    await expect.poll(() => p.stderrLines().filter((l) => l.includes('not posted'))).toHaveLength(1);
    const printed = JSON.parse(p.stderrLines().find((l) => l.includes('not posted'))!);
    expect(printed.msg).toBe(
      `agent ${root} printed an event the server would refuse, not posted: stop_reason: required`,
    );
    expect(printed.line).toContain('no stop reason');
  });

  it('Claude Code not logged in: not_logged_in at once, though its process stays up; status error', async () => {
    const { ts, token, task } = await serverWithTask();
    // In the sandbox (the default) Claude Code gets IS_SANDBOX=1: it refuses bypassPermissions as root without it.
    const p = run(
      [
        'spawner',
        '--server',
        ts.url,
        '--token',
        token,
        '--skip-preflight',
        '--claude-bin',
        CLAUDE,
        '--workdir',
        tempDir(),
      ],
      cleanEnv({ HOME: tempDir() }),
    );
    const root = task.root_agent_id;
    const error = await waitUntil(ts, task.task_id, (ev) => agentErrors(ev, root)[0], {
      timeoutMs: 60_000,
      what: 'the agent_error',
    });
    expect(error).toMatchObject({ reason: 'not_logged_in', msg: expect.stringContaining('Not logged in') });
    const { body: agent } = await ts.api('GET', `/agents/${root}`);
    expect(agent).toMatchObject({ status: 'error', running: true, error: { reason: 'not_logged_in' } });
    const lines = p.stderrLines().filter((l) => l.includes('[not_logged_in]'));
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!).msg).toMatch(/Claude Code is not logged in .*\/login.*ANTHROPIC_API_KEY/);
  });
});

describe('drained Claude Code results', () => {
  it('an error result is not_logged_in or api_error; a good one is neither', () => {
    const drain = new StreamJsonDrain();
    const result = (extra: Record<string, unknown>) =>
      JSON.stringify({ type: 'result', subtype: 'success', session_id: 's', ...extra });
    expect(drain.line(result({ is_error: false, result: 'done' })).failure).toBeUndefined();
    expect(drain.line(result({ is_error: true, result: 'Not logged in · Please run /login' })).failure).toEqual({
      reason: 'not_logged_in',
      detail: 'Not logged in · Please run /login',
    });
    expect(
      drain.line(
        result({ is_error: true, result: 'API Error: 529 {"type":"error","error":{"type":"overloaded_error"}}' }),
      ).failure,
    ).toMatchObject({ reason: 'api_error', detail: expect.stringContaining('529') });
    drain.line(
      JSON.stringify({
        type: 'assistant',
        error: 'authentication_failed',
        message: { id: 'x', content: [{ type: 'text', text: 'Invalid credentials' }] },
      }),
    );
    expect(drain.line(result({ is_error: true, result: 'Invalid credentials' })).failure?.reason).toBe('not_logged_in');
  });
});

describe('log formats', () => {
  it('the spawner writes JSON lines with --log-format json and readable lines with --log-format pretty', async () => {
    const { ts, token, task } = await serverWithTask();
    const command = 'echo "no such model" >&2; exit 3';
    const json = commandSpawner(ts.url, token, command, ['--log-format', 'json', '--max-agents', '1']);
    await waitUntil(ts, task.task_id, (ev) => agentErrors(ev, task.root_agent_id)[0], {
      timeoutMs: 30_000,
      what: 'the first failure',
    });
    await expect.poll(() => json.stderrLines().some((l) => l.includes('[exit_nonzero]'))).toBe(true);
    for (const l of json.stderrLines()) expect(() => JSON.parse(l)).not.toThrow();
    json.child.kill('SIGTERM');
    await json.exited;

    const task2 = (await ts.api('POST', '/tasks', { task: 'again' })).body as {
      task_id: string;
      root_agent_id: string;
    };
    const pretty = commandSpawner(ts.url, token, command, ['--log-format', 'pretty']);
    await waitUntil(ts, task2.task_id, (ev) => agentErrors(ev, task2.root_agent_id)[0], {
      timeoutMs: 30_000,
      what: 'the first failure',
    });
    await expect
      .poll(() => pretty.stderrLines().some((l) => l.includes(`(${task2.root_agent_id}) failed [exit_nonzero]`)))
      .toBe(true);
    const line = pretty.stderrLines().find((l) => l.includes(`(${task2.root_agent_id}) failed [exit_nonzero]`))!;
    expect(line).toMatch(
      /^\[\d\d:\d\d:\d\d\] ERROR: agent \S+ \(ag_\w+\) failed \[exit_nonzero\]: exited with code 3: no such model/,
    );
    expect(() => JSON.parse(line)).toThrow();
  });

  it('beidou serve: --log-format pretty writes readable lines, json JSON lines, anything else exits 2', async () => {
    for (const format of ['pretty', 'json'] as const) {
      const home = tempDir();
      const p = run(
        ['serve', '--port', '0', '--home', home, '--log-format', format],
        cleanEnv({ BEIDOU_LOG_LEVEL: 'info' }),
      );
      await expect.poll(() => p.stderrLines().length, { timeout: 15_000 }).toBeGreaterThan(0);
      const first = p.stderrLines()[0]!;
      if (format === 'pretty') {
        expect(first).toMatch(/^\[\d\d:\d\d:\d\d\] INFO: /);
        expect(() => JSON.parse(first)).toThrow();
      } else expect(JSON.parse(first)).toMatchObject({ level: 30, msg: expect.any(String) });
    }
    const bad = run(['serve', '--port', '0', '--home', tempDir(), '--log-format', 'xml'], cleanEnv());
    expect(await exitWithin(bad)).toBe(2);
    expect(bad.stderrLines()).toEqual([
      'beidou: invalid --log-format / BEIDOU_LOG_FORMAT: must be json or pretty (got "xml")',
    ]);
  });

  it('the pretty format redacts what the JSON format redacts', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const logger = createLogger('info', sink, 'pretty');
    const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ194In0.c2lnbmF0dXJlLXNlY3JldA';
    logger.info(
      { token: 'TOKEN-SECRET', headers: { authorization: 'Bearer HEADER-SECRET' }, launch: { token: 'LAUNCH-SECRET' } },
      `agent said curl -H "Authorization: Bearer ${jwt}"`,
    );
    const text = lines.join('');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^\[\d\d:\d\d:\d\d\] INFO: agent said curl/);
    expect(text).toContain('agent said curl');
    expect(text).not.toMatch(/SECRET|eyJhbGci/);
    expect(text).toContain('[redacted-token]');
  });
});
