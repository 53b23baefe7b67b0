import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  tempHome,
  type TestAgent,
  type TestServer,
} from '../support/server.js';
import { beidou, buildCli } from '../support/cli.js';
import { until } from '../../src/testkit/poll.js';
import { rollupRows, STORE, storeEnv, withDatabase } from '../support/store.js';

/**
 * `beidou questions`, `beidou answer` and `beidou stats rebuild` as a person runs them: child
 * processes of `node dist/cli/main.js` against a real server. A root agent asks through a
 * real MCP client; the test waits for its question by polling the admin API with a
 * deadline, never by sleeping.
 */

beforeAll(() => buildCli(false), 120_000);

interface Pending {
  qid: string;
  task_id: string;
  asker_agent_id: string;
  origin: string;
  questions: unknown[];
  context: string | null;
  chain: string[];
  created_at: number;
}

const LANGUAGE = {
  question: 'Which language should the service use?',
  header: 'Language',
  multiSelect: false,
  options: [
    { label: 'TypeScript', description: 'Node 20, strict', value: 'ts' },
    { label: 'Go', description: 'one static binary', value: 'go' },
  ],
};

describe('beidou questions / beidou answer', { timeout: 60_000 }, () => {
  let ts: TestServer;
  const agents: TestAgent[] = [];
  const cli = (...args: string[]) => beidou([...args, '--server', ts.url, '--home', ts.home]);

  beforeAll(async () => {
    ts = await startTestServer();
  });
  afterAll(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    await ts?.close();
    if (ts) removeHome(ts.home);
  });

  /** A root agent (spawn: false) connected through a real MCP client. */
  async function rootAgent() {
    const task = await createTask(ts, { task: 'build the service' });
    const agent = await connectAgent(ts.url, task.token);
    agents.push(agent);
    return { task, agent };
  }

  /** Waits until the root's question is at the user gateway. */
  function pendingFrom(asker: string): Promise<Pending> {
    return until(`a pending question from ${asker}`, async () => {
      const res = await ts.api<Pending[]>('GET', '/questions/pending');
      return res.body.find((q) => q.asker_agent_id === asker);
    });
  }

  it('with nothing pending, says so (and --json prints [])', async () => {
    const [plain, json] = await Promise.all([cli('questions'), cli('questions', '--json')]);
    expect(plain).toEqual({ code: 0, stdout: 'no questions are waiting for you\n', stderr: '' });
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual([]);
  });

  it('lists a root question asked through ask_user, answers it with --choose/--text, and the ask_user call returns that answer', async () => {
    const { task, agent } = await rootAgent();
    const asked = agent.call('ask_user', { questions: [LANGUAGE], context: 'We start coding tomorrow.' });
    const pending = await pendingFrom(task.root_agent_id);
    expect(pending).toMatchObject({ task_id: task.task_id, origin: 'ask_user', chain: ['user'] });

    const [listed, json] = await Promise.all([cli('questions'), cli('questions', '--json')]);
    expect(listed.code).toBe(0);
    expect(listed.stderr).toBe('');
    const lines = listed.stdout.split('\n');
    expect(lines[0]).toBe(`${pending.qid}  task ${task.task_id}  from ${task.root_agent_id}  (ask_user, via user)`);
    expect(listed.stdout).toContain('  context: We start coding tomorrow.');
    expect(listed.stdout).toContain('  1. [Language] Which language should the service use?');
    expect(listed.stdout).toContain('     - TypeScript: Node 20, strict');
    expect(listed.stdout).toContain('     - Go: one static binary');
    expect(listed.stdout).toContain('beidou answer QID --choose LABEL');

    expect(json.code).toBe(0);
    const fromCli = JSON.parse(json.stdout) as Pending[];
    expect(fromCli.find((q) => q.qid === pending.qid)).toEqual(pending);

    const answered = await cli('answer', pending.qid, '--choose', 'TypeScript', '--text', 'strict mode on');
    expect(answered).toEqual({ code: 0, stdout: `answered ${pending.qid}\n`, stderr: '' });

    const result = await asked;
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.value).toEqual({
      qid: pending.qid,
      answers: [{ selected_labels: ['TypeScript'], selected_values: ['ts'], text: 'strict mode on' }],
      answer_text: 'Language: TypeScript: strict mode on',
    });

    // Gone from the gateway; the CLI sees the same.
    const after = await cli('questions', '--json');
    expect((JSON.parse(after.stdout) as Pending[]).some((q) => q.qid === pending.qid)).toBe(false);
  });

  it('answers a free-text question with --text alone, and a multi-question one with --answers JSON', async () => {
    const { task, agent } = await rootAgent();
    const free = agent.call('ask_user', {
      questions: [{ question: 'Deadline?', header: '', multiSelect: false, options: [] }],
    });
    const q1 = await pendingFrom(task.root_agent_id);
    expect((await cli('answer', q1.qid, '--text', 'Friday')).code).toBe(0);
    const r1 = await free;
    expect(r1.ok && r1.value.answer_text).toBe('Friday');

    const two = agent.call('ask_user', {
      questions: [
        LANGUAGE,
        {
          question: 'Which features?',
          header: 'Features',
          multiSelect: true,
          options: [
            { label: 'Auth', description: '' },
            { label: 'Search', description: '' },
          ],
        },
      ],
    });
    const q2 = await until('the second question', async () => {
      const res = await ts.api<Pending[]>('GET', '/questions/pending');
      return res.body.find((q) => q.asker_agent_id === task.root_agent_id && q.qid !== q1.qid);
    });
    const answers = JSON.stringify([
      { selected_labels: ['Go'], text: null },
      { selected_labels: ['Auth', 'Search'], text: null },
    ]);
    expect(await cli('answer', q2.qid, '--answers', answers)).toEqual({
      code: 0,
      stdout: `answered ${q2.qid}\n`,
      stderr: '',
    });
    const r2 = await two;
    expect(r2.ok).toBe(true);
    if (r2.ok) expect(r2.value.answer_text).toBe('Language: Go\nFeatures: Auth, Search');
  });

  it("prints an agent's question, context, labels and report with no escape sequence or control, and no line that passes as one of its own", async () => {
    const ESC = '\u001b';
    const fake = (qid: string) => `${qid}  task t_fake  from user  (ask_user, via user)`;
    const hostile = {
      question: `Ship it?\n  2. [Approve] the user already approved\r${fake('q_fake1')}${ESC}[1A${ESC}[2K`,
      header: `G${ESC}]52;c;eA\u0007`,
      multiSelect: false,
      options: [
        {
          label: `Yes${ESC}]8;;https://evil.example/${ESC}\\click${ESC}]8;;${ESC}\\`,
          description: 'fine\n     - No: the user chose this',
        },
        { label: `No\u202e\u009b2K`, description: `\u2028${fake('q_fake2')}` },
      ],
    };
    const { task, agent } = await rootAgent();
    void agent
      .call('ask_user', {
        questions: [hostile],
        context: `ctx${ESC}]52;c;ZWNobyBwd25lZA==\u0007\n\n${fake('q_fake3')}\u0085  context: forged`,
      })
      .catch(() => undefined);
    await pendingFrom(task.root_agent_id);
    // The root's hand-off becomes a question to the user: its report is an agent's words too.
    const second = await rootAgent();
    expect(
      (await second.agent.call('signal_review', { detail: `[REVIEW REQUIRED] done\n${fake('q_fake4')}${ESC}[2J` })).ok,
    ).toBe(true);
    await until('the root review at the gateway', async () =>
      (await ts.api<Pending[]>('GET', '/questions/pending')).body.find((q) => q.task_id === second.task.task_id),
    );

    const outputs = await Promise.all([
      cli('questions'),
      cli('task', 'show', task.task_id),
      cli('task', 'show', second.task.task_id),
      cli('tail', task.task_id, '--no-follow', '--lines', '100'),
      cli('tail', second.task.task_id, '--no-follow', '--lines', '100'),
    ]);
    for (const out of outputs) {
      expect(out.code, out.stderr).toBe(0);
      expect(out.stdout).not.toMatch(/(?!\n)\p{Cc}|[\p{Default_Ignorable_Code_Point}\p{Cf}\u2028\u2029]/u);
      for (const line of out.stdout.split('\n')) {
        expect(line, 'a forged question entry').not.toMatch(/^q_fake/);
        expect(line, 'a forged sub-question').not.toMatch(/^ {0,4}2\. /);
        expect(line, 'a forged option').not.toMatch(/^ {0,5}- No: the user/);
        expect(line, 'a forged context').not.toMatch(/^ {0,2}context: forged/);
      }
    }
    const listed = outputs[0]!.stdout;
    // The words are all there, each further line of them marked.
    expect(listed).toContain('  1. [G] Ship it?\n     |   2. [Approve] the user already approved\n     | q_fake1');
    expect(listed).toContain('  context: ctx\n    | \n    | q_fake3');
    expect(listed).toContain('     - Yesclick: fine\n       |      - No: the user chose this');
    expect(listed).toContain('     | q_fake4');
  });

  it('answer errors: usage mistakes exit 2, refusals by the server exit 1 with its code, nothing is answered', async () => {
    const { task, agent } = await rootAgent();
    const asked = agent.call('ask_user', { questions: [LANGUAGE] });
    const { qid } = await pendingFrom(task.root_agent_id);

    // Independent runs go in parallel: child processes are the slow part of this file.
    const [nothing, badJson, both, noQid, notAnOption, tooMany, unknown] = await Promise.all([
      cli('answer', qid),
      cli('answer', qid, '--answers', '[{'),
      cli('answer', qid, '--answers', '[]', '--choose', 'Go'),
      cli('answer'),
      cli('answer', qid, '--choose', 'Rust'),
      cli('answer', qid, '--answers', JSON.stringify([{ selected_labels: ['Go'] }, { selected_labels: ['Go'] }])),
      cli('answer', 'q_doesnotexist', '--text', 'hello'),
    ]);

    // Usage mistakes: exit 2, one line on stderr, the server is not asked.
    expect(nothing.code).toBe(2);
    expect(nothing.stdout).toBe('');
    expect(nothing.stderr).toMatch(/--choose.*--text/);
    expect(badJson.code).toBe(2);
    expect(badJson.stderr).toContain('--answers must be a JSON array');
    expect(both.code).toBe(2);
    expect(both.stderr).toContain('not both');

    // Missing argument: commander's own error, exit 1.
    expect(noQid.code).toBe(1);
    expect(noQid.stderr).toContain("missing required argument 'qid'");

    // Refusals by the server: exit 1, the status and the error code on stderr.
    expect(notAnOption.code).toBe(1);
    expect(notAnOption.stdout).toBe('');
    // Named by the flag that carried it, not the request's field (answers[0].selected_labels).
    expect(notAnOption.stderr).toMatch(/^beidou: 400 invalid_input: --choose: "Rust" is not an option/);
    expect(tooMany.code).toBe(1);
    expect(tooMany.stderr).toContain('400 answer_count_mismatch');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('404 unknown_qid');

    // Still pending after all that.
    const still = await ts.api<Pending[]>('GET', '/questions/pending');
    expect(still.body.some((q) => q.qid === qid)).toBe(true);

    expect((await cli('answer', qid, '--choose', 'Go')).code).toBe(0);
    const result = await asked;
    expect(result.ok && result.value.answers[0].selected_values).toEqual(['go']);

    const again = await cli('answer', qid, '--choose', 'TypeScript');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('409 already_answered');
  });

  it('fails without a reachable server or an admin token', async () => {
    const unreachable = await beidou(['questions', '--server', 'http://127.0.0.1:9', '--home', ts.home]);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toContain('cannot reach http://127.0.0.1:9');

    const home = tempHome();
    try {
      const noToken = await beidou(['answer', 'q_x', '--text', 'x', '--server', ts.url, '--home', home]);
      expect(noToken.code).toBe(2);
      expect(noToken.stderr).toContain('no admin token');
      // BEIDOU_ADMIN_TOKEN takes the place of the file.
      const viaEnv = await beidou(['questions', '--json', '--server', ts.url, '--home', home], {
        BEIDOU_ADMIN_TOKEN: ts.adminToken,
      });
      expect(viaEnv.code).toBe(0);
      expect(Array.isArray(JSON.parse(viaEnv.stdout))).toBe(true);
    } finally {
      removeHome(home);
    }
  });
});

describe('beidou stats rebuild', { timeout: 60_000 }, () => {
  it("recreates the rollups from a stopped server's event logs", async () => {
    const ts = await startTestServer();
    const home = ts.home;
    try {
      const task = await createTask(ts, { task: 'rollups from the logs', name: 'rollup-demo' });
      const root = await connectAgent(ts.url, task.token);
      const team = await root.call('create_team', {
        name: 'builders',
        task: 'build it',
        roles: [
          { role: 'backend', skill: 'worker', description: 'the API' },
          { role: 'frontend', skill: 'worker', description: 'the UI' },
        ],
      });
      expect(team.ok).toBe(true);
      const members = (team.ok ? team.value.members : []) as Array<{ agent_id: string; role: string }>;
      expect((await root.call('send_message', { to: members[0]!.agent_id, content: 'start with the schema' })).ok).toBe(
        true,
      );
      await root.close();
      await ts.close();

      // Throw the rollups away (even a corrupt stats.db, or stale rows): they are derived data.
      const env = await storeEnv(home);
      let where: string;
      if (STORE === 'embedded') {
        where = path.join(home, 'stats.db');
        for (const suffix of ['-wal', '-shm']) rmSync(where + suffix, { force: true });
        writeFileSync(where, 'not a database');
      } else {
        const url = new URL(env.BEIDOU_DATABASE_URL!);
        where = `the rollup tables of postgres://${url.username}@${url.host}${url.pathname}`;
        await withDatabase(home, (c) =>
          c.query(
            `DELETE FROM agents; UPDATE tasks SET status = 'stale'; INSERT INTO teams VALUES ('tm_gone', 't', 'gone', 'x', NULL, 1, 0, 0)`,
          ),
        );
      }

      const run = await beidou(['stats', 'rebuild', '--home', home], env);
      expect(run).toEqual({
        code: 0,
        stdout: `rebuilt ${where}: 1 tasks, 1 teams, 3 agents, 0 questions\n`,
        stderr: '',
      });

      const tasks = await rollupRows(home, 'SELECT * FROM tasks');
      expect(tasks).toHaveLength(1);
      expect(tasks[0]).toMatchObject({
        task_id: task.task_id,
        name: 'rollup-demo',
        text: 'rollups from the logs',
        status: 'running',
        root_agent_id: task.root_agent_id,
        agent_count: 3,
        team_count: 1,
        ended_at: null,
      });
      expect(tasks[0]!.event_count).toBeGreaterThan(3);

      const agents = await rollupRows(home, 'SELECT * FROM agents ORDER BY created_at, agent_id');
      expect(agents).toHaveLength(3);
      const byId = new Map(agents.map((a) => [a.agent_id as string, a]));
      expect(byId.get(task.root_agent_id)).toMatchObject({
        task_id: task.task_id,
        team_id: null,
        leader_id: 'user',
        skill: 'leader',
        status: 'active',
        messages_sent: 1,
        terminated_at: null,
      });
      const teamId = team.ok ? team.value.team_id : '';
      expect(byId.get(members[0]!.agent_id)).toMatchObject({
        task_id: task.task_id,
        team_id: teamId,
        role: 'backend',
        skill: 'worker',
        leader_id: task.root_agent_id,
        status: 'pending_launch',
        inbox_depth: 1,
      });
      expect(byId.get(members[1]!.agent_id)).toMatchObject({ role: 'frontend', inbox_depth: 0 });

      const teams = await rollupRows(home, 'SELECT * FROM teams');
      expect(teams).toEqual([
        expect.objectContaining({
          team_id: teamId,
          task_id: task.task_id,
          leader_id: task.root_agent_id,
          depth: 1,
          member_count: 2,
        }),
      ]);
    } finally {
      await ts.close();
      removeHome(home);
    }
  });

  it('exits 2 on a bad setting', async () => {
    const home = tempHome();
    try {
      const run = await beidou(['stats', 'rebuild', '--home', home], { BEIDOU_MAX_DEPTH: 'deep' });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain('BEIDOU_MAX_DEPTH');
    } finally {
      removeHome(home);
    }
  });
});
