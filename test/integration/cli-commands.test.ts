import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clock, dateTime } from '../../src/cli/table.js';
import { beidou, buildCli, CliChild, closedPort } from '../support/cli.js';
import { until } from '../../src/testkit/poll.js';
import { handSpawner } from '../support/spawner-stream.js';
import {
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
  type ToolOutcome,
} from '../support/server.js';

/**
 * The commands a person runs a team with: `task list|show|terminate`, `agent show`,
 * `message`, `decline`, `spawners` and `tail`, as child processes of the real binary against
 * a real server holding a real team (a root on the real MCP client, a plan, two agents a
 * hand-driven spawner runs, one of them failed). Each command's table and `--json`; names
 * resolved with `--task`; errors that name the flag; the one message when no server is there.
 */

beforeAll(() => buildCli(false), 120_000);

/** The cells of a table row: columns are two or more spaces apart. */
const cells = (line: string) => line.trim().split(/\s{2,}/);
/** The row of `stdout` whose first cell (after the tree's branches) is `first`. */
function row(stdout: string, first: string): string[] {
  const line = stdout.split('\n').find((l) => cells(l.replace(/^[\s│├└─]+/, ''))[0] === first);
  if (line === undefined) throw new Error(`no row ${first} in:\n${stdout}`);
  return cells(line.replace(/^[\s│├└─]+/, ''));
}

const WRITER_ERROR = {
  exception: 'NotLoggedIn',
  msg: 'Claude Code is not logged in ("Not logged in · Please run /login")',
  stderr: 'starting\nNot logged in · Please run /login',
  reason: 'not_logged_in',
};

describe('operating a team from the CLI', { timeout: 60_000 }, () => {
  let ts: TestServer;
  let root: TestAgent;
  let task: Awaited<ReturnType<typeof createTask>>;
  let spawnerId: string;
  const writers: Array<{ agent_id: string; name: string; plan: string }> = [];
  const streams: AbortController[] = [];
  const agents: TestAgent[] = [];
  const cli = (...args: string[]) => beidou([...args, '--server', ts.url, '--home', ts.home]);

  beforeAll(async () => {
    // The hand-driven spawner never beats: on a slow machine the file outlasts three default beats, and it would be lost.
    ts = await startTestServer({ env: { BEIDOU_SPAWNER_HEARTBEAT_S: '600' } });
    const spawner = await handSpawner(ts, 'cli-box', streams);
    spawnerId = (await spawner.next('hello')).spawner_id;
    task = await createTask(ts, { task: 'Write the operator guide', name: 'guide' });
    root = await connectAgent(ts.url, task.token);
    agents.push(root);
    const plan = await root.call('declare_plan', {
      tasks: [
        { id: 'intro', role: 'writer', skill: 'worker', task: 'write the intro' },
        { id: 'outro', role: 'writer', skill: 'worker', task: 'write the outro' },
        { id: 'edit', role: 'editor', skill: 'worker', task: 'edit both', depends_on: ['intro', 'outro'] },
      ],
    });
    expect(plan.ok).toBe(true);
    for (const id of ['intro', 'outro']) {
      const spawned = await root.call('spawn_agent', { task_id: id });
      expect(spawned.ok).toBe(true);
      const launch = await spawner.next('launch', spawned.ok ? spawned.value.agent_id : '');
      const view = (await ts.api('GET', `/agents/${launch.agent_id}`)).body;
      writers.push({ agent_id: launch.agent_id, name: view.name, plan: id });
      expect(
        (await spawner.post(`/agents/${launch.agent_id}/started`, { session_id: `s-${id}`, resumed: false })).status,
      ).toBe(200);
    }
    // The intro's writer works and costs; the outro's fails as an unlogged Claude Code does.
    const [intro, outro] = writers as [(typeof writers)[0], (typeof writers)[0]];
    const work = await spawner.post(`/agents/${intro.agent_id}/events`, {
      events: [
        {
          event: 'turn.usage',
          message_id: 'm1',
          model: 'claude-test',
          stop_reason: 'tool_use',
          input_tokens: 1200,
          output_tokens: 300,
        },
        { event: 'tool_called', message_id: 'm1', tool_use_id: 't1', name: 'Write', input: {} },
        {
          event: 'run.cost',
          total_cost_usd: 0.0123,
          duration_ms: 10,
          duration_api_ms: 5,
          num_turns: 1,
          usage: {},
          model_usage: {},
        },
      ],
    });
    expect(work.status).toBe(200);
    expect(
      (await spawner.post(`/agents/${outro.agent_id}/events`, { events: [{ event: 'agent_error', ...WRITER_ERROR }] }))
        .status,
    ).toBe(200);
  });

  afterAll(async () => {
    for (const s of streams.splice(0)) s.abort();
    await Promise.allSettled(agents.map((a) => a.close()));
    await ts?.close();
    if (ts) removeHome(ts.home);
  });

  it("task list: a row per task (name, status, live/total agents, events, created, text); --json is the API's answer", async () => {
    const [plain, json, api] = await Promise.all([
      cli('task', 'list'),
      cli('task', 'list', '--json'),
      ts.api('GET', '/tasks'),
    ]);
    expect(plain.code).toBe(0);
    expect(plain.stderr).toBe('');
    const listed = api.body.tasks.find((t: { task_id: string }) => t.task_id === task.task_id);
    expect(cells(plain.stdout.split('\n')[0]!)).toEqual([
      'TASK',
      'NAME',
      'STATUS',
      'AGENTS',
      'EVENTS',
      'CREATED',
      'TEXT',
    ]);
    expect(row(plain.stdout, task.task_id)).toEqual([
      task.task_id,
      'guide',
      'running',
      '3/3',
      String(listed.event_count),
      dateTime(listed.created_at),
      'Write the operator guide',
    ]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout).tasks.find((t: { task_id: string }) => t.task_id === task.task_id)).toEqual(listed);
  });

  let question: { qid: string; asked: Promise<ToolOutcome> };

  it("task show: the team tree with statuses and the error's reason, plan states, the question waiting, cost; --json is the API's answer", async () => {
    const asked = root.call('ask_user', {
      questions: [
        {
          question: 'Which tone?',
          header: 'Tone',
          multiSelect: false,
          options: [
            { label: 'Formal', description: '' },
            { label: 'Casual', description: '' },
          ],
        },
      ],
    });
    const pending = await until('the root question', async () =>
      (await ts.api('GET', '/questions/pending')).body.find(
        (q: { asker_agent_id: string }) => q.asker_agent_id === task.root_agent_id,
      ),
    );
    question = { qid: pending.qid, asked };

    const [plain, json, api] = await Promise.all([
      cli('task', 'show', task.task_id),
      cli('task', 'show', task.task_id, '--json'),
      ts.api('GET', `/tasks/${task.task_id}`),
    ]);
    expect(plain.code).toBe(0);
    expect(plain.stderr).toBe('');
    expect(JSON.parse(json.stdout)).toEqual(api.body);
    const out = plain.stdout;
    const rootName = api.body.agents[0].name as string;
    const [intro, outro] = writers as [(typeof writers)[0], (typeof writers)[0]];
    const teamName = api.body.teams[0].name as string;

    expect(out.split('\n')[0]).toBe(`task ${task.task_id} "guide": running`);
    expect(out).toContain(`  root       ${rootName} (${task.root_agent_id})`);
    // The tree: the root, and its two writers under it, the last with └─.
    const tree = out.split('\nteam\n')[1]!.split('\n\n')[0]!.split('\n');
    expect(tree.map((l) => cells(l)[0])).toEqual(['AGENT', rootName, `├─ ${intro.name}`, `└─ ${outro.name}`]);
    expect(row(out, rootName)).toEqual([
      rootName,
      task.root_agent_id,
      '-',
      '-',
      'leader',
      'active',
      'external',
      '0/0',
      '$0.0000',
      '0',
    ]);
    expect(row(out, intro.name)).toEqual([
      intro.name,
      intro.agent_id,
      teamName,
      'writer',
      'worker',
      'active',
      'running',
      '1200/300',
      '$0.0123',
      '1',
    ]);
    expect(row(out, outro.name)).toEqual([
      outro.name,
      outro.agent_id,
      teamName,
      'writer',
      'worker',
      'error (not_logged_in)',
      'running',
      '0/0',
      '$0.0000',
      '0',
    ]);
    const errorAt = api.body.agents.find((a: { agent_id: string }) => a.agent_id === outro.agent_id).error.at as number;
    expect(out).toContain(
      `errors\n  ${outro.name}: not_logged_in: ${WRITER_ERROR.msg} (at ${clock(errorAt)})\n    stderr: Not logged in · Please run /login\n`,
    );

    // Plan states: the two spawned tasks with their agents, the edit blocked on both.
    expect(row(out, 'intro')).toEqual(['intro', 'writer', 'in_flight', intro.name, '-']);
    expect(row(out, 'outro')).toEqual(['outro', 'writer', 'in_flight', outro.name, '-']);
    expect(row(out, 'edit')).toEqual(['edit', 'editor', 'blocked', '-', 'intro, outro']);

    expect(out).toContain(
      `questions waiting\n  ${question.qid}  from ${rootName}, with you (ask_user): [Tone] Which tone?\n`,
    );
    const { stats } = api.body;
    expect(out).toContain(
      `cost\n  $0.0123; 1200 tokens in, 300 out; 1 tool call; 3 agents (3 live), 1 team, 0 messages (0 undelivered), ${stats.events} events\n`,
    );
  });

  it('decline: --reason is required (exit 2), an empty one is named by its flag (exit 1); the asker gets user_declined', async () => {
    const { qid, asked } = question;
    const [noReason, blank] = await Promise.all([cli('decline', qid), cli('decline', qid, '--reason', ' ')]);
    expect(noReason).toEqual({
      code: 2,
      stdout: '',
      stderr: 'beidou: say why: --reason "..." (the asking agent reads it)\n',
    });
    expect(blank).toEqual({ code: 1, stdout: '', stderr: 'beidou: 400 invalid_input: --reason: must say why\n' });

    expect(await cli('decline', qid, '--reason', 'decide the tone yourself')).toEqual({
      code: 0,
      stdout: `declined ${qid}\n`,
      stderr: '',
    });
    const result = await asked;
    expect(result).toMatchObject({ ok: false, error: { error: 'user_declined' } });
    expect(result.ok ? '' : result.error.message).toContain('decide the tone yourself');

    const [again, json] = await Promise.all([
      cli('decline', qid, '--reason', 'again'),
      cli('decline', 'q_nosuch', '--reason', 'x', '--json'),
    ]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^beidou: 409 already_answered: /);
    expect(json).toEqual({ code: 1, stdout: '', stderr: 'beidou: 404 unknown_qid: no question q_nosuch\n' });
  });

  it('answer: errors name --choose, --text or --answers, not the JSON field', async () => {
    const asked = root.call('ask_user', {
      questions: [
        {
          question: 'Which format?',
          header: 'Format',
          multiSelect: false,
          options: [
            { label: 'Markdown', description: '' },
            { label: 'Custom', description: '', requires_text: true },
          ],
        },
      ],
    });
    const { qid } = await until('the format question', async () =>
      (await ts.api('GET', '/questions/pending')).body.find(
        (q: { asker_agent_id: string }) => q.asker_agent_id === task.root_agent_id,
      ),
    );
    const [notAnOption, needsText, two, inJson, tooFew] = await Promise.all([
      cli('answer', qid, '--choose', 'HTML'),
      cli('answer', qid, '--choose', 'Custom'),
      cli('answer', qid, '--choose', 'Markdown', '--choose', 'Custom', '--text', 'x'),
      cli('answer', qid, '--answers', JSON.stringify([{ selected_labels: ['HTML'] }])),
      cli('answer', qid, '--answers', '[]'),
    ]);
    expect(notAnOption).toEqual({
      code: 1,
      stdout: '',
      stderr: 'beidou: 400 invalid_input: --choose: "HTML" is not an option (options: Markdown, Custom)\n',
    });
    expect(needsText).toEqual({
      code: 1,
      stdout: '',
      stderr: 'beidou: 400 invalid_input: --text: the option "Custom" requires a text answer\n',
    });
    expect(two.stderr).toBe(
      'beidou: 400 invalid_input: --choose: this is a single-select question; choose one option\n',
    );
    expect(inJson.stderr).toBe(
      'beidou: 400 invalid_input: --answers (answers[0].selected_labels): "HTML" is not an option (options: Markdown, Custom)\n',
    );
    expect(tooFew.stderr).toBe(
      'beidou: 400 invalid_input: --answers (answers): must hold one answer per sub-question\n',
    );

    expect((await cli('answer', qid, '--choose', 'Custom', '--text', 'AsciiDoc')).code).toBe(0);
    expect(await asked).toMatchObject({ ok: true, value: { answer_text: 'Format: Custom: AsciiDoc' } });
  });

  it("agent show: by id, or with --task by name, role or root; the failed agent's error and stderr; --json is the API's view", async () => {
    const [intro, outro] = writers as [(typeof writers)[0], (typeof writers)[0]];
    const api = (await ts.api('GET', `/agents/${outro.agent_id}`)).body;
    const detail = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    const rootName = detail.agents[0].name as string;
    const [byId, byName, byRole, json, rootByAlias] = await Promise.all([
      cli('agent', 'show', outro.agent_id),
      cli('agent', 'show', outro.name, '--task', task.task_id),
      cli('agent', 'show', 'editor', '--task', task.task_id),
      cli('agent', 'show', outro.name, '--task', task.task_id, '--json'),
      cli('agent', 'show', 'root', '--task', task.task_id, '--json'),
    ]);
    expect(byId.code).toBe(0);
    expect(byId.stdout).toBe(byName.stdout);
    const lines = byId.stdout.split('\n');
    expect(lines[0]).toBe(`agent ${outro.name} (${outro.agent_id}): error (not_logged_in)`);
    expect(byId.stdout).toContain(`  leader     ${rootName} (${task.root_agent_id})\n`);
    expect(byId.stdout).toContain(`  team       ${detail.teams[0].name} (${detail.teams[0].team_id})\n`);
    expect(byId.stdout).toContain(`  plan task  outro\n`);
    expect(byId.stdout).toContain(`  process    running on spawner ${spawnerId}\n`);
    expect(byId.stdout).toContain(`  error      not_logged_in: ${WRITER_ERROR.msg} (at ${clock(api.error.at)})\n`);
    expect(byId.stdout).toContain(`  stderr     starting\n             Not logged in · Please run /login\n`);
    expect(JSON.parse(json.stdout)).toEqual(api);
    expect(JSON.parse(rootByAlias.stdout).agent_id).toBe(task.root_agent_id);
    // No agent holds the role "editor" yet: the plan task is blocked.
    expect(byRole).toEqual({
      code: 1,
      stdout: '',
      stderr: `beidou: no agent "editor" in task ${task.task_id} (its agents: ${rootName}, ${intro.name}, ${outro.name})\n`,
    });
  });

  it('names: a role two agents hold is ambiguous (exit 2), a name without --task or in an unknown task is refused (exit 1)', async () => {
    const [intro, outro] = writers as [(typeof writers)[0], (typeof writers)[0]];
    const [ambiguous, noTask, unknownTask, ambiguousMessage] = await Promise.all([
      cli('agent', 'show', 'writer', '--task', task.task_id),
      cli('agent', 'show', intro.name),
      cli('agent', 'show', intro.name, '--task', 'tsk_nosuch'),
      cli('message', 'writer', 'hello', '--task', task.task_id),
    ]);
    const fits = `beidou: "writer" fits 2 agents of task ${task.task_id}: ${intro.name} (${intro.agent_id}), ${outro.name} (${outro.agent_id}); give a name or an id\n`;
    expect(ambiguous).toEqual({ code: 2, stdout: '', stderr: fits });
    expect(ambiguousMessage).toEqual({ code: 2, stdout: '', stderr: fits });
    expect(noTask).toEqual({
      code: 1,
      stdout: '',
      stderr: `beidou: 404 unknown_agent: no agent ${intro.name} (to find an agent by name or role, give its task: --task TASK_ID)\n`,
    });
    expect(unknownTask).toEqual({ code: 1, stdout: '', stderr: 'beidou: 404 unknown_task: no task tsk_nosuch\n' });
  });

  it('message: to a name with --task, as the user; the agent reads it from its inbox; an empty TEXT is named as such', async () => {
    const detail = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    const rootName = detail.agents[0].name as string;
    const sent = await cli('message', rootName, 'Please keep it short.', '--task', task.task_id);
    expect(sent.code).toBe(0);
    const m = /^sent (msg_\S+) to (\S+) \((ag_\w+)\)\n$/.exec(sent.stdout);
    expect(m?.slice(2)).toEqual([rootName, task.root_agent_id]);
    const json = await cli('message', task.root_agent_id, 'And friendly.', '--json');
    const sentJson = JSON.parse(json.stdout);
    expect(sentJson).toEqual({ ok: true, message_id: expect.stringMatching(/^msg_/), agent_id: task.root_agent_id });

    const inbox = await root.call('read_inbox');
    expect(
      inbox.ok &&
        inbox.value.messages.map((x: { message_id: string; from: string; content: string }) => [
          x.message_id,
          x.from,
          x.content,
        ]),
    ).toEqual([
      [m![1], 'user', 'Please keep it short.'],
      [sentJson.message_id, 'user', 'And friendly.'],
    ]);
    expect(await cli('message', task.root_agent_id, '')).toEqual({
      code: 1,
      stdout: '',
      stderr: 'beidou: 400 invalid_input: TEXT: must not be empty\n',
    });
  });

  it("task start: the server's refusals name TEXT, --skill and --name", async () => {
    const [blank, skill, name] = await Promise.all([
      cli('task', 'start', '   ', '--no-spawn'),
      cli('task', 'start', 'x', '--no-spawn', '--skill', 'nope'),
      cli('task', 'start', 'x', '--no-spawn', '--name', 'n'.repeat(201)),
    ]);
    expect(blank).toEqual({ code: 1, stdout: '', stderr: 'beidou: 400 invalid_input: TEXT: must describe the task\n' });
    expect(skill.code).toBe(1);
    expect(skill.stderr).toMatch(
      /^beidou: 400 unknown_skill: --skill "nope" does not resolve to a loadable SKILL\.md \(skills: [^)]*leader[^)]*\)\n$/,
    );
    expect(name.stderr).toMatch(/^beidou: 400 invalid_input: --name: /);
  });

  it("spawners: each spawner and the agents it holds; --json is the API's answer", async () => {
    const [plain, json, api] = await Promise.all([
      cli('spawners'),
      cli('spawners', '--json'),
      ts.api('GET', '/spawners'),
    ]);
    expect(plain.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual(api.body);
    const s = api.body.spawners[0];
    expect(row(plain.stdout, spawnerId)).toEqual([spawnerId, 'cli-box', 'yes', '2/4', clock(s.last_heartbeat_at)]);
    const [intro, outro] = writers as [(typeof writers)[0], (typeof writers)[0]];
    expect(
      plain.stdout
        .split('\n')
        .filter((l) => l.startsWith('SPAWNER'))
        .map(cells),
    ).toEqual([
      ['SPAWNER', 'NAME', 'CONNECTED', 'AGENTS', 'LAST HEARTBEAT'],
      ['SPAWNER', 'AGENT', 'STATUS', 'PID'],
    ]);
    const held = plain.stdout
      .split('\n')
      .filter((l) => l.startsWith(spawnerId) && l.includes('ag_'))
      .map(cells);
    expect(held).toEqual([
      [spawnerId, intro.agent_id, 'active', '-'],
      [spawnerId, outro.agent_id, 'error', '-'],
    ]);
  });

  it('tail: the last events as sentences, then each new one as it happens, with names learned as agents appear', async ({
    onTestFinished,
  }) => {
    const own = await createTask(ts, { task: 'tail me', name: 'tailed' });
    const leader = await connectAgent(ts.url, own.token);
    agents.push(leader);
    const rootName = (await ts.api('GET', `/agents/${own.root_agent_id}`)).body.name as string;

    // --no-follow: the past only; -n picks how many.
    const past = await cli('tail', own.task_id, '--no-follow', '--since', '0');
    expect(past.code).toBe(0);
    const all = (await ts.api('GET', `/tasks/${own.task_id}/events?since=0`)).body.events as Array<{ ts: number }>;
    expect(past.stdout.split('\n').filter(Boolean)).toEqual([
      `${clock(all[0]!.ts)} user started the task with ${rootName} as its root (skill leader): "tail me"`,
      `${clock(all[1]!.ts)} user → ${rootName}: spawned (skill leader)`,
    ]);
    const [one, beyond, badLines] = await Promise.all([
      cli('tail', own.task_id, '--no-follow', '-n', '1'),
      cli('tail', own.task_id, '--since', '999'),
      cli('tail', own.task_id, '--lines', 'all'),
    ]);
    expect(one.stdout.split('\n').filter(Boolean)).toHaveLength(1);
    expect(beyond).toEqual({
      code: 1,
      stdout: '',
      stderr: `beidou: 400 invalid_input: --since: 999 is beyond the last event of this task (seq ${all.length})\n`,
    });
    expect(badLines).toEqual({ code: 2, stdout: '', stderr: 'beidou: --lines must be a non-negative integer\n' });

    const follow = new CliChild(['tail', own.task_id, '--server', ts.url, '--home', ts.home]);
    onTestFinished(async () => void (await follow.stop('SIGKILL')));
    await follow.waitForLine((l) => l.endsWith(`user → ${rootName}: spawned (skill leader)`));

    const team = await leader.call('create_team', {
      name: 'critics',
      task: 'read it',
      roles: [{ role: 'critic', skill: 'worker', description: 'reads the draft' }],
    });
    expect(team.ok).toBe(true);
    const critic = team.ok ? (team.value.members[0].agent_id as string) : '';
    const criticName = (await ts.api('GET', `/agents/${critic}`)).body.name as string;
    await follow.waitForLine((l) => l.endsWith(`${rootName} → ${criticName}: spawned as critic (skill worker)`));

    const content = 'Read the draft in docs/ and list every sentence that is longer than it needs to be.';
    expect((await leader.call('send_message', { to: critic, content })).ok).toBe(true);
    const line = await follow.waitForLine((l) => l.includes(` ${rootName} → ${criticName}: message`));
    expect(line).toMatch(/^\d\d:\d\d:\d\d /);
    expect(line.slice(9)).toBe(
      `${rootName} → ${criticName}: message (${content.length} chars) "Read the draft in docs/ and list every sentence that is lon…"`,
    );

    expect((await cli('message', 'root', 'status?', '--task', own.task_id)).code).toBe(0);
    await follow.waitForLine((l) => l.endsWith(`user → ${rootName}: message (7 chars) "status?"`));
    expect(follow.stderr).toBe('');
    expect((await follow.stop('SIGTERM')).signal).toBe('SIGTERM');
  });

  it("tail --no-follow --since 0: one sentence per event of the whole team's log, each naming agents by name", async () => {
    const [run, api] = await Promise.all([
      cli('tail', task.task_id, '--no-follow', '--since', '0'),
      ts.api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`),
    ]);
    expect(run.code).toBe(0);
    const lines = run.stdout.split('\n').filter(Boolean);
    const events = api.body.events as Array<{ ts: number; event: string }>;
    expect(lines).toHaveLength(events.length);
    expect(lines.map((l) => l.slice(0, 8))).toEqual(events.map((e) => clock(e.ts)));
    // Every kind of event here has its sentence: none falls back to the bare name, none prints a missing field.
    for (const line of lines) expect(line).not.toMatch(/undefined|NaN|null|\(seq \d+\)$/);
    const [, outro] = writers as [(typeof writers)[0], (typeof writers)[0]];
    expect(lines).toContain(
      `${clock(events.find((e) => e.event === 'agent_error')!.ts)} ${outro.name} failed [not_logged_in]: ${WRITER_ERROR.msg}`,
    );
    expect(new Set(events.map((e) => e.event)).size).toBeGreaterThanOrEqual(10);
  });

  it('task terminate: the task ends as terminated; a second time is refused (exit 1)', async () => {
    const other = await createTask(ts, { task: 'to be stopped' });
    expect(await cli('task', 'terminate', other.task_id)).toEqual({
      code: 0,
      stdout: `terminating ${other.task_id}: its root and every agent under it are told to stop; the task ends as terminated\n`,
      stderr: '',
    });
    expect((await ts.api('GET', `/tasks/${other.task_id}`)).body.task.status).toBe('terminated');
    const [again, json] = await Promise.all([
      cli('task', 'terminate', other.task_id),
      cli('task', 'terminate', task.task_id, '--json'),
    ]);
    expect(again).toEqual({
      code: 1,
      stdout: '',
      stderr: `beidou: 409 already_terminating: task ${other.task_id} is already terminated\n`,
    });
    expect(JSON.parse(json.stdout)).toEqual({ ok: true, task_id: task.task_id });
  });

  it('every command says the same when no server is there (exit 1)', async () => {
    const port = await closedPort();
    const server = `http://127.0.0.1:${port}`;
    const scratch = mkdtempSync(path.join(os.tmpdir(), 'beidou-noserver-'));
    try {
      const commands = [
        ['task', 'list'],
        ['task', 'show', task.task_id],
        ['task', 'terminate', task.task_id],
        ['task', 'start', 'x', '--no-spawn'],
        ['agent', 'show', task.root_agent_id],
        ['agent', 'show', 'root', '--task', task.task_id],
        ['message', task.root_agent_id, 'hi'],
        ['questions'],
        ['answer', 'q_x', '--text', 'x'],
        ['decline', 'q_x', '--reason', 'x'],
        ['spawners'],
        ['events', '--task', task.task_id],
        ['events', '--task', task.task_id, '--follow'],
        ['tail', task.task_id],
        ['tail', task.task_id, '--no-follow'],
        ['token', '--agent', task.root_agent_id],
        ['token', '--spawner'],
        ['attach', '--agent', task.root_agent_id],
        ['spawner', '--adapter', 'command', '--command', 'true', '--spool-dir', path.join(scratch, 'spool')],
      ];
      const runs = await Promise.all(
        commands.map((args) => beidou([...args, '--server', server, '--home', ts.home], {}, scratch)),
      );
      const expected = {
        code: 1,
        stdout: '',
        stderr: `beidou: cannot reach ${server} (ECONNREFUSED): is beidou serve running there? (--server or BEIDOU_SERVER says where)\n`,
      };
      expect(runs.map((r, i) => ({ command: commands[i]!.join(' '), ...r }))).toEqual(
        commands.map((c) => ({ command: c.join(' '), ...expected })),
      );
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});

// docs/cli.md's examples of these commands are run and checked by test/docs/cli.test.ts;
// the quarantined task from the CLI is test/embedded/cli-quarantine.test.ts (embedded store only).
