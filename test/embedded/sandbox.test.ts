import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { eventsNamed, waitForEvent, waitUntil } from '../support/events.js';
import { CLI, SCRIPTED_AGENT } from '../support/process.js';
import { startTestServer, type TestServer } from '../support/server.js';

/**
 * Agents are untrusted (docs/security.md): on the README's deployment (the embedded store,
 * whose keys are files of the server's home, with the spawner beside it) a hostile agent run by a real `beidou spawner`
 * (dist/, a child process) with the command adapter tries to read the server's keys, the
 * spool's token, a sibling's workspace, other agents' launch files, other processes'
 * environments and the spawner's own variables, and reports what it got to its leader over
 * real MCP. In the sandbox it gets nothing; with `--sandbox none` the same agent reads them
 * (so the test can fail), and the spawner said so at start.
 */

const launchRoot = () => path.join(os.tmpdir(), `beidou-${process.getuid!()}`);
const HOSTILE_AGENT = path.resolve(import.meta.dirname, '../fixtures/sandbox-agent.mjs');
const STEP_MS = 30_000;

interface Proc {
  child: ChildProcess;
  exited: Promise<number | null>;
  stdout: () => string;
  /** The spawner's log: JSON lines on stderr. */
  log: () => Array<Record<string, any>>;
}

function run(args: string[], env: NodeJS.ProcessEnv): Proc {
  const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  const lines: string[] = [];
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  createInterface({ input: child.stderr! }).on('line', (l) => lines.push(l));
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  const log = () =>
    lines.flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, any>];
      } catch {
        return [{ msg: l }];
      }
    });
  return { child, exited, stdout: () => stdout, log };
}

const procs: Proc[] = [];
const dirs: string[] = [];
let ts: TestServer | undefined;

afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.child.exitCode === null) p.child.kill('SIGTERM');
    await p.exited;
  }
  await ts?.close();
  ts = undefined;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface Report {
  read: Array<{ label: string; where: string; text: string }>;
  refused: Array<{ label: string; where: string; error: string }>;
}

/**
 * The scene: the server's home, the spool root and the workdir outside the temporary folder
 * (so the sandbox's private /tmp alone would not hide them), as on a machine where the
 * spawner runs beside the server (README): same user, `BEIDOU_HOME` shared, the spawner
 * minting its own token into its spool folder. A leader (the scripted agent) spawns a
 * sibling, which the test gives a canary file, then the prober.
 */
async function probe(sandboxArgs: string[], opts: { tokenFile?: boolean } = {}) {
  const outside = mkdtempSync(path.join(os.homedir(), '.beidou-sandbox-test-'));
  dirs.push(outside);
  const home = path.join(outside, 'home');
  const spoolRoot = path.join(outside, 'spawners');
  const workdir = path.join(outside, 'work');
  const shown = path.join(outside, 'shown');
  mkdirSync(shown);
  ts = await startTestServer({ home });
  const targetsFile = path.join(shown, 'targets.json');
  writeFileSync(targetsFile, '{}');
  const scriptFile = path.join(shown, 'script.json');
  writeFileSync(
    scriptFile,
    JSON.stringify({
      root: [
        {
          call: 'declare_plan',
          args: {
            tasks: [
              { id: 'sib', role: 'sibling', skill: 'worker', task: 'hold the canary' },
              { id: 'probe', role: 'prober', skill: 'worker', task: 'probe the sandbox' },
            ],
          },
        },
        { call: 'spawn_agent', args: { task_id: 'sib' } },
        { wait: 'go-probe' },
        { call: 'spawn_agent', args: { task_id: 'probe' } },
        { wait: 'SANDBOX REPORT' },
      ],
    }),
  );
  const canary = {
    pg: `canary-pgpassword-${process.pid}`,
    db: `canary-database-password-${process.pid}`,
    sibling: `canary-sibling-notes-${process.pid}`,
  };
  // The spawner's token: minted by the spawner into its spool folder, or handed to it in a file.
  const tokenFile = path.join(outside, 'spawner.token');
  const tokenArgs: string[] = [];
  if (opts.tokenFile) {
    writeFileSync(tokenFile, `${(await ts.api('POST', '/spawner-tokens', {})).body.token}\n`, { mode: 0o600 });
    tokenArgs.push('--token-file', tokenFile);
  }
  const command = `case "$BEIDOU_AGENT_NAME" in prober-*) exec "${process.execPath}" "${HOSTILE_AGENT}" ;; *) exec "${process.execPath}" "${SCRIPTED_AGENT}" ;; esac`;
  const spawner = run(
    [
      'spawner',
      '--server',
      ts.url,
      '--adapter',
      'command',
      '--command',
      command,
      '--name',
      'hostile',
      '--workdir',
      workdir,
      '--pass-env',
      'BEIDOU_SCRIPT',
      '--pass-env',
      'SANDBOX_TARGETS',
      '--sandbox-bind',
      `${shown}:ro`,
      ...tokenArgs,
      ...sandboxArgs,
    ],
    {
      ...process.env,
      BEIDOU_HOME: home,
      BEIDOU_SPAWNER_HOME: spoolRoot,
      BEIDOU_SCRIPT: scriptFile,
      SANDBOX_TARGETS: targetsFile,
      BEIDOU_LOG_LEVEL: 'info',
      BEIDOU_LOG_FORMAT: 'json',
      PGPASSWORD: canary.pg,
      BEIDOU_DATABASE_URL: `postgres://beidou:${canary.db}@127.0.0.1:9/beidou`,
    },
  );
  procs.push(spawner);

  const task = (await ts.api('POST', '/tasks', { task: 'probe the sandbox', spawn: true })).body as {
    task_id: string;
    root_agent_id: string;
  };
  const sibling = await waitForEvent(ts, task.task_id, (e) => e.event === 'agent_started' && e.template === 'worker', {
    timeoutMs: STEP_MS,
    what: "the sibling's start",
  });
  const siblingId = sibling.agent_id as string;
  const siblingFile = path.join(workdir, task.task_id, siblingId, 'notes.txt');
  writeFileSync(siblingFile, canary.sibling);
  const siblingPid = spawner.log().find((l) => l.msg === 'agent started' && l.agent === siblingId)?.pid as number;
  const spoolDir = path.join(spoolRoot, 'hostile');
  const secrets = {
    secret: readFileSync(path.join(home, 'secret'), 'utf8').trim(),
    adminToken: readFileSync(path.join(home, 'admin.token'), 'utf8').trim(),
    spoolToken: readFileSync(opts.tokenFile ? tokenFile : path.join(spoolDir, 'token'), 'utf8').trim(),
  };
  writeFileSync(
    targetsFile,
    JSON.stringify({
      leader: task.root_agent_id,
      files: [
        { label: "the server's secret", path: path.join(home, 'secret') },
        { label: "the server's admin token", path: path.join(home, 'admin.token') },
        { label: "the spool folder's token", path: path.join(spoolDir, 'token') },
        { label: "the spawner's token file", path: tokenFile },
        { label: "a sibling's workspace file", path: siblingFile },
      ],
      dirs: [{ label: "other agents' launch files", path: launchRoot() }],
      pids: [
        { label: "the spawner's environment", pid: spawner.child.pid },
        { label: "the sibling's environment", pid: siblingPid },
      ],
      env: ['PGPASSWORD', 'BEIDOU_DATABASE_URL', 'BEIDOU_HOME', 'BEIDOU_SPAWNER_HOME'],
    }),
  );
  expect((await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content: 'go-probe' })).status).toBe(200);
  const delivered = await waitForEvent(
    ts,
    task.task_id,
    (e) => e.event === 'agent_input' && e.caller_id === task.root_agent_id && /SANDBOX REPORT/.test(e.content),
    { timeoutMs: STEP_MS, what: "the prober's report reaching its leader" },
  );
  const content = delivered.content as string;
  const report = JSON.parse(content.slice(content.indexOf('{'))) as Report;
  const leaks = [...Object.values(canary), ...Object.values(secrets)].filter((c) => content.includes(c));
  const commandLine = readFileSync(`/proc/${spawner.child.pid}/cmdline`, 'utf8');
  return { report, content, leaks, spawner, secrets, task, commandLine };
}

describe('the sandbox keeps a hostile agent from the keys', () => {
  it('in the sandbox (the default) the prober reads nothing: not the keys, the spool token, a sibling, another process or a spawner variable', async () => {
    const { report, leaks, spawner } = await probe([]);
    if (process.env.DUMP_SANDBOX) console.log(JSON.stringify(report, null, 1));
    expect(report.read).toEqual([]);
    expect(leaks).toEqual([]);
    // It did try every target, and each was kept from it.
    const tried = report.refused.map((r) => r.label);
    for (const label of [
      "the server's secret",
      "the server's admin token",
      "the spool folder's token",
      "a sibling's workspace file",
      "the spawner's environment",
      "the sibling's environment",
      'a variable of the spawner',
    ])
      expect(tried).toContain(label);
    expect(spawner.stdout()).toMatch(/sandbox bwrap\)$/m);
    expect(spawner.log().filter((l) => /--sandbox none|no sandbox/.test(String(l.msg)))).toEqual([]);
  }, 90_000);

  it("with --token-file the spawner serves with the file's token, which no command line shows and no agent reads", async () => {
    const { report, leaks, secrets, commandLine } = await probe([], { tokenFile: true });
    expect(commandLine).not.toContain(secrets.spoolToken);
    expect(commandLine).toContain('--token-file');
    expect(report.read).toEqual([]);
    expect(leaks).toEqual([]);
    expect(report.refused.map((r) => r.label)).toContain("the spawner's token file");
  }, 90_000);

  it('with --sandbox none the same agent reads them all (only the allowlist still holds), and the spawner said so at start in one line', async () => {
    const { report, leaks, spawner, secrets } = await probe(['--sandbox', 'none']);
    const warnings = spawner.log().filter((l) => /--sandbox none/.test(String(l.msg)));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.msg).toMatch(/^--sandbox none: agents run as \S+ with no sandbox and can read everything/);
    const read = new Set(report.read.map((r) => r.label));
    for (const label of [
      "the server's secret",
      "the server's admin token",
      "the spool folder's token",
      "a sibling's workspace file",
      "other agents' launch files",
      "the spawner's environment",
    ])
      expect(read).toContain(label);
    expect(leaks).toEqual(expect.arrayContaining([secrets.secret, secrets.adminToken, secrets.spoolToken]));
    // The environment is an allowlist with or without the sandbox: the spawner's variables never reach an agent's own.
    expect(report.read.filter((r) => r.label === 'a variable of the spawner')).toEqual([]);
  }, 90_000);
});

describe('launch texts in files', () => {
  it('a 300 KiB prompt launches: the agent reads it from its launch folder (the variable holds only what fits)', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-test-'));
    dirs.push(home);
    const body = `${'You are a careful agent. '.repeat(12_600)}END-OF-SKILL`;
    expect(Buffer.byteLength(body)).toBeGreaterThan(300 * 1024);
    mkdirSync(path.join(home, 'skills', 'big'), { recursive: true });
    writeFileSync(
      path.join(home, 'skills', 'big', 'SKILL.md'),
      `---\nname: big\nversion: 1\ndescription: a skill with a very long body\nallowed-tools: []\n---\n${body}\n`,
    );
    ts = await startTestServer({ home });
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const spawner = run(
      [
        'spawner',
        '--server',
        ts.url,
        '--token',
        token,
        '--adapter',
        'command',
        '--command',
        `"${process.execPath}" "${HOSTILE_AGENT}"`,
        '--spool-dir',
        path.join(home, 'spool'),
        '--workdir',
        path.join(home, 'agents'),
      ],
      { ...process.env, BEIDOU_LOG_LEVEL: 'warn' },
    );
    procs.push(spawner);
    const created = await ts.api('POST', '/tasks', { task: 'Read your prompt.', skill: 'big', spawn: true });
    expect(created.status).toBe(201);
    const { task_id: taskId } = created.body as { task_id: string };
    const said = await waitUntil(
      ts,
      taskId,
      (ev) => eventsNamed(ev, 'assistant_text').find((e) => String(e.text).startsWith('LAUNCH ')),
      { timeoutMs: STEP_MS, what: 'the launch report' },
    );
    const launch = JSON.parse(String(said.text).slice('LAUNCH '.length));
    const { body: root } = await ts.api('GET', `/agents/${created.body.root_agent_id}`);
    const prompt = root.launch.prompt as string;
    expect(prompt).toContain('END-OF-SKILL');
    expect(launch).toEqual({
      prompt_file_bytes: Buffer.byteLength(prompt),
      prompt_file_sha256: createHash('sha256').update(prompt).digest('hex'),
      // Too big for a variable: in the file only.
      prompt_env_bytes: null,
      // The task fits: in the variable too, as before.
      task_file_bytes: launch.task_env_bytes,
      task_env_bytes: expect.any(Number),
    });
    expect(eventsNamed(await waitUntil(ts, taskId, (ev) => ev), 'agent_crashed')).toEqual([]);
    // The launch folder goes with the process.
    const agentDirs = () =>
      readdirSync(launchRoot()).flatMap((s) => {
        try {
          return readdirSync(path.join(launchRoot(), s)).filter((d) => d.startsWith(`${created.body.root_agent_id}-`));
        } catch {
          return []; // another test's spawner, gone
        }
      });
    expect(agentDirs()).toHaveLength(1);
    expect((await ts.api('POST', `/tasks/${taskId}/terminate`, {})).status).toBe(200);
    await waitForEvent(ts, taskId, (e) => e.event === 'terminate.consumed', { timeoutMs: STEP_MS, what: 'the end' });
    expect(agentDirs()).toEqual([]);
  }, 60_000);
});
