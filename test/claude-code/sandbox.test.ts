import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { resultText, startFakeAnthropic, toolResults, type FakeAnthropic } from '../../src/testkit/fake-anthropic.js';
import { CLAUDE, claudeEnv } from '../../src/testkit/claude-tmux.js';
import { waitForEvent } from '../support/events.js';
import { CLI } from '../support/process.js';
import { startTestServer, type TestServer } from '../support/server.js';

/**
 * Claude Code (the real binary) run by a real spawner in its sandbox, the model scripted
 * (src/testkit/fake-anthropic.ts): a prompt-injected model runs `cat` on the server's keys
 * through its Bash tool, and the tool result the model API receives carries none of them.
 * The launch prompt, 300 KiB, reaches the model from a file of the launch folder, never from
 * the command line (visible in `ps`, and capped at 128 KiB an argument).
 */

const STEP_MS = 60_000;
const procs: Array<{ child: ChildProcess; exited: Promise<unknown> }> = [];
const dirs: string[] = [];
let ts: TestServer | undefined;
let fake: FakeAnthropic | undefined;

afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.child.exitCode === null) p.child.kill('SIGTERM');
    await p.exited;
  }
  await fake?.close();
  fake = undefined;
  await ts?.close();
  ts = undefined;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Every process's command line we may read, by pid. */
function commandLines(): Map<number, string> {
  const out = new Map<number, string>();
  for (const entry of readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
    try {
      out.set(Number(entry), readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' '));
    } catch {
      // gone
    }
  }
  return out;
}

describe('Claude Code in the sandbox', () => {
  it('its Bash tool cannot cat the server’s keys, the spool token or the spawner’s environment; a 300 KiB prompt arrives from a file', async () => {
    // The server's home, the spool root and Claude Code's home outside the temporary folder,
    // so the private /tmp alone would not hide them.
    const outside = mkdtempSync(path.join(os.homedir(), '.beidou-sandbox-claude-'));
    dirs.push(outside);
    const home = path.join(outside, 'home');
    const skill = `${'Think before you act. '.repeat(14_400)}END-OF-SKILL`;
    expect(Buffer.byteLength(skill)).toBeGreaterThan(300 * 1024);
    mkdirSync(path.join(home, 'skills', 'big'), { recursive: true });
    writeFileSync(
      path.join(home, 'skills', 'big', 'SKILL.md'),
      `---\nname: big\nversion: 1\ndescription: a skill with a very long body\nallowed-tools: [Bash]\n---\n${skill}\n`,
    );
    ts = await startTestServer({ home });
    const spoolToken = path.join(outside, 'spawners', 'sandboxed', 'token');
    const pg = `canary-pgpassword-${process.pid}`;
    const cat = [
      `cat ${path.join(home, 'secret')}`,
      `cat ${path.join(home, 'admin.token')}`,
      `cat ${spoolToken}`,
      'cat /proc/$PPID/environ',
      // The spawner's pid, from the test's side (the sandbox has its own numbering).
      'cat /proc/SPAWNER_PID/environ',
      'echo "PG=$PGPASSWORD"',
      // A hook planted in the user's Claude Code folder would run unsandboxed: it never lands there.
      `mkdir -p ${path.join(outside, 'claude-home', '.claude')} && echo '{"hooks":{}}' > ${path.join(outside, 'claude-home', '.claude', 'settings.json')}`,
      `echo '{}' > ${path.join(outside, 'claude-home', '.claude.json')}`,
      'echo "CFG=$CLAUDE_CONFIG_DIR"',
      'ls /proc | grep -c "^[0-9]"',
    ].join('; ');
    fake = await startFakeAnthropic([]);
    const spawnerEnv = {
      ...claudeEnv(fake, path.join(outside, 'claude-home')),
      BEIDOU_HOME: home,
      BEIDOU_SPAWNER_HOME: path.join(outside, 'spawners'),
      BEIDOU_LOG_LEVEL: 'info',
      BEIDOU_LOG_FORMAT: 'json',
      PGPASSWORD: pg,
    };
    const spawner = spawn(
      process.execPath,
      [
        CLI,
        'spawner',
        '--server',
        ts.url,
        '--adapter',
        'claude',
        '--claude-bin',
        CLAUDE,
        '--sandbox',
        'bwrap',
        '--name',
        'sandboxed',
        '--max-agents',
        '1',
        '--workdir',
        path.join(outside, 'work'),
      ],
      { env: spawnerEnv, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let log = '';
    spawner.stderr!.on('data', (d: Buffer) => (log += d.toString()));
    procs.push({ child: spawner, exited: new Promise((r) => spawner.once('close', r)) });
    fake.push(
      { tools: [{ name: 'Bash', input: { command: cat.replace('SPAWNER_PID', String(spawner.pid)) } }] },
      { text: 'Nothing to read here.' },
    );

    const created = await ts.api('POST', '/tasks', { task: 'Look around.', skill: 'big', spawn: true });
    expect(created.status).toBe(201);
    const { task_id: taskId, root_agent_id: rootId } = created.body as { task_id: string; root_agent_id: string };

    const first = await fake.waitForTurn(0, { timeoutMs: STEP_MS });
    // The whole prompt reached the model; no command line on the machine carries it.
    expect(JSON.stringify(first.body.system)).toContain('END-OF-SKILL');
    const started = await waitForEvent(ts, taskId, (e) => e.event === 'agent_started', { what: 'agent_started' });
    expect(started.agent_id).toBe(rootId);
    const lines = commandLines();
    const sandboxPid = log
      .split('\n')
      .flatMap((l) => {
        try {
          return [JSON.parse(l) as Record<string, any>];
        } catch {
          return [];
        }
      })
      .find((l) => l.msg === 'agent started' && l.agent === rootId)?.pid as number;
    expect(lines.get(sandboxPid)).toMatch(/^bwrap .*--append-system-prompt-file \S+system-prompt\.md/);
    expect([...lines.values()].filter((l) => l.includes('Think before you act.'))).toEqual([]);

    const second = await fake.waitForTurn(1, { timeoutMs: STEP_MS });
    const result = resultText(toolResults(second.body).find((b) => b.tool_use_id === first.toolUseIds![0])!);
    // The commands ran, and found nothing to read.
    expect(result).toContain('No such file or directory');
    expect(result).toContain('PG=\n');
    const secrets = [
      readFileSync(path.join(home, 'secret'), 'utf8').trim(),
      readFileSync(path.join(home, 'admin.token'), 'utf8').trim(),
      readFileSync(spoolToken, 'utf8').trim(),
      pg,
    ];
    expect(secrets.filter((s) => result.includes(s))).toEqual([]);
    expect(existsSync(path.join(outside, 'claude-home', '.claude', 'settings.json'))).toBe(false);
    expect(result).toContain(`CFG=${path.join(outside, 'spawners', 'sandboxed', 'claude', rootId)}`);
    // Its own PID namespace: bwrap's init, the agent and what it runs, not the machine's hundreds.
    expect(Number(result.trim().split('\n').at(-1))).toBeLessThan(20);
  }, 120_000);
});
