import { afterEach, describe, expect, it } from 'vitest';
import { CallToolResultSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { durableEvents } from '../support/events.js';
import {
  agentToken,
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
  type ToolOutcome,
} from '../support/server.js';

/**
 * Bad input as a tool error (never a JSON-RPC internal error): `arguments`
 * that is not an object, a `__proto__` key, the hook's forbidden-tool lookup, and the
 * pattern every id, role and name an agent supplies must match. Real server, real MCP client.
 */

const planTask = (id: string, depends_on: string[] = []) => ({
  id,
  role: 'writer',
  skill: 'worker',
  task: `do ${id}`,
  depends_on,
});

function expectInvalid(outcome: ToolOutcome, field: string): void {
  expect(outcome).toMatchObject({ ok: false, error: { error: 'invalid_input', details: { field } } });
}

describe('input validation', () => {
  let ts: TestServer | null = null;
  const agents: TestAgent[] = [];

  async function setUp() {
    ts = await startTestServer();
    const task = await createTask(ts);
    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    return { ts, task, root };
  }

  /** A raw tools/call, bypassing the helper's typed arguments. */
  async function rawCall(agent: TestAgent, params: Record<string, unknown>): Promise<CallToolResult> {
    return (await agent.client.request(
      { method: 'tools/call', params } as never,
      CallToolResultSchema,
    )) as CallToolResult;
  }

  afterEach(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = null;
    }
  });

  it('tools/call whose arguments is not an object, or whose name is not a string, is an invalid_input tool error, and nothing is written', async () => {
    const { ts, task, root } = await setUp();
    const before = durableEvents(ts, task.task_id);
    for (const args of [null, [], 'x', 42, true]) {
      const result = await rawCall(root, { name: 'send_message', arguments: args });
      expect(result.isError, JSON.stringify(args)).toBe(true);
      const body = JSON.parse((result.content[0] as { text: string }).text);
      expect(body).toMatchObject({ error: 'invalid_input', details: { field: 'arguments' } });
      expect(body.message).not.toMatch(/ZodError|"code"/);
    }
    // A name that is missing or not a string is an unknown tool, not a protocol error.
    for (const params of [{ arguments: {} }, { name: { x: 1 }, arguments: {} }, { name: 42 }, { name: null }]) {
      const result = await rawCall(root, params);
      expect(result.isError, JSON.stringify(params)).toBe(true);
      expect(JSON.parse((result.content[0] as { text: string }).text)).toMatchObject({
        error: 'invalid_input',
        details: { field: 'name' },
      });
    }
    // A tool without required input still accepts absent arguments.
    const listed = await rawCall(root, { name: 'list_peers' });
    expect(listed.isError).toBeFalsy();
    expect(durableEvents(ts, task.task_id)).toEqual(before);
  });

  it('a __proto__ input key is refused like any unknown field (MCP and REST)', async () => {
    const { ts, task, root } = await setUp();
    const team = await root.call('create_team', {
      name: 'crew',
      task: 'x',
      roles: [{ role: 'a', skill: 'worker', description: 'a' }],
    });
    if (!team.ok) throw new Error('create_team failed');
    const childId = team.value.members[0].agent_id as string;
    const before = durableEvents(ts, task.task_id);
    // JSON.parse keeps "__proto__" as an own key, as a client's JSON would carry it.
    const args = JSON.parse(`{"to": "${childId}", "content": "hi", "__proto__": {"leader_id": "ag_other"}}`);
    const result = await rawCall(root, { name: 'send_message', arguments: args });
    expect(result.isError).toBe(true);
    expect(JSON.parse((result.content[0] as { text: string }).text)).toMatchObject({
      error: 'invalid_input',
      details: { field: '__proto__', unknown_fields: ['__proto__'] },
    });
    expect(durableEvents(ts, task.task_id)).toEqual(before);

    const rest = await ts.api('POST', `/agents/${childId}/send`, '{"content": "hi", "__proto__": {"x": 1}}');
    expect(rest).toMatchObject({ status: 400, body: { error: 'invalid_input' } });
    expect(durableEvents(ts, task.task_id)).toEqual(before);
  });

  it("the hook's forbidden-tool lookup knows only its own tools: constructor, toString and __proto__ are allowed", async () => {
    const { ts, task } = await setUp();
    const preToolUse = async (toolName: string) => {
      const res = await fetch(`${ts.url}/api/hook/pre-tool-use`, {
        method: 'POST',
        headers: { authorization: `Bearer ${task.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ tool_name: toolName, tool_input: {} }),
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { decision: string };
    };
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf']) {
      expect(await preToolUse(name), name).toEqual({ decision: 'allow' });
    }
    expect(durableEvents(ts, task.task_id).filter((e) => e.event === 'disallowed_alias.denied')).toEqual([]);
    // The real ones are still denied.
    expect(await preToolUse('TodoWrite')).toMatchObject({ decision: 'deny' });
    expect(durableEvents(ts, task.task_id).filter((e) => e.event === 'disallowed_alias.denied')).toHaveLength(1);
  });

  it('plan task ids, roles and team names must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ (invalid_input), nothing written', async () => {
    const { ts, task, root } = await setUp();
    const before = durableEvents(ts, task.task_id);
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['declare_plan', { tasks: [planTask('../../../../../../etc/cron.d/x')] }, 'tasks[0].id'],
      ['declare_plan', { tasks: [planTask('../../etc/cron.d/x')] }, 'tasks[0].id'],
      ['declare_plan', { tasks: [planTask('a/b')] }, 'tasks[0].id'],
      ['declare_plan', { tasks: [planTask('.hidden')] }, 'tasks[0].id'],
      ['declare_plan', { tasks: [planTask('x'.repeat(65))] }, 'tasks[0].id'],
      ['declare_plan', { tasks: [{ ...planTask('a'), role: 'two words' }] }, 'tasks[0].role'],
      [
        'create_team',
        { name: '../crew', task: 'x', roles: [{ role: 'a', skill: 'worker', description: 'a' }] },
        'name',
      ],
      [
        'create_team',
        { name: 'crew', task: 'x', roles: [{ role: 'a\nb', skill: 'worker', description: 'a' }] },
        'roles[0].role',
      ],
      ['spawn_agent', { task_id: '../x' }, 'task_id'],
      ['send_message', { to: '../ag', content: 'hi' }, 'to'],
      ['terminate_child', { agent_id: '' }, 'agent_id'],
      ['answer_question', { qid: 'q/1', answers: [{ text: 'x' }], reason: 'r' }, 'qid'],
      ['escalate_question', { qid: ' q', reason: 'r' }, 'qid'],
      // Dependencies per plan task are bounded, so one plan stays a short request.
      [
        'declare_plan',
        {
          tasks: [
            ...Array.from({ length: 51 }, (_, i) => planTask(`d${i}`)),
            planTask(
              'z',
              Array.from({ length: 51 }, (_, i) => `d${i}`),
            ),
          ],
        },
        'tasks[51].depends_on',
      ],
    ];
    for (const [tool, args, field] of cases) expectInvalid(await root.call(tool, args), field);
    // A dependency can only name an id of the plan, so any other is simply unknown.
    expect(await root.call('declare_plan', { tasks: [planTask('a'), planTask('b', ['../a'])] })).toMatchObject({
      ok: false,
      error: { error: 'unknown_dep' },
    });
    expect(durableEvents(ts, task.task_id)).toEqual(before);

    // The longest and the most varied accepted forms.
    const fifty = Array.from({ length: 50 }, (_, i) => `d${i}`);
    const ok = await root.call('declare_plan', {
      tasks: [
        planTask('x'.repeat(64)),
        planTask('A.b_c-9', ['x'.repeat(64), ...fifty.slice(1)]),
        ...fifty.map((id) => planTask(id)),
      ],
    });
    expect(ok.ok).toBe(true);
  });

  it('the pattern is checked on input only: a log written with an older, looser id still replays', async () => {
    const { ts: first, task } = await setUp();
    const odd = 'old id with spaces';
    await first.server.services.registry.commit([
      {
        event: 'plan_declared',
        task_id: task.task_id,
        plan_id: 'pl_old',
        owner_agent_id: task.root_agent_id,
        team_id: null,
        plan_path: '/nowhere/pl_old.json',
        tasks: [
          {
            id: odd,
            role: 'a role',
            skill: 'worker',
            depends_on: [],
            status: 'ready',
            task: 't',
            description: '',
            model: null,
          },
        ],
      },
    ]);
    const home = first.home;
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    await first.close();
    ts = await startTestServer({ home });
    expect(ts.server.services.registry.state.plans.get('pl_old')?.tasks.has(odd)).toBe(true);
    const root = await connectAgent(ts.url, await agentToken(ts, task.root_agent_id));
    agents.push(root);
    const ready = await root.call('list_ready');
    expect(ready).toMatchObject({ ok: true });
  });
});
