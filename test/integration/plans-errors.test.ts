import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PRIMITIVES_BY_NAME } from '../../src/primitives/index.js';
import { invokePrimitive } from '../../src/primitives/invoke.js';
import type { ToolContext } from '../../src/primitives/define.js';
import { durableEvents, eventsNamed, type AnyEvent } from '../support/events.js';
import { planLocation, storedPlans } from '../support/store.js';
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
 * Every error code of the plan, spawn and review primitives (declare_plan, remove_plan,
 * spawn_agent, list_ready, terminate_child, list_pending_reviews, signal_review,
 * request_termination) and the review gate, over real MCP clients against the real server.
 */

type Spec = { id: string; role: string; skill: string; task: string; depends_on: string[] };
const t = (id: string, depends_on: string[] = [], skill = 'worker'): Spec => ({
  id,
  role: `role-${id}`,
  skill,
  task: `do ${id}`,
  depends_on,
});

/** Asserts a structured tool error and returns its details. */
function expectError(outcome: ToolOutcome, code: string, details: Record<string, unknown> = {}): Record<string, any> {
  expect(outcome).toMatchObject({ ok: false, error: { error: code, details } });
  if (outcome.ok) throw new Error('unreachable');
  expect(outcome.raw.isError).toBe(true);
  expect(typeof outcome.error.message).toBe('string');
  expect(outcome.error.message.length).toBeGreaterThan(0);
  return outcome.error.details;
}

function expectOk<T = any>(outcome: ToolOutcome<T>): T {
  if (!outcome.ok) throw new Error(`expected success, got ${JSON.stringify(outcome.error)}`);
  return outcome.value;
}

describe('plans, spawning and reviews: error codes', () => {
  let ts: TestServer;
  const agents: TestAgent[] = [];
  const tempDirs: string[] = [];

  beforeEach(async () => {
    ts = await startTestServer();
  });
  afterEach(async () => {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    await ts.close();
    removeHome(ts.home);
    for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  async function restartWith(env: Record<string, string>) {
    await Promise.allSettled(agents.map((a) => a.close()));
    agents.length = 0;
    await ts.close();
    removeHome(ts.home);
    ts = await startTestServer({ env });
  }

  async function newRoot() {
    const task = await createTask(ts);
    const root = await connectAgent(ts.url, task.token);
    agents.push(root);
    return { task, root, rootId: task.root_agent_id, taskId: task.task_id };
  }

  /** A real MCP client for an agent the server registered, with a token minted for it. */
  async function connectAs(agentId: string): Promise<TestAgent> {
    const agent = await connectAgent(ts.url, await agentToken(ts, agentId));
    agents.push(agent);
    return agent;
  }

  async function spawn(leader: TestAgent, taskId: string): Promise<string> {
    return expectOk(await leader.call('spawn_agent', { task_id: taskId })).agent_id as string;
  }

  // The store's copies of a task's plans (files in the home, or rows of the database).
  const planFiles = (taskId: string) => storedPlans(ts.home, taskId);
  const events = (taskId: string): AnyEvent[] => durableEvents(ts, taskId);

  // ---------------------------------------------------------------- declare_plan

  describe('declare_plan', () => {
    it('refuses bad graphs and unknown skills with a precise code, and writes nothing', async () => {
      const { root, taskId } = await newRoot();

      expectError(await root.call('declare_plan', { tasks: [] }), 'empty_plan');

      expectError(await root.call('declare_plan', { tasks: [t('a'), t('b'), t('a')] }), 'duplicate_task_id', {
        id: 'a',
        indexes: [0, 2],
      });

      expectError(await root.call('declare_plan', { tasks: [t('a'), t('b', ['b'])] }), 'self_dep', {
        id: 'b',
        field: 'tasks[1].depends_on',
      });

      expectError(await root.call('declare_plan', { tasks: [t('a'), t('b', ['a', 'ghost'])] }), 'unknown_dep', {
        id: 'b',
        dep: 'ghost',
        field: 'tasks[1].depends_on',
      });

      // a -> c -> b -> a is the cycle; d hangs off it (unresolved, but not part of it); e is fine.
      const cyclic = [t('d', ['a']), t('a', ['c']), t('b', ['a']), t('c', ['b']), t('e')];
      const cycle = expectError(await root.call('declare_plan', { tasks: cyclic }), 'cycle_detected');
      const chain = cycle.chain as string[];
      expect(Array.isArray(chain)).toBe(true);
      expect(chain).toHaveLength(4);
      expect(chain[0]).toBe(chain[chain.length - 1]); // closed
      expect(new Set(chain.slice(0, -1))).toEqual(new Set(['a', 'b', 'c'])); // exactly the cycle's ids, d and e excluded
      // Consecutive ids are dependency edges, all in one direction.
      const deps = new Map(cyclic.map((s) => [s.id, s.depends_on]));
      const pairs = chain.slice(0, -1).map((id, i) => [id, chain[i + 1]!] as const);
      const forward = pairs.every(([x, y]) => deps.get(x)!.includes(y));
      const backward = pairs.every(([x, y]) => deps.get(y)!.includes(x));
      expect(forward || backward).toBe(true);

      const skill = expectError(
        await root.call('declare_plan', { tasks: [t('a'), t('b', ['a'], 'no-such-skill')] }),
        'unknown_skill',
        {
          skill: 'no-such-skill',
          field: 'tasks[1].skill',
        },
      );
      expect(skill.available).toEqual(expect.arrayContaining(['leader', 'worker']));

      // Nothing was written: no plan file, no plan event, no active plan.
      expect(await planFiles(taskId)).toEqual([]);
      expect(eventsNamed(events(taskId), 'plan_declared')).toEqual([]);
      expectError(await root.call('list_ready'), 'no_active_plan');

      // A valid plan is then accepted and persisted (embedded: as plans/<task_id>/<plan_id>.json).
      const declared = expectOk(await root.call('declare_plan', { tasks: [t('a'), t('b', ['a'])] }));
      expect(declared.tasks).toEqual([
        { id: 'a', role: 'role-a', skill: 'worker', depends_on: [], status: 'ready' },
        { id: 'b', role: 'role-b', skill: 'worker', depends_on: ['a'], status: 'blocked' },
      ]);
      expect(declared.plan_path).toBe(planLocation(ts.home, taskId, declared.plan_id));
      expect(await planFiles(taskId)).toEqual([`${declared.plan_id}.json`]);
      expect(expectOk(await root.call('list_ready'))).toEqual({ ready: ['a'] });
    });

    it('refuses a second plan with plan_already_declared and leaves the first untouched', async () => {
      const { root, taskId } = await newRoot();
      const first = expectOk(await root.call('declare_plan', { tasks: [t('a')] }));
      expectError(await root.call('declare_plan', { tasks: [t('x'), t('y')] }), 'plan_already_declared', {
        plan_id: first.plan_id,
      });
      expect(await planFiles(taskId)).toEqual([`${first.plan_id}.json`]);
      expect(eventsNamed(events(taskId), 'plan_declared')).toHaveLength(1);
      expect(expectOk(await root.call('list_ready'))).toEqual({ ready: ['a'] });
    });
  });

  // ---------------------------------------------------------------- remove_plan

  describe('remove_plan', () => {
    it('no_active_plan, plan_in_use naming in-flight tasks and agents, then renames the file on success', async () => {
      const { root, taskId } = await newRoot();
      expectError(await root.call('remove_plan'), 'no_active_plan');

      const plan = expectOk(await root.call('declare_plan', { tasks: [t('a'), t('b'), t('c', ['a'])] }));
      const a = await spawn(root, 'a');
      const b = await spawn(root, 'b');
      const inUse = expectError(await root.call('remove_plan'), 'plan_in_use');
      expect(inUse.in_flight).toEqual(
        expect.arrayContaining([
          { task_id: 'a', agent_id: a },
          { task_id: 'b', agent_id: b },
        ]),
      );
      expect(inUse.in_flight).toHaveLength(2);
      expect(await planFiles(taskId)).toEqual([`${plan.plan_id}.json`]);

      // Once nothing is in flight (a done, b failed, c ready), removal is allowed.
      const childA = await connectAs(a);
      expectOk(await childA.call('signal_review', { detail: '[REVIEW REQUIRED] a is done' }));
      expectOk(await root.call('terminate_child', { agent_id: a }));
      expectOk(await root.call('terminate_child', { agent_id: b, force: true }));
      expect(expectOk(await root.call('list_ready'))).toEqual({ ready: ['c'] });

      expect(expectOk(await root.call('remove_plan'))).toEqual({ removed_plan_id: plan.plan_id });
      expect(await planFiles(taskId)).toEqual([`${plan.plan_id}.removed.json`]);
      expect(eventsNamed(events(taskId), 'plan_removed', (e) => e.plan_id === plan.plan_id)).toHaveLength(1);
      expectError(await root.call('list_ready'), 'no_active_plan');
      expectError(await root.call('remove_plan'), 'no_active_plan');

      // A fresh plan can now be declared.
      const next = expectOk(await root.call('declare_plan', { tasks: [t('z')] }));
      expect(await planFiles(taskId)).toEqual([`${next.plan_id}.json`, `${plan.plan_id}.removed.json`].sort());
    });
  });

  // ---------------------------------------------------------------- spawn_agent

  describe('spawn_agent', () => {
    it('no_active_plan, unknown_task, task_not_ready and task_not_pending', async () => {
      const { root, taskId } = await newRoot();
      expectError(await root.call('spawn_agent', { task_id: 'a' }), 'no_active_plan');

      expectOk(await root.call('declare_plan', { tasks: [t('a'), t('b'), t('c', ['a', 'b'])] }));
      const unknown = expectError(await root.call('spawn_agent', { task_id: 'zzz' }), 'unknown_task', {
        task_id: 'zzz',
      });
      expect(unknown.tasks).toEqual(['a', 'b', 'c']);

      expectError(await root.call('spawn_agent', { task_id: 'c' }), 'task_not_ready', {
        task_id: 'c',
        unmet_deps: ['a', 'b'],
      });

      const first = expectOk(await root.call('spawn_agent', { task_id: 'a' }));
      expect(first).toMatchObject({ task_id: 'a', team_created: true, remaining_ready: ['b'] });
      expectError(await root.call('spawn_agent', { task_id: 'a' }), 'task_not_pending', {
        task_id: 'a',
        status: 'in_flight',
        agent_id: first.agent_id,
      });
      // Still blocked on the other dependency once a is in flight.
      expectError(await root.call('spawn_agent', { task_id: 'c' }), 'task_not_ready', { unmet_deps: ['a', 'b'] });

      // A done task is not pending either.
      const childA = await connectAs(first.agent_id);
      expectOk(await childA.call('signal_review', { detail: '[REVIEW REQUIRED] a' }));
      expectOk(await root.call('terminate_child', { agent_id: first.agent_id }));
      expectError(await root.call('spawn_agent', { task_id: 'a' }), 'task_not_pending', { status: 'done' });
      expectError(await root.call('spawn_agent', { task_id: 'c' }), 'task_not_ready', { unmet_deps: ['b'] });

      // Exactly one agent was spawned for a.
      expect(eventsNamed(events(taskId), 'task_spawned', (e) => e.plan_task_id === 'a')).toHaveLength(1);
    });

    it('depth_exceeded when a child of the root would lead a team past BEIDOU_MAX_DEPTH=1', async () => {
      await restartWith({ BEIDOU_MAX_DEPTH: '1' });
      const { root, taskId } = await newRoot();
      expectOk(await root.call('declare_plan', { tasks: [t('lead', [], 'leader')] }));
      const childId = await spawn(root, 'lead'); // the root's team is at depth 1: allowed
      const child = await connectAs(childId);
      // declare_plan is pure data and does not look at depth ...
      expectOk(await child.call('declare_plan', { tasks: [t('sub')] }));
      // ... spawn_agent does: the child's team would be at depth 2.
      expectError(await child.call('spawn_agent', { task_id: 'sub' }), 'depth_exceeded', { depth: 2, max_depth: 1 });
      // The plan stays declared but unspawnable; nothing was created.
      expect(expectOk(await child.call('list_ready'))).toEqual({ ready: ['sub'] });
      const all = events(taskId);
      expect(eventsNamed(all, 'team_created', (e) => e.leader_id === childId)).toEqual([]);
      expect(eventsNamed(all, 'agent_spawned', (e) => e.leader_id === childId)).toEqual([]);
    });

    it('unknown_skill at spawn when the SKILL.md exists (declare passes) but does not load', async () => {
      const skillsRoot = mkdtempSync(path.join(os.tmpdir(), 'beidou-skills-'));
      tempDirs.push(skillsRoot);
      mkdirSync(path.join(skillsRoot, 'broken'));
      // Front matter without the required description.
      writeFileSync(
        path.join(skillsRoot, 'broken', 'SKILL.md'),
        '---\nname: broken\nversion: 1\n---\nYou are {role}.\n',
      );
      await restartWith({ BEIDOU_SKILLS: skillsRoot });

      const { root, taskId } = await newRoot();
      expectOk(await root.call('declare_plan', { tasks: [t('x', [], 'broken'), t('y')] }));
      const err = expectError(await root.call('spawn_agent', { task_id: 'x' }), 'unknown_skill', { skill: 'broken' });
      expect(String(err.reason)).toMatch(/description/);
      // Nothing happened: the task is still ready, no team, no agent.
      expect(expectOk(await root.call('list_ready'))).toEqual({ ready: ['x', 'y'] });
      const all = events(taskId);
      expect(eventsNamed(all, 'team_created')).toEqual([]);
      expect(eventsNamed(all, 'agent_spawned')).toHaveLength(1); // the root only
    });

    it('concurrent_spawn for a second spawn_agent in the same tick, while the first commit awaits the disk', async () => {
      const { root, rootId, taskId } = await newRoot();
      expectOk(await root.call('declare_plan', { tasks: [t('a'), t('b')] }));
      const services = ts.server.services;
      const ctx = (): ToolContext => ({
        services,
        caller: services.registry.agent(rootId)!,
        signal: new AbortController().signal,
        progress: async () => {},
      });
      const spawnAgent = PRIMITIVES_BY_NAME.get('spawn_agent')!;
      const [first, second] = await Promise.all([
        invokePrimitive(spawnAgent, { task_id: 'a' }, ctx()),
        invokePrimitive(spawnAgent, { task_id: 'b' }, ctx()),
      ]);
      expect(first).toMatchObject({ ok: true, output: { task_id: 'a', team_created: true } });
      expect(second.ok).toBe(false);
      if (second.ok) return;
      expect(second.error.code).toBe('concurrent_spawn');
      // The refused call changed nothing, and the lock is released afterwards.
      expect(expectOk(await root.call('list_ready'))).toEqual({ ready: ['b'] });
      expect(expectOk(await root.call('spawn_agent', { task_id: 'b' }))).toMatchObject({
        task_id: 'b',
        team_created: false,
      });
      expect(eventsNamed(events(taskId), 'team_created')).toHaveLength(1);
    });

    it('concurrent_create_team for a second create_team in the same tick', async () => {
      const { rootId, taskId } = await newRoot();
      const services = ts.server.services;
      const ctx = (): ToolContext => ({
        services,
        caller: services.registry.agent(rootId)!,
        signal: new AbortController().signal,
        progress: async () => {},
      });
      const createTeam = PRIMITIVES_BY_NAME.get('create_team')!;
      const args = (name: string) => ({
        name,
        task: 'build it',
        roles: [
          { role: 'fe', skill: 'worker', description: 'the UI' },
          { role: 'be', skill: 'worker', description: 'the API' },
        ],
      });
      const [first, second] = await Promise.all([
        invokePrimitive(createTeam, args('one'), ctx()),
        invokePrimitive(createTeam, args('two'), ctx()),
      ]);
      expect(first.ok).toBe(true);
      expect(second.ok).toBe(false);
      if (second.ok) return;
      expect(second.error.code).toBe('concurrent_create_team');
      expect(eventsNamed(events(taskId), 'team_created').map((e) => e.name)).toEqual(['one']);
      // Released afterwards.
      const third = await invokePrimitive(createTeam, args('three'), ctx());
      expect(third.ok).toBe(true);
    });
  });

  // ---------------------------------------------------------------- terminate_child

  describe('terminate_child', () => {
    it('unknown_agent, not_leader (grandchild, sibling), child_not_pending_review, force, already_terminating', async () => {
      const { root, rootId, taskId } = await newRoot();
      expectOk(await root.call('declare_plan', { tasks: [t('lead', [], 'leader'), t('sib')] }));
      const leadId = await spawn(root, 'lead');
      const sibId = await spawn(root, 'sib');
      const lead = await connectAs(leadId);
      expectOk(await lead.call('declare_plan', { tasks: [t('g')] }));
      const grandId = await spawn(lead, 'g');

      expectError(await root.call('terminate_child', { agent_id: 'ag_nope' }), 'unknown_agent', {
        agent_id: 'ag_nope',
      });
      const other = await createTask(ts);
      expectError(await root.call('terminate_child', { agent_id: other.root_agent_id }), 'unknown_agent', {
        agent_id: other.root_agent_id,
      });

      // The root leads lead's team, not the grandchild's: no crossing team boundaries.
      expectError(await root.call('terminate_child', { agent_id: grandId }), 'not_leader', {
        agent_id: grandId,
        leader_id: leadId,
      });
      // A member cannot terminate its sibling, nor its own leader.
      expectError(await lead.call('terminate_child', { agent_id: sibId }), 'not_leader', {
        agent_id: sibId,
        leader_id: rootId,
      });
      expectError(await lead.call('terminate_child', { agent_id: rootId }), 'not_leader', { agent_id: rootId });

      expectError(await root.call('terminate_child', { agent_id: sibId }), 'child_not_pending_review', {
        agent_id: sibId,
      });
      expect(events(taskId).some((e) => e.event === 'terminate.posted' && e.agent_id === sibId)).toBe(false);

      // force: true ends a child that did not signal review, audited, and fails its plan task.
      expect(expectOk(await root.call('terminate_child', { agent_id: sibId, force: true }))).toEqual({
        sentinel_posted: true,
      });
      const all = events(taskId);
      expect(eventsNamed(all, 'terminate.forced', (e) => e.agent_id === sibId)).toEqual([
        expect.objectContaining({ caller_id: rootId, reason: 'leader_force' }),
      ]);
      expect(eventsNamed(all, 'task_failed')).toEqual([
        expect.objectContaining({ plan_task_id: 'sib', reason: 'leader_force' }),
      ]);
      expect(eventsNamed(all, 'task_done')).toEqual([]);
      expect(eventsNamed(all, 'completion.approved')).toEqual([]);

      expectError(await root.call('terminate_child', { agent_id: sibId }), 'already_terminating', { agent_id: sibId });
      expectError(await root.call('terminate_child', { agent_id: sibId, force: true }), 'already_terminating', {
        agent_id: sibId,
      });
    });
  });

  // ---------------------------------------------------------------- signal_review

  describe('signal_review', () => {
    it('envelope_missing (detail_empty / envelope_missing), case-insensitive envelopes, and a second call supersedes the first', async () => {
      const { root, taskId } = await newRoot();
      expectOk(await root.call('declare_plan', { tasks: [t('a')] }));
      const aId = await spawn(root, 'a');
      const child = await connectAs(aId);

      expectError(await child.call('signal_review', { detail: '' }), 'envelope_missing', { reason: 'detail_empty' });
      expectError(await child.call('signal_review', { detail: '  \n\t ' }), 'envelope_missing', {
        reason: 'detail_empty',
      });
      expectError(await child.call('signal_review', { detail: 'all done, please review' }), 'envelope_missing', {
        reason: 'envelope_missing',
      });
      expectError(await child.call('signal_review', { detail: '[REVIEW] required' }), 'envelope_missing', {
        reason: 'envelope_missing',
      });
      expect(expectOk(await root.call('list_pending_reviews'))).toEqual({ reviews: [] });
      expect(eventsNamed(events(taskId), 'status', (e) => e.agent_id === aId)).toEqual([]);

      const first = '[review required] first report';
      expect(expectOk(await child.call('signal_review', { detail: first }))).toEqual({
        recorded: true,
        review_pending: true,
      });
      const listed1 = expectOk(await root.call('list_pending_reviews')).reviews;
      expect(listed1).toEqual([expect.objectContaining({ agent_id: aId, summary: first })]);

      const second = 'Iteration two: [Iteration Ready] second report';
      expect(expectOk(await child.call('signal_review', { detail: second }))).toEqual({
        recorded: true,
        review_pending: true,
      });
      const statuses = eventsNamed(events(taskId), 'status', (e) => e.agent_id === aId && e.state === 'review_pending');
      expect(statuses.map((e) => e.detail)).toEqual([first, second]);
      const listed2 = expectOk(await root.call('list_pending_reviews')).reviews;
      expect(listed2).toHaveLength(1); // superseded, not added
      expect(listed2[0]).toMatchObject({ agent_id: aId, summary: second, review_pending_ts: statuses[1]!.ts });
      expect(listed2[0].review_pending_ts).toBeGreaterThanOrEqual(listed1[0].review_pending_ts);

      // The second report replaced the undelivered first one in the leader's inbox.
      const inbox = expectOk(await root.call('read_inbox', { peek: true })).messages as Array<{
        from: string;
        kind: string;
        content: string;
      }>;
      expect(inbox.filter((m) => m.kind === 'review_report' && m.from === aId).map((m) => m.content)).toEqual([second]);
    });
  });

  // ---------------------------------------------------------------- request_termination

  describe('request_termination', () => {
    it('plan_incomplete while plan tasks are not done or failed, then accepted', async () => {
      const { root, rootId, taskId } = await newRoot();
      expectOk(await root.call('declare_plan', { tasks: [t('a'), t('b', ['a'])] }));
      const all1 = expectError(await root.call('request_termination', { detail: 'done?' }), 'plan_incomplete');
      expect(all1.unfinished).toEqual([
        { task_id: 'a', status: 'ready' },
        { task_id: 'b', status: 'blocked' },
      ]);

      const aId = await spawn(root, 'a');
      expectError(await root.call('request_termination'), 'plan_incomplete', {
        unfinished: [
          { task_id: 'a', status: 'in_flight' },
          { task_id: 'b', status: 'blocked' },
        ],
      });
      const childA = await connectAs(aId);
      expectOk(await childA.call('signal_review', { detail: '[REVIEW REQUIRED] a' }));
      expectOk(await root.call('terminate_child', { agent_id: aId })); // a done, b ready
      expectError(await root.call('request_termination'), 'plan_incomplete', {
        unfinished: [{ task_id: 'b', status: 'ready' }],
      });

      const bId = await spawn(root, 'b');
      expectOk(await root.call('terminate_child', { agent_id: bId, force: true })); // b failed
      expect(expectOk(await root.call('request_termination', { detail: 'all finished' }))).toEqual({
        recorded: true,
        termination_requested: true,
      });
      expect(eventsNamed(events(taskId), 'status', (e) => e.agent_id === rootId)).toEqual([
        expect.objectContaining({ state: 'termination_requested', detail: 'all finished' }),
      ]);
      // The root's request goes to the user gateway.
      const pending = (await ts.api('GET', '/questions/pending')).body as Array<{
        origin: string;
        subject_agent_id: string;
      }>;
      expect(pending).toEqual([expect.objectContaining({ origin: 'root_termination', subject_agent_id: rootId })]);
    });

    it('a child without a plan may request termination; its leader is told and may then terminate it', async () => {
      const { root, taskId } = await newRoot();
      expectOk(await root.call('declare_plan', { tasks: [t('a')] }));
      const aId = await spawn(root, 'a');
      const child = await connectAs(aId);
      expect(expectOk(await child.call('request_termination'))).toEqual({
        recorded: true,
        termination_requested: true,
      });
      const inbox = expectOk(await root.call('read_inbox', { peek: true })).messages as Array<{
        from: string;
        kind: string;
      }>;
      expect(inbox).toEqual([expect.objectContaining({ from: aId, kind: 'termination_request' })]);
      expect(expectOk(await root.call('list_pending_reviews')).reviews).toEqual([
        expect.objectContaining({ agent_id: aId, pending: 'termination' }),
      ]);
      expectOk(await root.call('terminate_child', { agent_id: aId }));
      expect(eventsNamed(events(taskId), 'task_done')).toEqual([expect.objectContaining({ plan_task_id: 'a' })]);
    });
  });

  // ---------------------------------------------------------------- list_pending_reviews

  describe('list_pending_reviews', () => {
    it('lists only direct children, oldest first, with age_s, wrapped as {reviews}', async () => {
      const { root } = await newRoot();
      expect(expectOk(await root.call('list_pending_reviews'))).toEqual({ reviews: [] });
      expectOk(await root.call('declare_plan', { tasks: [t('lead', [], 'leader'), t('w')] }));
      const leadId = await spawn(root, 'lead');
      const wId = await spawn(root, 'w');
      const lead = await connectAs(leadId);
      const w = await connectAs(wId);
      expectOk(await lead.call('declare_plan', { tasks: [t('g')] }));
      const gId = await spawn(lead, 'g');
      const g = await connectAs(gId);

      // Order of signals: grandchild, then w, then lead (registered before w).
      expectOk(await g.call('signal_review', { detail: '[REVIEW REQUIRED] g' }));
      expectOk(await w.call('signal_review', { detail: '[REVIEW REQUIRED] w' }));
      expectOk(await lead.call('signal_review', { detail: '[REVIEW REQUIRED] lead' }));

      const res = await root.call('list_pending_reviews');
      expect(res.ok).toBe(true);
      if (!res.ok) return;
      // MCP needs an object: the list of reviews comes wrapped, in structuredContent and in the text.
      expect(Object.keys(res.value)).toEqual(['reviews']);
      expect(JSON.parse((res.raw.content[0] as { text: string }).text)).toEqual(res.value);
      const reviews = res.value.reviews as Array<Record<string, any>>;
      expect(reviews.map((r) => r.agent_id)).toEqual([wId, leadId]); // oldest first, grandchild excluded
      expect(reviews[0]).toMatchObject({ role: 'role-w', summary: '[REVIEW REQUIRED] w', pending: 'review' });
      expect(reviews[0]!.name).toMatch(/^role-w-/);
      expect(reviews[1]).toMatchObject({ role: 'role-lead', summary: '[REVIEW REQUIRED] lead' });
      for (const r of reviews) {
        expect(typeof r.review_pending_ts).toBe('number');
        expect(r.age_s).toBeGreaterThanOrEqual(0);
      }
      expect(reviews[0]!.review_pending_ts).toBeLessThanOrEqual(reviews[1]!.review_pending_ts);
      expect(reviews[0]!.age_s).toBeGreaterThanOrEqual(reviews[1]!.age_s);

      // The middle leader sees its own child only; a leaf sees nothing.
      expect(
        expectOk(await lead.call('list_pending_reviews')).reviews.map((r: { agent_id: string }) => r.agent_id),
      ).toEqual([gId]);
      expect(expectOk(await w.call('list_pending_reviews'))).toEqual({ reviews: [] });
    });
  });

  // ---------------------------------------------------------------- the review gate

  describe('review gate', () => {
    it('blocks plan tools while a child review is pending, allows review tools, and a message to the child clears it', async () => {
      const { root, rootId, taskId } = await newRoot();
      expectOk(await root.call('declare_plan', { tasks: [t('a'), t('b'), t('c')] }));
      const aId = await spawn(root, 'a');
      const bId = await spawn(root, 'b');
      const a = await connectAs(aId);
      expectOk(await a.call('signal_review', { detail: '[REVIEW REQUIRED] a is ready' }));

      const blocked: Array<[string, Record<string, unknown>]> = [
        ['declare_plan', { tasks: [t('x')] }],
        ['spawn_agent', { task_id: 'c' }],
        ['list_ready', {}],
        ['remove_plan', {}],
      ];
      for (const [tool, args] of blocked) {
        const details = expectError(await root.call(tool, args), 'review_gate_blocked', {
          pending_child_ids: [aId],
          tool,
        });
        expect(details.ways_out).toEqual(['terminate_child', 'send_message']);
      }
      const denied = eventsNamed(events(taskId), 'review_gate.denied');
      expect(denied.map((e) => [e.caller_id, e.tool_name, e.pending_child_ids])).toEqual(
        blocked.map(([tool]) => [rootId, tool, [aId]]),
      );

      // Still allowed: reading the team, listing reviews, terminate_child (here refused for its own reason), messaging.
      expect(
        expectOk(await root.call('list_peers', { scope: 'children' })).peers.map(
          (p: { agent_id: string }) => p.agent_id,
        ),
      ).toEqual([aId, bId]);
      expect(
        expectOk(await root.call('list_pending_reviews')).reviews.map((r: { agent_id: string }) => r.agent_id),
      ).toEqual([aId]);
      expectError(await root.call('terminate_child', { agent_id: bId }), 'child_not_pending_review', { agent_id: bId });
      // The child's own tools are not gated by its leader's state.
      expectOk(await a.call('list_peers'));
      expect(eventsNamed(events(taskId), 'review_gate.denied')).toHaveLength(blocked.length);

      // A message from the leader is rework: it acknowledges the review and lifts the gate.
      expectOk(await root.call('send_message', { to: aId, content: 'please add tests' }));
      expect(eventsNamed(events(taskId), 'review.acknowledged')).toEqual([
        expect.objectContaining({ agent_id: aId, by: rootId }),
      ]);
      expect(expectOk(await root.call('list_pending_reviews'))).toEqual({ reviews: [] });
      expect(expectOk(await root.call('list_ready'))).toEqual({ ready: ['c'] });
      expect(expectOk(await root.call('spawn_agent', { task_id: 'c' }))).toMatchObject({
        task_id: 'c',
        team_created: false,
      });
      expect(eventsNamed(events(taskId), 'review_gate.denied')).toHaveLength(blocked.length);
    });
  });
});
