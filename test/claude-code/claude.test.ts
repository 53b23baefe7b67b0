import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import type * as ClaudeAdapter from '../../src/spawner/adapters/claude.js';
import type { StartSpec } from '../../src/spawner/adapter.js';
import { eventsNamed, waitForEvent, waitUntil, type AnyEvent } from '../support/events.js';
import {
  lastUserMessage,
  lastUserText,
  resultText,
  startFakeAnthropic,
  toolResults,
  type ContentBlock,
  type FakeAnthropic,
  type MessagesBody,
} from '../../src/testkit/fake-anthropic.js';
import { CLAUDE, claudeEnv, settleClaudeHome } from '../../src/testkit/claude-tmux.js';
import { ownProcessAlive } from '../../src/util/process.js';
import { CLI } from '../support/process.js';
import {
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';

/**
 * The real Claude Code binary (the pinned @anthropic-ai/claude-code devDependency) against
 * the real server, with a scripted fake of the Anthropic API in place of the model: the
 * spawner's claude adapter, the hooks, and `claude mcp add`. Nothing waits on a clock:
 * each step waits on a request the fake recorded or on an event in the task's log.
 */

// The built adapter, as the spawner runs it: its hook commands point at dist/cli/main.js.
const { claudeArgs, writeAgentFiles } = (await import(
  path.resolve(import.meta.dirname, '../../dist/spawner/adapters/claude.js')
)) as typeof ClaudeAdapter;
const STEP_MS = 45_000;

/**
 * The tools Claude Code offers the model: those in `tools`, and the deferred ones it names
 * in a system turn (loaded through ToolSearch: MCP tools are deferred by default).
 */
function offeredTools(body: MessagesBody): string[] {
  const names = (body.tools ?? []).map((t) => t.name);
  for (const m of body.messages) {
    const texts = typeof m.content === 'string' ? [m.content] : m.content.map((b) => b.text ?? '');
    for (const text of texts) {
      const at = text.indexOf('deferred tools are now available');
      if (at < 0) continue;
      const list = text.slice(at).split('\n\n')[0]!.split('\n').slice(1);
      names.push(...list.map((l) => l.trim()).filter((l) => /^[A-Za-z_][\w-]*$/.test(l)));
    }
  }
  return names;
}

/** The tool_result block answering `toolUseId` in a request's last user message. */
function resultFor(body: MessagesBody, toolUseId: string): ContentBlock {
  const found = toolResults(body).find((b) => b.tool_use_id === toolUseId);
  if (!found) throw new Error(`no tool_result for ${toolUseId} in ${JSON.stringify(lastUserMessage(body))}`);
  return found;
}

interface Proc {
  child: ChildProcess;
  lines: string[];
  stderr: () => string;
  exited: Promise<number | null>;
  /** Resolves with the first stdout line (parsed JSON) matching, already printed or still to come. */
  waitLine(match: (obj: any) => boolean, what: string): Promise<any>;
}

function run(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv; stdin?: boolean }): Proc {
  const child = spawn(cmd, args, {
    cwd: opts.cwd,
    env: opts.env,
    stdio: [opts.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const listeners = new Set<() => void>();
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  createInterface({ input: child.stdout! }).on('line', (line) => {
    lines.push(line);
    for (const l of [...listeners]) l();
  });
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  const waitLine = (match: (obj: any) => boolean, what: string) =>
    new Promise<any>((resolve, reject) => {
      const check = () => {
        for (const line of lines) {
          let obj: unknown;
          try {
            obj = JSON.parse(line);
          } catch {
            continue;
          }
          if (match(obj)) {
            done();
            return resolve(obj);
          }
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(
          new Error(
            `timed out waiting for ${what}; stdout: ${lines.join('\n').slice(-3000)}\nstderr: ${stderr.slice(-3000)}`,
          ),
        );
      }, STEP_MS);
      const done = () => {
        clearTimeout(timer);
        listeners.delete(check);
      };
      listeners.add(check);
      check();
      void exited.then(() => {
        check();
        if (listeners.has(check)) {
          done();
          reject(
            new Error(
              `process exited before ${what}; stdout: ${lines.join('\n').slice(-3000)}\nstderr: ${stderr.slice(-3000)}`,
            ),
          );
        }
      });
    });
  return { child, lines, stderr: () => stderr, exited, waitLine };
}

const userLine = (text: string) => `${JSON.stringify({ type: 'user', message: { role: 'user', content: text } })}\n`;

describe('Claude Code (the real binary) against Beidou', () => {
  let ts: TestServer | undefined;
  let fake: FakeAnthropic | undefined;
  const procs: Proc[] = [];
  const clients: TestAgent[] = [];
  const dirs: string[] = [];
  const tmp = (prefix: string) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  };

  afterEach(async (ctx) => {
    if (process.env.DUMP_CLAUDE_TEST) await dump(ctx.task.name, ts, fake, procs);
    // SIGTERM first: a spawner stops its agents on it (a Claude Code also ends when its stdin closes).
    await Promise.allSettled(
      procs.map(async (p) => {
        if (p.child.exitCode !== null || p.child.signalCode !== null) return;
        p.child.kill('SIGTERM');
        const timer = setTimeout(() => p.child.kill('SIGKILL'), 5_000);
        await p.exited;
        clearTimeout(timer);
      }),
    );
    procs.length = 0;
    await Promise.allSettled(clients.map((c) => c.close()));
    clients.length = 0;
    await fake?.close();
    fake = undefined;
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('the spawner runs a root through Claude Code: tools, drained events, a delivered message, termination', async () => {
    ts = await startTestServer();
    fake = await startFakeAnthropic([
      // 0: text and a tool call in one message (two stream-json fragments, one message id)
      { text: 'Looking at my team first.', tools: [{ name: 'mcp__beidou__list_peers', input: {} }] },
      {
        tools: [
          {
            name: 'mcp__beidou__declare_plan',
            input: { tasks: [{ id: 'build', role: 'builder', skill: 'worker', task: 'build the widget' }] },
          },
        ],
      },
      { tools: [{ name: 'mcp__beidou__spawn_agent', input: { task_id: 'build' } }] },
      // 3: two calls in parallel, one of them refused (identity never comes from the input)
      {
        tools: [
          { name: 'mcp__beidou__list_pending_reviews', input: {} },
          { name: 'mcp__beidou__send_message', input: { to: 'nobody', content: 'hi', caller_id: 'me' } },
        ],
      },
      { text: 'The plan is declared and the builder is on its way.' },
      // 5: the answer to the user's message
      { text: 'Status: the builder is working.' },
    ]);
    const claudeHome = tmp('beidou-claude-home-');
    const workdir = tmp('beidou-claude-work-');
    const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const spawner = run(
      process.execPath,
      // --max-agents 1: the builder stays queued, so one Claude Code talks to the fake.
      [
        CLI,
        'spawner',
        '--server',
        ts.url,
        '--token',
        spawnerToken,
        '--adapter',
        'claude',
        '--claude-bin',
        CLAUDE,
        '--max-agents',
        '1',
        '--workdir',
        workdir,
      ],
      { cwd: workdir, env: { ...claudeEnv(fake, claudeHome), BEIDOU_LOG_LEVEL: 'info' } },
    );
    procs.push(spawner);

    const created = await ts.api('POST', '/tasks', { task: 'Build the widget with a team.', spawn: true });
    expect(created.status).toBe(201);
    const { task_id: taskId, root_agent_id: rootId } = created.body as { task_id: string; root_agent_id: string };

    // The first request: the task as the first user turn, our tools offered, the shadow tools not.
    const first = await fake.waitForTurn(0, { timeoutMs: STEP_MS });
    expect(lastUserText(first.body)).toContain('Build the widget with a team.');
    const offered = offeredTools(first.body);
    for (const name of [
      'list_peers',
      'send_message',
      'declare_plan',
      'spawn_agent',
      'create_team',
      'signal_review',
      'ask_user',
      'read_inbox',
    ]) {
      expect(offered).toContain(`mcp__beidou__${name}`);
    }
    for (const name of ['TodoWrite', 'SendMessage', 'AskUserQuestion']) expect(offered).not.toContain(name);
    // Claude Code 2.x defers MCP tools behind ToolSearch unless ENABLE_TOOL_SEARCH=false (which
    // the adapter sets): our tools reach the model whole, with descriptions and schemas.
    const sentWhole = ((first.body as MessagesBody).tools ?? []).filter((t) => t.name.startsWith('mcp__beidou__'));
    expect(sentWhole.map((t) => t.name)).toEqual(
      expect.arrayContaining(['mcp__beidou__list_peers', 'mcp__beidou__send_message', 'mcp__beidou__signal_review']),
    );
    expect(sentWhole.find((t) => t.name === 'mcp__beidou__send_message')?.description).toEqual(expect.any(String));
    // The prompt assembled by the server reaches the system prompt.
    expect(JSON.stringify(first.body.system)).toContain('Persistent-agent contract');
    // ... and Claude Code hands the model the server's initialize instructions: the agent's brief.
    expect(JSON.stringify(first.body)).toContain(
      `You are agent root-${rootId.slice(-4)} (${rootId}) in Beidou task ${taskId}, the root agent`,
    );

    // list_peers' result reaches the model as our JSON.
    const second = await fake.waitForTurn(1, { timeoutMs: STEP_MS });
    expect(JSON.parse(resultText(resultFor(second.body, first.toolUseIds![0]!)))).toEqual({ peers: [] });

    const last = await fake.waitForTurn(4, { timeoutMs: STEP_MS });
    const parallel = await fake.waitForTurn(3, { timeoutMs: STEP_MS });
    const [reviewsId, badSendId] = parallel.toolUseIds!;
    expect(JSON.parse(resultText(resultFor(last.body, reviewsId!)))).toEqual({ reviews: [] });
    const refused = resultFor(last.body, badSendId!);
    expect(refused.is_error).toBe(true);
    expect(resultText(refused)).toContain('{"error":"invalid_input"');

    // The effects on the server: the plan, the spawned builder.
    const detail = (await ts.api('GET', `/tasks/${taskId}`)).body;
    expect(detail.plans).toHaveLength(1);
    expect(detail.plans[0].owner_agent_id).toBe(rootId);
    const builder = detail.agents.find((a: { role: string | null }) => a.role === 'builder');
    expect(builder).toMatchObject({ leader_id: rootId });
    expect(builder.launch.first_message).toContain('build the widget');

    // The drained events, once the turn's result is in.
    await waitForEvent(ts, taskId, (e) => e.event === 'run.cost', { timeoutMs: STEP_MS, what: 'run.cost' });
    const events = await waitUntil(
      ts,
      taskId,
      (all) =>
        eventsNamed(all, 'tool_result').length >= 5 && eventsNamed(all, 'assistant_text').length >= 2 ? all : undefined,
      { timeoutMs: STEP_MS, what: 'every tool_result and assistant_text of the first turn' },
    );
    expect(eventsNamed(events, 'agent_started')).toEqual([
      expect.objectContaining({ agent_id: rootId, template: 'leader', resumed: false, session_id: expect.any(String) }),
    ]);
    // The session the server records is the one Claude Code uses (the adapter passes
    // --session-id), so another spawner can resume it.
    const claudeSession = first.headers['x-claude-code-session-id'];
    expect(claudeSession).toEqual(expect.any(String));
    expect((await ts.api('GET', `/agents/${rootId}`)).body.session_id).toBe(claudeSession);
    // turn.usage: exactly once per message id, for every message the model sent.
    const usage = eventsNamed(events, 'turn.usage');
    const answered = fake
      .scripted()
      .filter((r) => r.turn! <= 4)
      .map((r) => r.messageId);
    expect(usage.map((e) => e.message_id).sort()).toEqual([...new Set(answered)].sort());
    for (const u of usage)
      expect(u).toMatchObject({ caller_id: rootId, model: expect.any(String), input_tokens: expect.any(Number) });

    expect(eventsNamed(events, 'assistant_text').map((e) => [e.message_id, e.text])).toEqual([
      [first.messageId, 'Looking at my team first.'],
      [last.messageId, 'The plan is declared and the builder is on its way.'],
    ]);

    const called = eventsNamed(events, 'tool_called');
    expect(called.map((e) => e.name)).toEqual([
      'mcp__beidou__list_peers',
      'mcp__beidou__declare_plan',
      'mcp__beidou__spawn_agent',
      'mcp__beidou__list_pending_reviews',
      'mcp__beidou__send_message',
    ]);
    expect(called[1]!.input).toEqual({
      tasks: [{ id: 'build', role: 'builder', skill: 'worker', task: 'build the widget' }],
    });
    // The parallel calls share their message.
    expect(called[3]!.message_id).toBe(parallel.messageId);
    expect(called[4]!.message_id).toBe(parallel.messageId);
    const results = new Map(eventsNamed(events, 'tool_result').map((e) => [e.tool_use_id as string, e]));
    for (const c of called) {
      const r = results.get(c.tool_use_id)!;
      expect(r).toBeDefined();
      expect(r.seq).toBeGreaterThan(c.seq);
      expect(r.duration_ms).toEqual(expect.any(Number));
      expect(r.duration_ms).toBeGreaterThanOrEqual(0);
    }
    expect(results.get(called[0]!.tool_use_id)).toMatchObject({ is_error: false, error_reason: null });
    const errorResult = results.get(badSendId!)!;
    expect(errorResult.is_error).toBe(true);
    expect(errorResult.error_reason).toContain('{"error":"invalid_input"');
    expect(errorResult.error_reason).toContain('caller_id');

    const cost = eventsNamed(events, 'run.cost');
    expect(cost).toHaveLength(1);
    expect(cost[0]).toMatchObject({
      agent_id: rootId,
      total_cost_usd: expect.any(Number),
      num_turns: expect.any(Number),
      model_usage: expect.any(Object),
    });
    expect(cost[0]!.total_cost_usd).toBeGreaterThan(0);

    // A message from the user becomes Claude Code's next user turn.
    const sent = await ts.api('POST', `/agents/${rootId}/send`, { content: 'What is the status?' });
    expect(sent.status).toBe(200);
    const reply = await fake.waitForTurn(5, { timeoutMs: STEP_MS });
    expect(lastUserText(reply.body)).toContain('[from user (user)] What is the status?');
    const input = await waitForEvent(
      ts,
      taskId,
      (e) => e.event === 'agent_input' && e.message_id === sent.body.message_id,
      { what: 'agent_input' },
    );
    expect(input).toMatchObject({ caller_id: rootId, from: 'user', via: 'spawner', content: 'What is the status?' });
    await waitUntil(ts, taskId, (all) => (eventsNamed(all, 'run.cost').length === 2 ? true : undefined), {
      timeoutMs: STEP_MS,
      what: 'the second run.cost',
    });

    // Terminating the task ends the Claude Code process, and the spawner reports it.
    const pid = spawnerLog(spawner).find((l) => l.msg === 'agent started' && l.agent === rootId)?.pid as number;
    expect(pid).toEqual(expect.any(Number));
    expect(ownProcessAlive(pid)).toBe(true);
    expect((await ts.api('POST', `/tasks/${taskId}/terminate`, {})).status).toBe(200);
    const consumed = await waitForEvent(ts, taskId, (e) => e.event === 'terminate.consumed' && e.agent_id === rootId, {
      timeoutMs: STEP_MS,
      what: 'terminate.consumed',
    });
    expect(consumed.via).toBe('spawner');
    expect(ownProcessAlive(pid)).toBe(false);
    const after = (await ts.api('GET', `/tasks/${taskId}/events?since=0&limit=10000`)).body.events as AnyEvent[];
    expect(eventsNamed(after, 'agent_completed', (e) => e.agent_id === rootId)).toEqual([
      expect.objectContaining({ terminated: true }),
    ]);
    expect(eventsNamed(after, 'terminate.forced')).toEqual([]);
    expect(eventsNamed(after, 'agent_crashed')).toEqual([]);
    expect(eventsNamed(after, 'contract_violation')).toEqual([]);
    // No request went unanswered by the script: Claude Code asked nothing we did not expect.
    expect(fake.requests.filter((r) => r.kind === 'unscripted')).toEqual([]);
  }, 120_000);

  it('pre-tool-use and stop: a leader with a child waiting for review is refused Write, then handed the report instead of stopping', async () => {
    ts = await startTestServer();
    const task = await createTask(ts, { task: 'lead the work' });
    const root = await connectAgent(ts.url, task.token);
    clients.push(root);
    expect(
      (await root.call('declare_plan', { tasks: [{ id: 'w', role: 'writer', skill: 'worker', task: 'write it' }] })).ok,
    ).toBe(true);
    const spawned = await root.call('spawn_agent', { task_id: 'w' });
    expect(spawned.ok).toBe(true);
    const childId = (spawned as { value: { agent_id: string } }).value.agent_id;
    const childToken = (await ts.api('POST', `/agents/${childId}/token`, {})).body.token as string;
    const child = await connectAgent(ts.url, childToken);
    clients.push(child);
    expect((await child.call('signal_review', { detail: '[REVIEW REQUIRED] draft.md written' })).ok).toBe(true);

    const cwd = tmp('beidou-claude-cwd-');
    const target = path.join(cwd, 'notes.md');
    fake = await startFakeAnthropic([
      { tools: [{ name: 'Write', input: { file_path: target, content: 'not yet' } }] },
      { text: 'I will review the draft first.' },
    ]);
    // The very files and flags the spawner's claude adapter runs an agent with.
    const { proc } = launchLikeTheSpawner(ts, fake, task, cwd, tmp('beidou-claude-home-'), tmp('beidou-agent-files-'));
    procs.push(proc);
    proc.child.stdin!.write(userLine('Carry on with the work.'));

    const denied = await fake.waitForTurn(1, { timeoutMs: STEP_MS });
    const writeId = (await fake.waitForTurn(0)).toolUseIds![0]!;
    const result = resultFor(denied.body, writeId);
    expect(result.is_error).toBe(true);
    expect(resultText(result)).toContain('terminate_child');
    expect(resultText(result)).toContain(childId);
    expect(existsSync(target)).toBe(false);
    const event = await waitForEvent(ts, task.task_id, (e) => e.event === 'review_gate.denied', {
      what: 'review_gate.denied',
    });
    expect(event).toMatchObject({ caller_id: task.root_agent_id, tool_name: 'Write', pending_child_ids: [childId] });

    // Stop: the child's report waits in the leader's inbox, so the Stop hook blocks the stop
    // and hands it over as the next turn.
    const stopped = await fake.waitForRequest(
      (r) => r.path === '/v1/messages' && lastUserText(r.body).includes('Stop hook feedback'),
      {
        timeoutMs: STEP_MS,
        what: 'the Stop hook feedback turn',
      },
    );
    expect(lastUserText(stopped.body)).toMatch(
      new RegExp(`\\[from writer-\\w+ \\(${childId}\\)\\] \\[REVIEW REQUIRED\\] draft\\.md written`),
    );
    const report = await waitForEvent(ts, task.task_id, (e) => e.event === 'agent_input', { what: 'agent_input' });
    expect(report).toMatchObject({ caller_id: task.root_agent_id, from: childId, via: 'hook' });

    await proc.waitLine((o) => o.type === 'result', 'the result line');
    proc.child.stdin!.end();
    expect(await proc.exited).toBe(0);
  }, 90_000);

  it('post-tool-use and forbidden tools: in a session no spawner runs, a waiting message arrives as context after a tool call; SendMessage is refused', async () => {
    ts = await startTestServer();
    const task = await createTask(ts, { task: 'work on your own' });
    const sent = await ts.api('POST', `/agents/${task.root_agent_id}/send`, {
      content: 'Please also update the changelog.',
    });
    expect(sent.status).toBe(200);

    fake = await startFakeAnthropic([
      // SendMessage is Claude Code's own (a person's session does not disallow it): the hook denies it.
      {
        tools: [
          { name: 'mcp__beidou__list_peers', input: {} },
          { name: 'SendMessage', input: { to: 'teammate', message: 'hello', summary: 'hello' } },
        ],
      },
      { text: 'Will do.' },
    ]);
    // A person's own Claude Code: the MCP server and the hooks of docs/claude-code.md.
    const dir = tmp('beidou-claude-cwd-');
    const mcpConfig = path.join(dir, 'mcp.json');
    const settings = path.join(dir, 'settings.json');
    writeFileSync(
      mcpConfig,
      JSON.stringify({
        mcpServers: { beidou: { type: 'http', url: task.mcp_url, headers: { Authorization: `Bearer ${task.token}` } } },
      }),
    );
    const hook = (event: string) => [{ type: 'command', command: `node "${CLI}" hook ${event}` }];
    writeFileSync(
      settings,
      JSON.stringify({
        // The hook runs as the agent of this token (settings' env reaches the hook commands).
        env: { BEIDOU_TOKEN: task.token, BEIDOU_SERVER: ts.url },
        hooks: {
          PreToolUse: [{ matcher: '*', hooks: hook('pre-tool-use') }],
          PostToolUse: [{ matcher: '*', hooks: hook('post-tool-use') }],
          Stop: [{ hooks: hook('stop') }],
        },
      }),
    );
    const proc = run(
      CLAUDE,
      [
        '-p',
        'Look at your team.',
        '--output-format',
        'stream-json',
        '--verbose',
        '--mcp-config',
        mcpConfig,
        '--settings',
        settings,
        '--permission-mode',
        'bypassPermissions',
      ],
      { cwd: dir, env: claudeEnv(fake, tmp('beidou-claude-home-'), { IS_SANDBOX: '1' }) },
    );
    procs.push(proc);

    const next = await fake.waitForTurn(1, { timeoutMs: STEP_MS });
    const body = JSON.stringify(next.body);
    expect(body).toContain('New messages in your Beidou inbox');
    expect(body).toContain('[from user (user)] Please also update the changelog.');
    // Only after the tool call: the first request did not carry it.
    const firstTurn = await fake.waitForTurn(0);
    expect(JSON.stringify(firstTurn.body)).not.toContain('update the changelog');
    // The forbidden shadow tool was refused by the hook, pointing at ours.
    const shadow = resultFor(next.body, firstTurn.toolUseIds![1]!);
    expect(shadow.is_error).toBe(true);
    expect(resultText(shadow)).toContain('SendMessage is not available here: use mcp__beidou__send_message');
    expect(
      await waitForEvent(ts, task.task_id, (e) => e.event === 'disallowed_alias.denied', {
        what: 'disallowed_alias.denied',
      }),
    ).toMatchObject({
      caller_id: task.root_agent_id,
      tool_name: 'SendMessage',
    });
    const input = await waitForEvent(ts, task.task_id, (e) => e.event === 'agent_input', { what: 'agent_input' });
    expect(input).toMatchObject({
      caller_id: task.root_agent_id,
      via: 'hook',
      message_id: sent.body.message_id,
      from: 'user',
    });
    expect(await proc.exited).toBe(0);
    // Delivered once: the inbox is empty and nothing else took it.
    expect((await ts.api('GET', `/agents/${task.root_agent_id}`)).body).toMatchObject({ inbox_depth: 0 });
  }, 90_000);

  it("a person's session: the root's brief arrives as server instructions, and /mcp__beidou__launch hands the model its launch prompt", async () => {
    ts = await startTestServer();
    const task = await createTask(ts, { task: 'Write a haiku about the sea into haiku.md' });
    fake = await startFakeAnthropic([{ text: 'Hello.' }, { text: 'Starting on the haiku.' }]);
    const dir = tmp('beidou-claude-cwd-');
    const mcpConfig = path.join(dir, 'mcp.json');
    writeFileSync(
      mcpConfig,
      JSON.stringify({
        mcpServers: { beidou: { type: 'http', url: task.mcp_url, headers: { Authorization: `Bearer ${task.token}` } } },
      }),
    );
    // Turns on stdin, as a person types them once the session is up.
    const proc = run(
      CLAUDE,
      ['-p', '--input-format', 'stream-json', '--output-format', 'stream-json', '--verbose', '--mcp-config', mcpConfig],
      {
        cwd: dir,
        env: claudeEnv(fake, tmp('beidou-claude-home-')),
        stdin: true,
      },
    );
    procs.push(proc);

    // A typed first turn: Claude Code adds the server's instructions to it.
    proc.child.stdin!.write(userLine('hello'));
    const first = await fake.waitForTurn(0, { timeoutMs: STEP_MS });
    expect(JSON.stringify(first.body)).toContain('# MCP Server Instructions');
    expect(JSON.stringify(first.body)).toContain(
      `You are agent root-${task.root_agent_id.slice(-4)} (${task.root_agent_id}) in Beidou task ${task.task_id}, the root agent`,
    );
    await proc.waitLine((o) => o.type === 'result', "the first turn's result");

    // The prompt as a command: Claude Code expands it into the user turn: skill, identity, contracts, task.
    proc.child.stdin!.write(userLine('/mcp__beidou__launch'));
    const second = await fake.waitForTurn(1, { timeoutMs: STEP_MS });
    const turn = lastUserText(second.body);
    expect(turn).toContain('<command-name>/mcp__beidou__launch</command-name>');
    expect(turn).toContain('You are root, a leader in a Beidou team.');
    expect(turn).toContain(`- Agent id: ${task.root_agent_id}`);
    expect(turn).toContain('## Completion-handoff contract');
    expect(turn).toContain('## Your task\nWrite a haiku about the sea into haiku.md');
    proc.child.stdin!.end();
    expect(await proc.exited).toBe(0);
  }, 90_000);

  it.skipIf(process.getuid?.() !== 0)(
    'as root with --sandbox none (and no IS_SANDBOX passed), Claude Code refuses bypassPermissions: the spawner reports the crashes',
    async () => {
      ts = await startTestServer();
      fake = await startFakeAnthropic([{ text: 'never asked' }]);
      const workdir = tmp('beidou-claude-work-');
      const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
      const spawner = run(
        process.execPath,
        [
          CLI,
          'spawner',
          '--server',
          ts.url,
          '--token',
          spawnerToken,
          '--adapter',
          'claude',
          '--claude-bin',
          CLAUDE,
          '--sandbox',
          'none',
          '--max-agents',
          '1',
          '--workdir',
          workdir,
        ],
        { cwd: workdir, env: claudeEnv(fake, tmp('beidou-claude-home-')) },
      );
      procs.push(spawner);
      const task = await createTask(ts, { task: 'never runs', spawn: true });
      const escalated = await waitForEvent(ts, task.task_id, (e) => e.event === 'root_crash_escalation', {
        timeoutMs: STEP_MS,
        what: 'root_crash_escalation',
      });
      expect(escalated.stderr).toContain('cannot be used with root/sudo privileges');
      // It said so at start, in one line.
      expect(spawnerLog(spawner).filter((l) => /^--sandbox none: /.test(String(l.msg)))).toHaveLength(1);
      const events = (await ts.api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).body
        .events as AnyEvent[];
      expect(eventsNamed(events, 'agent_crashed').map((e) => e.strike_count)).toEqual([1, 2, 3]);
      expect(eventsNamed(events, 'agent_crashed')[0]!.msg).toBe('exited with code 1');
      expect(fake.requests.filter((r) => r.path === '/v1/messages')).toEqual([]);
    },
    60_000,
  );

  it('claude mcp add-json with the line `beidou task start --no-spawn` prints: claude mcp list reports it connected through the headers helper, no token in its config', async () => {
    ts = await startTestServer();
    fake = await startFakeAnthropic([]);
    const home = tmp('beidou-claude-home-');
    const cwd = tmp('beidou-claude-cwd-');
    const start = run(
      process.execPath,
      [CLI, 'task', 'start', 'from my own Claude Code', '--no-spawn', '--json', '--server', ts.url, '--home', ts.home],
      {
        cwd,
        env: process.env,
      },
    );
    const printed = await start.waitLine((o) => typeof o.claude_mcp_add === 'string', 'the task start output');
    expect(await start.exited).toBe(0);
    // Claude Code runs an MCP server's headers helper only in a folder the user has trusted.
    settleClaudeHome(home, { projects: [cwd] });
    const env = claudeEnv(fake, home, { PATH: `${path.dirname(CLAUDE)}${path.delimiter}${process.env.PATH ?? ''}` });
    const add = run('/bin/sh', ['-c', printed.claude_mcp_add as string], { cwd, env });
    expect(await add.exited, add.stderr()).toBe(0);
    const list = run(CLAUDE, ['mcp', 'list'], { cwd, env });
    expect(await list.exited, list.stderr()).toBe(0);
    const line = list.lines.find((l) => l.startsWith('beidou:'));
    expect(line, list.lines.join('\n')).toBeDefined();
    expect(line).toContain(printed.mcp_url);
    expect(line).toMatch(/connected/i);
    expect(line).not.toMatch(/needs authentication|failed/i);
    const get = run(CLAUDE, ['mcp', 'get', 'beidou'], { cwd, env });
    expect(await get.exited, get.stderr()).toBe(0);
    expect(get.lines.join('\n')).toMatch(/connected/i);
    // Connected through the headers helper: the token is in its 0600 file, not in Claude Code's config.
    const token = readFileSync(printed.token_file as string, 'utf8').trim();
    expect(printed).not.toHaveProperty('token');
    expect(printed.claude_mcp_add).not.toContain(token);
    const configs = readdirSync(home)
      .filter((f) => f.includes('claude'))
      .flatMap((f) => (statSync(path.join(home, f)).isFile() ? [readFileSync(path.join(home, f), 'utf8')] : []));
    expect(configs.join('\n')).toContain('mcp-headers --token-file');
    expect(configs.join('\n')).not.toContain(token);
  }, 60_000);
});

/** With DUMP_CLAUDE_TEST=1: what the fake received, what the processes printed and the events, in $TMPDIR. */
async function dump(
  testName: string,
  ts: TestServer | undefined,
  fake: FakeAnthropic | undefined,
  procs: Proc[],
): Promise<void> {
  const base = path.join(os.tmpdir(), `dump-${testName.slice(0, 20).replace(/\W+/g, '_')}`);
  writeFileSync(`${base}-requests.json`, JSON.stringify(fake?.requests ?? [], null, 1));
  for (const [i, p] of procs.entries())
    writeFileSync(`${base}-proc${i}.txt`, `${p.lines.join('\n')}\n---stderr---\n${p.stderr()}`);
  if (!ts) return;
  for (const t of (await ts.api('GET', '/tasks')).body.tasks as Array<{ task_id: string }>) {
    const events = (await ts.api('GET', `/tasks/${t.task_id}/events?since=0&limit=10000`)).body.events;
    writeFileSync(`${base}-events-${t.task_id}.json`, JSON.stringify(events, null, 1));
  }
}

/** The spawner's JSON log lines (pino on stderr). */
function spawnerLog(p: Proc): Array<Record<string, any>> {
  return p
    .stderr()
    .split('\n')
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, any>];
      } catch {
        return [];
      }
    });
}

/** Claude Code run with exactly the files and arguments the claude adapter produces. */
function launchLikeTheSpawner(
  ts: TestServer,
  fake: FakeAnthropic,
  task: { root_agent_id: string; token: string; mcp_url: string },
  cwd: string,
  home: string,
  filesDir: string,
): { proc: Proc; args: string[] } {
  const spec = {
    launch: { agent_id: task.root_agent_id, token: task.token, prompt: 'You are the lead.', model: null },
    serverUrl: ts.url,
    mcpUrl: task.mcp_url,
    cwd,
    resume: false,
    sessionId: randomUUID(),
    nudge: null,
  } as unknown as StartSpec; // the fields the adapter's files and arguments use
  const files = writeAgentFiles(filesDir, spec);
  const args = claudeArgs(spec, files, 'bypassPermissions');
  const proc = run(CLAUDE, args, {
    cwd,
    stdin: true,
    env: claudeEnv(fake, home, {
      IS_SANDBOX: '1',
      CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS: '',
      BEIDOU_TOKEN: task.token,
      BEIDOU_SERVER: ts.url,
      BEIDOU_URL: task.mcp_url,
      BEIDOU_AGENT_ID: task.root_agent_id,
    }),
  });
  return { proc, args };
}
