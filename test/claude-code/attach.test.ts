import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CLAUDE, settleClaudeHome } from '../../src/testkit/claude-tmux.js';
import { CLI } from '../support/process.js';
import { handSpawner } from '../support/spawner-stream.js';
import { createTask, removeHome, startTestServer, type TestServer } from '../support/server.js';

/**
 * `beidou attach` in a folder, end to end with the real Claude Code CLI for the MCP server
 * entry (no session is started here; test/claude-code/wake.test.ts runs one): what it writes, what it
 * keeps of the user's own settings, `--check`, `--remove`, and what it refuses.
 */
describe('beidou attach', () => {
  let ts: TestServer;
  let home: string;
  let project: string;
  const HOOK = 'hook-main.js';

  beforeEach(async () => {
    ts = await startTestServer();
    home = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'beidou-attach-')));
    project = path.join(home, 'project');
    mkdirSync(project);
  });
  afterEach(async () => {
    await ts.close();
    removeHome(ts.home);
    rmSync(home, { recursive: true, force: true });
  });

  const env = (extra: Record<string, string> = {}) => {
    const e: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env))
      if (v !== undefined && !/^(ANTHROPIC_|CLAUDE|BEIDOU_)/.test(k)) e[k] = v;
    return { ...e, HOME: home, ...extra };
  };

  function beidou(
    args: string[],
    extraEnv: Record<string, string> = {},
  ): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [CLI, ...args],
        { cwd: project, env: env(extraEnv), encoding: 'utf8' },
        (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
  }
  const claude = (args: string[]): Promise<string> =>
    new Promise((resolve, reject) =>
      execFile(CLAUDE, args, { cwd: project, env: env(), encoding: 'utf8' }, (err, stdout, stderr) =>
        err ? reject(new Error(stderr || err.message)) : resolve(stdout),
      ),
    );
  const attachArgs = (agent: string, ...more: string[]) => [
    'attach',
    '--agent',
    agent,
    '--server',
    ts.url,
    '--home',
    ts.home,
    '--claude-bin',
    CLAUDE,
    ...more,
  ];
  const settingsFile = () => path.join(project, '.claude', 'settings.local.json');

  it("merges into the user's own settings, is idempotent, and --remove gives them back exactly", async () => {
    const task = await createTask(ts);
    const mine = {
      permissions: { allow: ['Bash(npm test)'], deny: ['Read(./.env)'] },
      hooks: { Stop: [{ hooks: [{ type: 'command', command: 'echo mine' }] }] },
      model: 'sonnet',
    };
    mkdirSync(path.dirname(settingsFile()));
    writeFileSync(settingsFile(), JSON.stringify(mine, null, 2));
    // Claude Code runs an MCP headers helper only in a folder the user has trusted.
    settleClaudeHome(home, { projects: [project] });

    for (let i = 0; i < 2; i++) {
      const r = await beidou(attachArgs(task.root_agent_id));
      expect(r.code, r.stderr).toBe(0);
    }
    const settings = JSON.parse(readFileSync(settingsFile(), 'utf8'));
    expect(settings.model).toBe('sonnet');
    expect(settings.permissions.allow).toEqual(['Bash(npm test)', 'mcp__beidou__*']);
    expect(settings.permissions.deny).toEqual(['Read(./.env)']);
    // Attached twice, each of ours once; the user's Stop hook kept.
    const commands = (event: string) =>
      settings.hooks[event].flatMap((g: any) => g.hooks.map((h: any) => h.command as string));
    expect(commands('Stop')[0]).toBe('echo mine');
    expect(commands('Stop').filter((c: string) => c.includes(HOOK))).toHaveLength(2);
    expect(commands('PreToolUse').filter((c: string) => c.includes(HOOK))).toHaveLength(1);
    const wait = settings.hooks.SessionStart[0].hooks[0];
    expect(wait).toMatchObject({ asyncRewake: true });
    expect(wait.command).toContain(' session-start ');

    // The MCP server in Claude Code's local scope, reading its token through the helper.
    const entry = JSON.parse(readFileSync(path.join(home, '.claude.json'), 'utf8')).projects[project].mcpServers.beidou;
    expect(entry).toMatchObject({ type: 'http', url: `${ts.url}/mcp` });
    expect(entry.headersHelper).toContain(' mcp-headers ');
    const tokenFile = path.join(ts.home, 'agents', `${task.root_agent_id}.token`);
    const token = readFileSync(tokenFile, 'utf8').trim();
    expect(JSON.stringify(entry)).not.toContain(token);
    const listed = await claude(['mcp', 'list']);
    expect(listed, listed).toMatch(/beidou: .*Connected/);

    const removed = await beidou(['attach', '--remove', '--home', ts.home, '--claude-bin', CLAUDE]);
    expect(removed.code, removed.stderr).toBe(0);
    expect(JSON.parse(readFileSync(settingsFile(), 'utf8'))).toEqual(mine);
    expect(existsSync(tokenFile)).toBe(false);
    expect(await claude(['mcp', 'list'])).not.toMatch(/beidou/);
    // Nothing left to remove: said so, exit 1.
    const again = await beidou(['attach', '--remove', '--home', ts.home, '--claude-bin', CLAUDE]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/nothing of beidou attach to remove/);
  }, 60_000);

  it('--remove deletes a settings file that held only what attach wrote', async () => {
    const task = await createTask(ts);
    expect((await beidou(attachArgs(task.root_agent_id))).code).toBe(0);
    expect((await beidou(['attach', '--remove', '--home', ts.home, '--claude-bin', CLAUDE])).code).toBe(0);
    expect(existsSync(settingsFile())).toBe(false);
  }, 60_000);

  it('--check: not attached is an error; with no session it predicts socket, or rewake with the socket switched off, or hooks-only for an old Claude Code', async () => {
    const notYet = await beidou(['attach', '--check', '--home', ts.home, '--claude-bin', CLAUDE]);
    expect(notYet.code).toBe(1);
    expect(notYet.stderr).toMatch(/is not attached: run beidou attach --agent ID/);

    const task = await createTask(ts);
    expect((await beidou(attachArgs(task.root_agent_id))).code).toBe(0);
    const check = (extra: Record<string, string> = {}, bin = CLAUDE) =>
      beidou(['attach', '--check', '--home', ts.home, '--claude-bin', bin], extra);
    expect((await check()).stdout).toMatch(/^socket\texpected with Claude Code 2\.1\.332/);
    expect((await check({ CLAUDE_CODE_HARBOR_KITE: '0' })).stdout).toMatch(/^rewake\t/);
    // A stand-in for an older Claude Code: only its version answer matters here.
    const old = path.join(home, 'old-claude');
    writeFileSync(old, '#!/bin/sh\necho "2.0.1 (Claude Code)"\n', { mode: 0o755 });
    expect((await check({}, old)).stdout).toMatch(/^hooks-only\tClaude Code 2\.0\.1 is older than 2\.1\.332/);
    const json = JSON.parse(
      (await beidou(['attach', '--check', '--json', '--home', ts.home, '--claude-bin', CLAUDE])).stdout,
    );
    expect(json).toEqual([{ path: 'socket', why: expect.stringContaining('expected') }]);
  }, 60_000);

  it('refuses, writing nothing: an unknown agent, a terminated one, one a spawner runs, a token file inside the project, no Claude Code', async () => {
    const unknown = await beidou(attachArgs('ag_nobody'));
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/404 unknown_agent/);

    const task = await createTask(ts);
    const inside = await beidou(attachArgs(task.root_agent_id, '--token-file', path.join(project, 'secrets', 'token')));
    expect(inside.code).toBe(2);
    expect(inside.stderr).toMatch(/inside this project/);

    const noClaude = await beidou([
      'attach',
      '--agent',
      task.root_agent_id,
      '--server',
      ts.url,
      '--home',
      ts.home,
      '--claude-bin',
      path.join(home, 'no-such-claude'),
    ]);
    expect(noClaude.code).toBe(2);
    expect(noClaude.stderr).toMatch(/Claude Code not found/);

    expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
    const terminated = await beidou(attachArgs(task.root_agent_id));
    expect(terminated.code).toBe(1);
    expect(terminated.stderr).toMatch(/409 agent_terminated/);

    // An agent a spawner runs: a second copy would take its mail.
    const streams: AbortController[] = [];
    try {
      const spawned = await createTask(ts, { spawn: true });
      const spawner = await handSpawner(ts, 'sp-attach', streams);
      await spawner.next('launch', spawned.root_agent_id);
      const run = await beidou(attachArgs(spawned.root_agent_id));
      expect(run.code).toBe(1);
      expect(run.stderr).toMatch(/is run by spawner .*attach an agent no spawner runs/);
    } finally {
      for (const c of streams) c.abort();
    }

    expect(existsSync(settingsFile())).toBe(false);
    const claudeJson = path.join(home, '.claude.json');
    expect(existsSync(claudeJson) ? readFileSync(claudeJson, 'utf8') : '').not.toMatch(/"beidou"/);
  }, 60_000);

  it('beidou hook: a missing token file exits 1 (never 2, which would block the tool or wake the model)', async () => {
    const r = await new Promise<{ code: number; stderr: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        [
          path.join(path.dirname(CLI), 'hook-main.js'),
          'pre-tool-use',
          '--token-file',
          path.join(home, 'missing'),
          '--server',
          ts.url,
        ],
        { encoding: 'utf8' },
        (err, _o, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
      );
      child.stdin!.end('{"tool_name":"Read"}');
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/cannot read the token file .*run beidou attach again/);
  });
});
