import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { buildCli, CliChild } from '../support/cli.js';
import { connectAgent, removeHome, tempHome } from '../support/server.js';
import { storeEnv } from '../support/store.js';

/**
 * The `beidou` binary as a person runs it: child processes of `node dist/cli/main.js`,
 * synchronised on their output lines and exits, never on timers.
 */

const LISTENING = /^beidou listening on (http:\/\/127\.0\.0\.1:(\d+))$/;

// Rebuilt so a bare `vitest run` tests the current source.
beforeAll(() => buildCli(true), 120_000);

/** Runs a command to completion. */
async function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = new CliChild(args, env);
  const { code } = await child.exited;
  return { code, stdout: child.lines.map((l) => `${l}\n`).join(''), stderr: child.stderr };
}

/** `beidou serve` on a free port; resolves once it prints where it listens. */
async function serve(home: string, args: string[] = ['--port', '0'], env: Record<string, string> = {}) {
  const child = new CliChild(['serve', '--home', home, ...args], { ...(await storeEnv(home)), ...env });
  const first = await child.waitForLine((_l, i) => i === 0);
  const m = LISTENING.exec(first);
  if (!m) {
    await child.stop();
    throw new Error(`unexpected first line: ${JSON.stringify(first)}`);
  }
  return { child, first, url: m[1]!, port: Number(m[2]) };
}

const adminTokenOf = (home: string) => readFileSync(path.join(home, 'admin.token'), 'utf8').trim();

async function apiCall(url: string, home: string, method: string, route: string, body?: unknown) {
  const res = await fetch(`${url}/api${route}`, {
    method,
    headers: {
      authorization: `Bearer ${adminTokenOf(home)}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as any };
}

/** Kills the child (if still running) when the test ends. */
function track({ onTestFinished }: TestContext, child: CliChild): CliChild {
  onTestFinished(async () => {
    await child.stop('SIGKILL');
  });
  return child;
}

/** A temp home removed when the test ends. */
function newHome({ onTestFinished }: TestContext): string {
  const home = tempHome();
  onTestFinished(() => removeHome(home));
  return home;
}

describe('beidou serve', () => {
  it('--port 0 prints exactly "beidou listening on http://127.0.0.1:PORT" with the real port, and answers there', async (ctx) => {
    const home = newHome(ctx);
    const { child, first, url, port } = await serve(home);
    track(ctx, child);
    expect(first).toBe(`beidou listening on http://127.0.0.1:${port}`);
    expect(port).toBeGreaterThan(0);
    expect(port).not.toBe(7777);
    const health = await fetch(`${url}/api/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ ok: true, version: expect.any(String) });
    // The second line says where the admin token is.
    expect(await child.waitForLine((_l, i) => i === 1)).toContain(path.join(home, 'admin.token'));
  });

  it('BEIDOU_PORT=0 picks a free port too', async (ctx) => {
    const home = newHome(ctx);
    const { child, url, port } = await serve(home, [], { BEIDOU_PORT: '0' });
    track(ctx, child);
    expect(port).toBeGreaterThan(0);
    expect(port).not.toBe(7777);
    expect((await fetch(`${url}/api/health`)).status).toBe(200);
  });

  it('--port abc exits 2 with one line on stderr naming the port', async (ctx) => {
    const home = newHome(ctx);
    const { code, stdout, stderr } = await run(['serve', '--port', 'abc', '--home', home]);
    expect(code).toBe(2);
    expect(stdout).toBe('');
    const lines = stderr.split('\n').filter((l) => l.length > 0);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/port/i);
    expect(lines[0]).toContain('abc');
  });

  it('an unwritable home exits 2', async (ctx) => {
    const dir = newHome(ctx);
    const file = path.join(dir, 'file');
    writeFileSync(file, 'not a directory');
    const home = path.join(file, 'home');
    const { code, stdout, stderr } = await run(['serve', '--port', '0', '--home', home]);
    expect(code).toBe(2);
    expect(stdout).toBe('');
    const lines = stderr.split('\n').filter((l) => l.length > 0);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(home);
  });

  it('SIGTERM exits 0, and a restart on the same home still lists a task created before', async (ctx) => {
    const home = newHome(ctx);
    const first = await serve(home);
    track(ctx, first.child);
    const created = await apiCall(first.url, home, 'POST', '/tasks', { task: 'survive a restart', spawn: false });
    expect(created.status).toBe(201);
    const taskId = created.body.task_id as string;

    expect(await first.child.stop('SIGTERM')).toEqual({ code: 0, signal: null });

    const second = await serve(home);
    track(ctx, second.child);
    const listed = await apiCall(second.url, home, 'GET', '/tasks');
    expect(listed.status).toBe(200);
    expect(listed.body.tasks.map((t: { task_id: string }) => t.task_id)).toContain(taskId);
    expect(await second.child.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });
});

describe('beidou client commands', () => {
  let home: string;
  let server: Awaited<ReturnType<typeof serve>>;
  const client = (...args: string[]) => [...args, '--server', server.url, '--home', home];

  beforeAll(async () => {
    home = tempHome();
    server = await serve(home);
  });
  afterAll(async () => {
    if (server) expect(await server.child.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    removeHome(home);
  });

  async function startTaskJson(text: string, ...flags: string[]) {
    const { code, stdout, stderr } = await run(client('task', 'start', text, '--no-spawn', '--json', ...flags));
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const lines = stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    return JSON.parse(lines[0]!) as {
      task_id: string;
      root_agent_id: string;
      token?: string;
      token_file: string;
      mcp_url: string;
      claude_mcp_add: string;
    };
  }

  /** The JSON a `claude mcp add-json beidou '…'` line adds (one shell word, single-quoted). */
  const addedJson = (line: string) => {
    const m = /^claude mcp add-json beidou '(.*)'$/.exec(line);
    expect(m, line).not.toBeNull();
    return JSON.parse(m![1]!.replace(/'\\''/g, "'")) as { type: string; url: string; headersHelper: string };
  };

  it('task start --no-spawn --json prints the ids, the MCP URL, the token file and a claude mcp add-json line, not the token', async () => {
    const created = await startTaskJson('write the docs');
    expect(created).toMatchObject({
      task_id: expect.any(String),
      root_agent_id: expect.any(String),
      mcp_url: `${server.url}/mcp`,
      token_file: path.join(home, 'agents', `${created.root_agent_id}.token`),
    });
    expect(created).not.toHaveProperty('token');
    // The token is in its file, the user's alone; the line names the file, never the token.
    const token = readFileSync(created.token_file, 'utf8').trim();
    expect(token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(statSync(created.token_file).mode & 0o777).toBe(0o600);
    expect(JSON.stringify(created)).not.toContain(token);
    const added = addedJson(created.claude_mcp_add);
    expect(added).toMatchObject({ type: 'http', url: created.mcp_url });
    expect(added.headersHelper).toContain(`mcp-headers --token-file ${created.token_file}`);
    // The helper, run as Claude Code runs it (a shell command), prints the header with the token.
    const helper = spawnSync('/bin/sh', ['-c', added.headersHelper], { encoding: 'utf8' });
    expect(helper.status, helper.stderr).toBe(0);
    expect(JSON.parse(helper.stdout)).toEqual({ Authorization: `Bearer ${token}` });
    // The task exists, with the text, and is not queued for a spawner.
    const detail = await apiCall(server.url, home, 'GET', `/tasks/${created.task_id}`);
    expect(detail.status).toBe(200);
    expect(detail.body.task).toMatchObject({
      task_id: created.task_id,
      root_agent_id: created.root_agent_id,
      spawn: false,
    });
    // The token is the root's and it works.
    const agent = await connectAgent(server.url, token);
    try {
      expect((await agent.call('list_peers')).ok).toBe(true);
    } finally {
      await agent.close();
    }
  });

  it('task start --no-spawn refuses before creating the task when the token cannot be kept, in a line for a person', async (ctx) => {
    // Another home for the client (the server's admin token from the environment), whose
    // `agents` is a file, not a folder.
    const other = tempHome();
    ctx.onTestFinished(() => removeHome(other));
    writeFileSync(path.join(other, 'agents'), 'not a folder');
    const before = (await apiCall(server.url, home, 'GET', '/tasks')).body.tasks.length;
    const { code, stdout, stderr } = await run(
      ['task', 'start', 'nowhere to keep the token', '--no-spawn', '--server', server.url, '--home', other],
      { BEIDOU_ADMIN_TOKEN: adminTokenOf(home) },
    );
    expect({ code, stdout }).toEqual({ code: 2, stdout: '' });
    expect(stderr).toMatch(
      new RegExp(
        `^beidou: cannot keep the root's token in ${path.join(other, 'agents')} \\(E[A-Z]+\\): make it a folder you can write, or pass --home DIR; no task was created\n$`,
      ),
    );
    expect((await apiCall(server.url, home, 'GET', '/tasks')).body.tasks).toHaveLength(before);
  });

  it('task start --no-spawn writes no token file for a root agent id that is not one (a hostile server)', async (ctx) => {
    const hostile = createServer((req, res) => {
      req.resume();
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          task_id: 'tsk_0123456789ab',
          root_agent_id: '../../escaped',
          token: 'x',
          mcp_url: 'http://x/mcp',
        }),
      );
    });
    await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve));
    ctx.onTestFinished(() => new Promise<void>((resolve) => hostile.close(() => resolve())));
    const other = path.join(tempHome(), 'home');
    ctx.onTestFinished(() => removeHome(path.dirname(other)));
    const url = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
    const { code, stderr } = await run(['task', 'start', 'x', '--no-spawn', '--server', url, '--home', other], {
      BEIDOU_ADMIN_TOKEN: 'bdu_admin_not-checked-by-this-server',
    });
    expect(code).toBe(1);
    expect(stderr).toBe(
      'beidou: the server created task tsk_0123456789ab but answered a root agent id that is not one ("../../escaped"): no token file was written\n',
    );
    expect(existsSync(path.join(other, '..', 'escaped.token'))).toBe(false);
    expect(readdirSync(path.join(other, 'agents'))).toEqual([]);
  });

  it('task start --print-token prints the token too, the one in the file', async () => {
    const created = await startTaskJson('show me the token', '--print-token');
    expect(created.token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(readFileSync(created.token_file, 'utf8').trim()).toBe(created.token);
    const plain = await run(client('task', 'start', 'plain, with the token', '--print-token'));
    expect(plain.code).toBe(0);
    expect(plain.stdout).toMatch(/^token: {9}[\w-]+\.[\w-]+\.[\w-]+$/m);
  });

  it('task start without --json prints the attach line and a ready claude mcp add-json line, and no token', async () => {
    const { code, stdout, stderr } = await run(client('task', 'start', 'plain output', '--no-spawn'));
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(stdout).not.toMatch(/eyJ[\w-]+\.[\w-]+\.[\w-]+/);
    const lines = stdout.split('\n');
    const root = lines.find((l) => l.startsWith('root_agent_id:'))?.split(/\s+/)[1];
    expect(lines).toContain(`  beidou attach --agent ${root} --server ${server.url}`);
    const add = lines.filter((l) => l.startsWith('claude mcp add'));
    expect(add).toHaveLength(1);
    const tokenFile = path.join(home, 'agents', `${root}.token`);
    expect(lines).toContain(`token_file:    ${tokenFile} (0600)`);
    expect(addedJson(add[0]!)).toEqual({
      type: 'http',
      url: `${server.url}/mcp`,
      headersHelper: expect.stringContaining(`mcp-headers --token-file ${tokenFile}`),
    });
    const taskLine = lines.find((l) => l.startsWith('task_id:'));
    const taskId = taskLine?.split(/\s+/)[1];
    expect(taskId).toMatch(/^tsk_[0-9a-f]{12}$/);
    expect((await apiCall(server.url, home, 'GET', `/tasks/${taskId}`)).status).toBe(200);
  });

  it('token prints the admin token', async () => {
    const { code, stdout, stderr } = await run(['token', '--home', home]);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(stdout).toBe(`${adminTokenOf(home)}\n`);
    const res = await fetch(`${server.url}/api/tasks`, { headers: { authorization: `Bearer ${stdout.trim()}` } });
    expect(res.status).toBe(200);
  });

  it('token --agent ID prints a working JWT for that agent', async () => {
    const created = await startTaskJson('token me');
    const { code, stdout, stderr } = await run(client('token', '--agent', created.root_agent_id));
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const token = stdout.trim();
    expect(stdout).toBe(`${token}\n`);
    expect(token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(token).not.toBe(readFileSync(created.token_file, 'utf8').trim());
    const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>;
    expect(claims).toMatchObject({
      sub: created.root_agent_id,
      task_id: created.task_id,
      kind: 'agent',
      iss: 'beidou',
      aud: 'beidou',
    });
    const agent = await connectAgent(server.url, token);
    try {
      const peers = await agent.call('list_peers');
      expect(peers.ok).toBe(true);
    } finally {
      await agent.close();
    }
  });

  it('token --agent for an unknown agent fails with a message', async () => {
    const { code, stdout, stderr } = await run(client('token', '--agent', 'ag_nobody'));
    expect(code).not.toBe(0);
    expect(stdout).toBe('');
    expect(stderr).toContain('unknown_agent');
  });

  it('events --task T prints one JSON line per event, seq 1..n', async () => {
    const created = await startTaskJson('log me');
    const sent = await apiCall(server.url, home, 'POST', `/agents/${created.root_agent_id}/send`, {
      content: 'hello root',
    });
    expect(sent.status).toBe(200);
    const fromApi = await apiCall(server.url, home, 'GET', `/tasks/${created.task_id}/events?since=0`);
    const n = fromApi.body.events.length as number;
    expect(n).toBeGreaterThan(1);

    const { code, stdout, stderr } = await run(client('events', '--task', created.task_id));
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const events = stdout
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as { seq: number; task_id: string; event: string });
    expect(events.map((e) => e.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    expect(events).toEqual(fromApi.body.events);
    expect(events.every((e) => e.task_id === created.task_id)).toBe(true);
  });

  it('events --follow prints the existing events, then streams a new one as it happens', async (ctx) => {
    const created = await startTaskJson('follow me');
    const before = await apiCall(server.url, home, 'GET', `/tasks/${created.task_id}/events?since=0`);
    const n = before.body.events.length as number;
    expect(n).toBeGreaterThan(0);

    const follow = track(ctx, new CliChild(client('events', '--task', created.task_id, '--follow')));
    await follow.waitForLine((_l, i) => i === n - 1);
    expect(follow.lines.map((l) => (JSON.parse(l) as { seq: number }).seq)).toEqual(
      Array.from({ length: n }, (_, i) => i + 1),
    );

    const sent = await apiCall(server.url, home, 'POST', `/agents/${created.root_agent_id}/send`, { content: 'live' });
    expect(sent.status).toBe(200);
    const messageId = sent.body.message_id as string;
    const line = await follow.waitForLine((l) => (JSON.parse(l) as { message_id?: string }).message_id === messageId);
    const event = JSON.parse(line) as { seq: number; task_id: string };
    expect(event).toMatchObject({ seq: n + 1, task_id: created.task_id });

    const exit = await follow.stop('SIGTERM');
    expect(exit.signal).toBe('SIGTERM');
  });
});
