import { afterEach, describe, expect, it } from 'vitest';
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
 * A whole team's life, end to end over HTTP: every agent is a real MCP client
 * with its own token.
 */
describe('topology walkthrough', () => {
  let ts: TestServer;
  const clients: TestAgent[] = [];
  afterEach(async () => {
    await Promise.allSettled(clients.map((c) => c.close()));
    clients.length = 0;
    await ts.close();
    removeHome(ts.home);
  });

  const ok = (r: ToolOutcome): any => {
    if (!r.ok) throw new Error(`expected success, got ${JSON.stringify(r.error)}`);
    return r.value;
  };
  const as = async (agentId: string) => {
    const token = await agentToken(ts, agentId);
    const client = await connectAgent(ts.url, token);
    clients.push(client);
    return { client, token };
  };

  it('plans, spawns, reviews, advances readiness and cascades termination', async () => {
    ts = await startTestServer();
    const task = await createTask(ts, { task: 'ship the product' });
    const root = await connectAgent(ts.url, task.token);
    clients.push(root);

    // Root declares three tasks; build waits on design.
    const plan = ok(
      await root.call('declare_plan', {
        tasks: [
          { id: 'design', role: 'architect', skill: 'leader', task: 'design it, with a team' },
          { id: 'build', role: 'builder', skill: 'worker', task: 'build it', depends_on: ['design'] },
          { id: 'docs', role: 'writer', skill: 'worker', task: 'document it' },
        ],
      }),
    );
    expect(plan.tasks.map((t: { id: string; status: string }) => [t.id, t.status])).toEqual([
      ['design', 'ready'],
      ['build', 'blocked'],
      ['docs', 'ready'],
    ]);
    expect(ok(await root.call('list_ready')).ready).toEqual(['design', 'docs']);

    const design = ok(await root.call('spawn_agent', { task_id: 'design' }));
    expect(design).toMatchObject({ task_id: 'design', team_created: true, remaining_ready: ['docs'] });
    const docs = ok(await root.call('spawn_agent', { task_id: 'docs' }));
    expect(docs).toMatchObject({ team_id: design.team_id, team_created: false, remaining_ready: [] });
    expect(await root.call('spawn_agent', { task_id: 'build' })).toMatchObject({
      ok: false,
      error: { error: 'task_not_ready', details: { unmet_deps: ['design'] } },
    });

    // The spawned agents are registered with a queued launch request carrying the assignment.
    const detail = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    const designRecord = detail.agents.find((a: { agent_id: string }) => a.agent_id === design.agent_id);
    expect(designRecord.launch.state).toBe('queued');
    expect(designRecord.launch.first_message).toMatch(
      /^\[TASK ASSIGNMENT\]\nplan_task_id: design\nartifacts_path: .*artifacts\/design\n\[\/TASK ASSIGNMENT\]\n\ndesign it, with a team$/,
    );
    expect(designRecord.launch.prompt).toMatch(
      /## Identity[\s\S]*## Persistent-agent contract[\s\S]*## Completion-handoff contract/,
    );

    // The child leads its own plan and spawns two grandchildren.
    const architect = (await as(design.agent_id)).client;
    ok(
      await architect.call('declare_plan', {
        tasks: [
          { id: 'api', role: 'api-designer', skill: 'worker', task: 'design the API' },
          { id: 'ui', role: 'ui-designer', skill: 'worker', task: 'design the UI' },
        ],
      }),
    );
    const api = ok(await architect.call('spawn_agent', { task_id: 'api' }));
    const ui = ok(await architect.call('spawn_agent', { task_id: 'ui' }));
    expect(api.team_created).toBe(true);
    expect(api.team_id).not.toBe(design.team_id);
    const apiAgent = (await as(api.agent_id)).client;
    const uiAgent = (await as(ui.agent_id)).client;

    // The root leads neither grandchild.
    expect(await root.call('terminate_child', { agent_id: api.agent_id, force: true })).toMatchObject({
      ok: false,
      error: { error: 'not_leader' },
    });

    // Grandchildren hand up; the architect's review gate closes until it answers.
    ok(await apiAgent.call('signal_review', { detail: '[REVIEW REQUIRED] api.md written' }));
    ok(await uiAgent.call('signal_review', { detail: '[REVIEW REQUIRED] ui.md written' }));
    const reports = ok(await architect.call('read_inbox')).messages;
    expect(reports.map((m: { kind: string; from: string }) => [m.kind, m.from])).toEqual([
      ['review_report', api.agent_id],
      ['review_report', ui.agent_id],
    ]);
    const pending = ok(await architect.call('list_pending_reviews')).reviews;
    expect(pending.map((r: { agent_id: string }) => r.agent_id)).toEqual([api.agent_id, ui.agent_id]);
    expect(await architect.call('list_ready')).toMatchObject({ ok: false, error: { error: 'review_gate_blocked' } });

    // Rework for the API, approval for the UI.
    ok(await architect.call('send_message', { to: api.agent_id, content: 'add error codes' }));
    ok(await architect.call('terminate_child', { agent_id: ui.agent_id }));
    expect(ok(await apiAgent.call('read_inbox')).messages.map((m: { content: string }) => m.content)).toEqual([
      'add error codes',
    ]);
    ok(await apiAgent.call('signal_review', { detail: '[REVIEW REQUIRED] api.md with error codes' }));
    ok(await architect.call('terminate_child', { agent_id: api.agent_id }));
    expect(ok(await architect.call('list_pending_reviews')).reviews).toEqual([]);

    // The architect hands up; the root approves; build becomes ready.
    ok(await architect.call('signal_review', { detail: '[REVIEW REQUIRED] design done: api.md, ui.md' }));
    ok(await root.call('terminate_child', { agent_id: design.agent_id }));
    expect(ok(await root.call('list_ready')).ready).toEqual(['build']);
    const build = ok(await root.call('spawn_agent', { task_id: 'build' }));
    expect(build.team_id).toBe(design.team_id);

    // Terminating the root cascades to every agent still alive.
    const live = (await ts.api('GET', `/tasks/${task.task_id}`)).body.agents.filter(
      (a: { status: string }) => a.status !== 'terminated',
    );
    expect(live.map((a: { agent_id: string }) => a.agent_id).sort()).toEqual(
      [task.root_agent_id, docs.agent_id, build.agent_id].sort(),
    );
    expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
    const after = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    expect(after.task.status).toBe('terminated');
    expect(after.agents.every((a: { status: string }) => a.status === 'terminated')).toBe(true);
    const refused = await fetch(`${ts.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${task.token}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(refused.status).toBe(401);

    // The log holds the events in the order docs/events.md promises.
    const events = (await ts.api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).body.events as Array<
      Record<string, any>
    >;
    const idx = (pred: (e: Record<string, any>) => boolean) => events.findIndex(pred);
    const teamCreated = idx((e) => e.event === 'team_created' && e.team_id === design.team_id);
    const firstSpawned = idx((e) => e.event === 'agent_spawned' && e.team_id === design.team_id);
    expect(teamCreated).toBeGreaterThan(-1);
    expect(teamCreated).toBeLessThan(firstSpawned);
    const taskSpawned = idx((e) => e.event === 'task_spawned' && e.plan_task_id === 'design');
    expect(firstSpawned).toBeLessThan(taskSpawned);
    const approved = idx((e) => e.event === 'completion.approved' && e.agent_id === design.agent_id);
    const done = idx((e) => e.event === 'task_done' && e.plan_task_id === 'design');
    const ready = idx((e) => e.event === 'task_ready' && e.plan_task_id === 'build');
    expect(approved).toBeGreaterThan(-1);
    expect(approved).toBeLessThan(done);
    expect(done).toBeLessThan(ready);
    const ack = idx((e) => e.event === 'review.acknowledged' && e.agent_id === api.agent_id);
    expect(ack).toBeGreaterThan(idx((e) => e.event === 'status' && e.agent_id === api.agent_id));
    expect(events.filter((e) => e.event === 'review_gate.denied' && e.caller_id === design.agent_id)).toHaveLength(1);
    expect(events.filter((e) => e.event === 'liveness_check')).toHaveLength(4);
    // Cascade: children before their leader, the root last, then the task ends.
    const consumed = events.filter((e) => e.event === 'terminate.consumed').map((e) => e.agent_id);
    expect(consumed.slice(-3)).toEqual([docs.agent_id, build.agent_id, task.root_agent_id]);
    expect(events.at(-1)).toMatchObject({ event: 'task_ended', status: 'terminated', reason: 'admin' });
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  });
});
