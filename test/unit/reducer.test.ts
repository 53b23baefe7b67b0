import { describe, expect, it } from 'vitest';
import { storedEventSchema, type EventFields, type EventName, type StoredEvent } from '../../src/events/catalogue.js';
import { MAX_OPEN_TOOL_USES, reduce } from '../../src/registry/reducer.js';
import { BEIDOU, USER, emptyState, type AgentRecord, type RegistryState } from '../../src/registry/state.js';

/**
 * Unit tests of the one reducer on hand-built events. Every fixture goes through the
 * catalogue's own stored-event schema (strictly: no missing, mistyped or extra fields), so
 * the fixtures cannot drift from the catalogue. Time is a fake clock of plain numbers.
 */

const TASK = 'tsk_main';
const ROOT = 'ag_root';

type Stored<N extends EventName> = Extract<StoredEvent, { event: N }>;

/** Makes stored events: seq counts up per task (as the log does), ts is the fake clock. */
class FakeLog {
  private readonly seqs = new Map<string, number>();
  /** The ts the next event gets; each event advances it by `step` unless set with `at`. */
  now: number;

  constructor(
    readonly taskId = TASK,
    start = 1_000,
    private readonly step = 1,
  ) {
    this.now = start;
  }

  /** Sets the clock: the next event carries exactly this ts. */
  at(ts: number): this {
    this.now = ts;
    return this;
  }

  ev<N extends EventName>(event: N, fields: EventFields<N>, opts: { task_id?: string } = {}): Stored<N> {
    const task_id = opts.task_id ?? this.taskId;
    const seq = (this.seqs.get(task_id) ?? 0) + 1;
    const raw = { seq, ts: this.now, event, task_id, ...fields };
    // Throws when the fixture does not match the catalogue.
    storedEventSchema(event).strict().parse(raw);
    this.seqs.set(task_id, seq);
    this.now += this.step;
    return raw as unknown as Stored<N>;
  }
}

function apply(state: RegistryState, ...events: StoredEvent[]): RegistryState {
  for (const e of events) reduce(state, e);
  return state;
}

function agentOf(state: RegistryState, id: string): AgentRecord {
  const a = state.agents.get(id);
  if (!a) throw new Error(`no agent ${id} in state`);
  return a;
}

function taskOf(state: RegistryState, id = TASK) {
  const t = state.tasks.get(id);
  if (!t) throw new Error(`no task ${id} in state`);
  return t;
}

// ---- field builders (defaults for the fields a test does not care about) ----

const taskCreated = (over: Partial<EventFields<'task_created'>> = {}): EventFields<'task_created'> => ({
  root_agent_id: ROOT,
  text: 'build the thing',
  name: 'demo',
  skill: 'lead',
  model: 'model-x',
  workspace: '/ws',
  spawn: true,
  ...over,
});

const agentSpawned = (
  agent_id: string,
  over: Partial<EventFields<'agent_spawned'>> = {},
): EventFields<'agent_spawned'> => ({
  agent_id,
  name: `name-${agent_id}`,
  role: null,
  skill: 'worker',
  description: `desc-${agent_id}`,
  model: null,
  team_id: null,
  leader_id: ROOT,
  plan_id: null,
  plan_task_id: null,
  workspace_path: `/ws/${agent_id}`,
  project_workspace_path: '/ws',
  ...over,
});

const teamCreated = (
  team_id: string,
  leader_id: string,
  over: Partial<EventFields<'team_created'>> = {},
): EventFields<'team_created'> => ({
  team_id,
  name: `team-${team_id}`,
  leader_id,
  parent_team_id: null,
  depth: 1,
  task: `task of ${team_id}`,
  rules: ['be nice'],
  via: 'create_team',
  ...over,
});

const agentInput = (caller_id: string, message_id: string, from: string, content = ''): EventFields<'agent_input'> => ({
  caller_id,
  from,
  message_kind: from === BEIDOU ? 'system' : 'user',
  source: 'queue',
  content,
  message_id,
  via: 'read_inbox',
});

const planTask = (id: string, status: 'ready' | 'blocked', depends_on: string[] = []) => ({
  id,
  role: `role-${id}`,
  skill: 'worker',
  depends_on,
  status,
  task: `do ${id}`,
  description: `about ${id}`,
  model: null,
});

const question = (q: string) => ({
  question: q,
  header: 'Pick',
  multiSelect: false,
  options: [
    { label: 'Yes', description: 'go' },
    { label: 'No', description: 'stop' },
  ],
});

const questionAsked = (
  qid: string,
  asker: string,
  holder: string | null,
  over: Partial<EventFields<'question_asked'>> = {},
): EventFields<'question_asked'> => ({
  qid,
  asker,
  holder,
  prompt: `prompt of ${qid}`,
  questions: [question(`Proceed with ${qid}?`)],
  context: null,
  origin: 'ask_user',
  subject_agent_id: null,
  ...over,
});

const agentStarted = (
  agent_id: string,
  spawner_id: string,
  session_id: string | null,
  resumed: boolean,
): EventFields<'agent_started'> => ({
  agent_id,
  team_id: null,
  role: null,
  name: `name-${agent_id}`,
  template: 'claude',
  model_requested: null,
  session_id,
  resumed,
  spawner_id,
});

/** A fresh state holding the task and its root agent (leader: the user). */
function boot(log = new FakeLog()): { log: FakeLog; state: RegistryState } {
  const state = apply(
    emptyState(),
    log.ev('task_created', taskCreated()),
    log.ev('agent_spawned', agentSpawned(ROOT, { leader_id: USER, skill: 'lead' })),
  );
  return { log, state };
}

// ---------------------------------------------------------------------------------------

describe('fixture builder', () => {
  it('numbers events per task and stamps them with the fake clock', () => {
    const log = new FakeLog(TASK, 500, 10);
    const a = log.ev('task_created', taskCreated());
    const b = log.at(900).ev('task_ended', { status: 'done', reason: 'r' });
    const other = log.ev('task_created', taskCreated(), { task_id: 'tsk_other' });
    const c = log.ev('watchdog.exception', { pass: 'A', message: 'm' });
    expect([a.seq, b.seq, other.seq, c.seq]).toEqual([1, 2, 1, 3]);
    expect([a.ts, b.ts, other.ts, c.ts]).toEqual([500, 900, 910, 920]);
  });

  it('rejects fixtures the catalogue would reject', () => {
    const log = new FakeLog();
    expect(() => log.ev('team_created', teamCreated('tm_1', ROOT, { depth: 1.5 }))).toThrow();
    expect(() => log.ev('send_message', { caller_id: '', to: ROOT, content: 'x', message_id: 'm' })).toThrow();
    expect(() =>
      log.ev('status', { agent_id: ROOT, state: 'sleeping', detail: '' } as unknown as EventFields<'status'>),
    ).toThrow();
    expect(() =>
      log.ev('liveness.nudge', {
        agent_id: ROOT,
        nudge_count: 1,
        idle_s: 3,
        extra: true,
      } as EventFields<'liveness.nudge'>),
    ).toThrow();
    expect(() =>
      log.ev('launch.assigned', { agent_id: ROOT, spawner_id: 'sp' } as EventFields<'launch.assigned'>),
    ).toThrow();
    // A rejected fixture does not use up a seq.
    expect(log.ev('task_created', taskCreated()).seq).toBe(1);
  });
});

describe('tasks and agents', () => {
  it('task_created makes a running task record with empty lists', () => {
    const log = new FakeLog().at(1_000);
    const state = apply(emptyState(), log.ev('task_created', taskCreated({ name: null, spawn: false })));
    expect(taskOf(state)).toEqual({
      task_id: TASK,
      text: 'build the thing',
      name: null,
      skill: 'lead',
      model: 'model-x',
      workspace: '/ws',
      spawn: false,
      status: 'running',
      root_agent_id: ROOT,
      created_at: 1_000,
      ended_at: null,
      end_reason: null,
      last_event_at: 1_000,
      event_count: 1,
      agent_ids: [],
      team_ids: [],
      plan_ids: [],
      question_ids: [],
    });
    expect(state.agents.size).toBe(0);
  });

  it('agent_spawned of the root (leader: the user) registers a fresh agent on the task', () => {
    const log = new FakeLog().at(1_000);
    const state = apply(emptyState(), log.ev('task_created', taskCreated()));
    reduce(
      state,
      log.at(1_050).ev('agent_spawned', agentSpawned(ROOT, { leader_id: USER, role: 'root', model: 'm-1' })),
    );

    const root = agentOf(state, ROOT);
    expect(root).toMatchObject({
      agent_id: ROOT,
      task_id: TASK,
      name: `name-${ROOT}`,
      role: 'root',
      skill: 'worker',
      description: `desc-${ROOT}`,
      model: 'm-1',
      team_id: null,
      leader_id: USER,
      plan_id: null,
      plan_task_id: null,
      workspace_path: `/ws/${ROOT}`,
      project_workspace_path: '/ws',
      created_at: 1_050,
      last_activity_at: 1_050,
      leads: [],
      inbox_chars: 0,
      delivered_count: 0,
      sent_count: 0,
      launch: null,
      spawner_id: null,
      session_id: null,
      started: false,
      running: false,
      parked: false,
      active_plan_id: null,
      plan_team_id: null,
      review: null,
      termination_request: null,
      nudges: 0,
      terminate_posted: false,
      terminate_consumed: false,
      stats: { input_tokens: 0, output_tokens: 0, cost_usd: 0, tool_calls: 0, llm_calls: 0 },
    });
    expect(root.inbox.size).toBe(0);
    expect(root.open_tool_uses.size).toBe(0);

    const task = taskOf(state);
    expect(task.agent_ids).toEqual([ROOT]);
    expect(task.event_count).toBe(2);
    expect(task.last_event_at).toBe(1_050);
  });

  it('launch.requested stores the launch on the agent, and is ignored for an unknown agent', () => {
    const { log, state } = boot();
    const launch = {
      prompt: 'You are root',
      first_message: 'Go',
      model: 'm-2',
      workspace_path: '/ws/r',
      project_workspace_path: '/ws',
    };
    reduce(state, log.at(1_200).ev('launch.requested', { agent_id: ROOT, ...launch }));
    expect(agentOf(state, ROOT).launch).toEqual({ ...launch, requested_at: 1_200 });

    reduce(state, log.ev('launch.requested', { agent_id: 'ag_ghost', ...launch }));
    expect(state.agents.has('ag_ghost')).toBe(false);
    expect(state.agents.size).toBe(1);
  });

  it("every event of a task moves the task's counters, events of other tasks do not", () => {
    const log = new FakeLog();
    const state = boot(log).state;
    const other = new FakeLog('tsk_other', 50_000);
    apply(state, other.ev('task_created', taskCreated({ root_agent_id: 'ag_other' })));

    // Observability-only events change nothing but the counters.
    reduce(state, log.at(3_000).ev('watchdog.exception', { pass: 'B', message: 'boom' }));
    reduce(state, log.ev('depth.warning', { team_id: 'tm_x', depth: 5, max_depth: 4 }));
    expect(taskOf(state)).toMatchObject({ event_count: 4, last_event_at: 3_001 });

    apply(
      state,
      other.ev('watchdog.exception', { pass: 'A', message: 'x' }),
      other.ev('watchdog.exception', { pass: 'A', message: 'y' }),
    );
    expect(taskOf(state)).toMatchObject({ event_count: 4, last_event_at: 3_001 });
    expect(taskOf(state, 'tsk_other')).toMatchObject({ event_count: 3, last_event_at: 50_002, agent_ids: [] });
  });
});

describe('teams', () => {
  it('team_created and member agent_spawned build membership, leads, depth and the task lists', () => {
    const { log, state } = boot();
    apply(
      state,
      log.at(2_000).ev('team_created', teamCreated('tm_1', ROOT, { rules: ['r1', 'r2'] })),
      log.ev('agent_spawned', agentSpawned('ag_a', { team_id: 'tm_1', leader_id: ROOT })),
      log.ev('agent_spawned', agentSpawned('ag_b', { team_id: 'tm_1', leader_id: ROOT })),
      log
        .at(2_100)
        .ev('team_created', teamCreated('tm_2', 'ag_a', { parent_team_id: 'tm_1', depth: 2, via: 'spawn_agent' })),
      log.ev('agent_spawned', agentSpawned('ag_c', { team_id: 'tm_2', leader_id: 'ag_a' })),
    );

    expect(state.teams.get('tm_1')).toEqual({
      team_id: 'tm_1',
      task_id: TASK,
      name: 'team-tm_1',
      leader_id: ROOT,
      parent_team_id: null,
      depth: 1,
      task: 'task of tm_1',
      rules: ['r1', 'r2'],
      member_ids: ['ag_a', 'ag_b'],
      created_at: 2_000,
      via: 'create_team',
    });
    expect(state.teams.get('tm_2')).toMatchObject({
      leader_id: 'ag_a',
      parent_team_id: 'tm_1',
      depth: 2,
      member_ids: ['ag_c'],
      via: 'spawn_agent',
      created_at: 2_100,
    });

    const root = agentOf(state, ROOT);
    const a = agentOf(state, 'ag_a');
    expect(root.leads).toEqual(['tm_1']);
    expect(a.leads).toEqual(['tm_2']);
    expect(agentOf(state, 'ag_b').leads).toEqual([]);
    // Only a spawn_agent team is the leader's plan team.
    expect(root.plan_team_id).toBeNull();
    expect(a.plan_team_id).toBe('tm_2');
    expect(agentOf(state, 'ag_c')).toMatchObject({ team_id: 'tm_2', leader_id: 'ag_a' });

    // Creating a team is activity of its leader.
    expect(root).toMatchObject({ started: true, last_activity_at: 2_000 });
    expect(a).toMatchObject({ started: true, last_activity_at: 2_100 });

    expect(taskOf(state).team_ids).toEqual(['tm_1', 'tm_2']);
    expect(taskOf(state).agent_ids).toEqual([ROOT, 'ag_a', 'ag_b', 'ag_c']);
  });

  it('a leader that creates several teams leads them in creation order', () => {
    const { log, state } = boot();
    apply(
      state,
      log.ev('team_created', teamCreated('tm_x', ROOT)),
      log.ev('team_created', teamCreated('tm_y', ROOT)),
      log.ev('team_created', teamCreated('tm_z', ROOT, { via: 'spawn_agent' })),
    );
    expect(agentOf(state, ROOT).leads).toEqual(['tm_x', 'tm_y', 'tm_z']);
    expect(agentOf(state, ROOT).plan_team_id).toBe('tm_z');
  });

  it('an agent_spawned naming an unknown team still registers the agent and invents no team', () => {
    const { log, state } = boot();
    reduce(state, log.ev('agent_spawned', agentSpawned('ag_a', { team_id: 'tm_ghost' })));
    expect(agentOf(state, 'ag_a').team_id).toBe('tm_ghost');
    expect(state.teams.size).toBe(0);
    expect(taskOf(state).agent_ids).toEqual([ROOT, 'ag_a']);
  });
});

describe('inbox', () => {
  function withChild() {
    const { log, state } = boot();
    reduce(state, log.at(1_500).ev('agent_spawned', agentSpawned('ag_a')));
    return { log, state };
  }

  it('send_message and inbox.posted add to the recipient inbox in order, counting UTF-16 chars', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.at(3_000).ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'hello', message_id: 'msg_1' }),
      log.at(3_001).ev('send_message', { caller_id: USER, to: 'ag_a', content: 'hé😀', message_id: 'msg_2' }),
      log
        .at(3_002)
        .ev('inbox.posted', { to: 'ag_a', from: BEIDOU, kind: 'system', content: 'ping', message_id: 'msg_3' }),
    );
    const a = agentOf(state, 'ag_a');
    expect([...a.inbox.keys()]).toEqual(['msg_1', 'msg_2', 'msg_3']);
    expect(a.inbox.get('msg_1')).toEqual({
      message_id: 'msg_1',
      from: ROOT,
      kind: 'message',
      content: 'hello',
      ts: 3_000,
    });
    expect(a.inbox.get('msg_2')).toEqual({ message_id: 'msg_2', from: USER, kind: 'user', content: 'hé😀', ts: 3_001 });
    expect(a.inbox.get('msg_3')).toEqual({
      message_id: 'msg_3',
      from: BEIDOU,
      kind: 'system',
      content: 'ping',
      ts: 3_002,
    });
    // 'hello' 5 + 'hé😀' 4 (the emoji is a surrogate pair) + 'ping' 4.
    expect(a.inbox_chars).toBe(13);

    // Only an agent sender counts a sent message, and sending is its activity.
    const root = agentOf(state, ROOT);
    expect(root.sent_count).toBe(1);
    expect(root).toMatchObject({ started: true, last_activity_at: 3_000 });
    expect(a.sent_count).toBe(0);
    expect(a.started).toBe(false);
    expect(root.inbox.size).toBe(0);
  });

  it('inbox.posted keeps the kind it was posted with', () => {
    const { log, state } = withChild();
    reduce(
      state,
      log.ev('inbox.posted', { to: ROOT, from: 'ag_a', kind: 'review_report', content: 'report', message_id: 'msg_r' }),
    );
    expect(agentOf(state, ROOT).inbox.get('msg_r')).toMatchObject({ from: 'ag_a', kind: 'review_report' });
    expect(agentOf(state, 'ag_a').sent_count).toBe(0);
  });

  it('inbox.withdrawn takes an undelivered message out without delivering it, and its characters with it', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.ev('send_message', { caller_id: 'ag_a', to: ROOT, content: 'hi', message_id: 'msg_1' }),
      log.ev('inbox.posted', {
        to: ROOT,
        from: 'ag_a',
        kind: 'review_report',
        content: 'first report',
        message_id: 'msg_r1',
      }),
      log.ev('inbox.withdrawn', { to: ROOT, from: 'ag_a', message_id: 'msg_r1', reason: 'replaced' }),
      log.ev('inbox.posted', {
        to: ROOT,
        from: 'ag_a',
        kind: 'review_report',
        content: 'second',
        message_id: 'msg_r2',
      }),
    );
    const root = agentOf(state, ROOT);
    expect([...root.inbox.keys()]).toEqual(['msg_1', 'msg_r2']);
    expect(root.inbox_chars).toBe('hi'.length + 'second'.length);
    expect(root.delivered_count).toBe(0);

    // Withdrawing what is already delivered, unknown, or in no agent's inbox changes nothing.
    apply(
      state,
      log.ev('agent_input', agentInput(ROOT, 'msg_1', 'ag_a', 'hi')),
      log.ev('inbox.withdrawn', { to: ROOT, from: 'ag_a', message_id: 'msg_1', reason: 'replaced' }),
      log.ev('inbox.withdrawn', { to: ROOT, from: 'ag_a', message_id: 'msg_r1', reason: 'replaced' }),
      log.ev('inbox.withdrawn', { to: 'ag_ghost', from: 'ag_a', message_id: 'msg_r2', reason: 'replaced' }),
    );
    expect([...root.inbox.keys()]).toEqual(['msg_r2']);
    expect(root.inbox_chars).toBe('second'.length);
    expect(root.delivered_count).toBe(1);
  });

  it('a reused message id replaces the earlier undelivered message and its characters', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'a long first text', message_id: 'msg_1' }),
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'short', message_id: 'msg_1' }),
      log.ev('inbox.posted', { to: 'ag_a', from: BEIDOU, kind: 'system', content: 'ping', message_id: 'msg_2' }),
      log.ev('inbox.posted', { to: 'ag_a', from: BEIDOU, kind: 'system', content: 'pong!', message_id: 'msg_2' }),
    );
    const a = agentOf(state, 'ag_a');
    expect(a.inbox.size).toBe(2);
    expect(a.inbox_chars).toBe('short'.length + 'pong!'.length);
    apply(
      state,
      log.ev('agent_input', agentInput('ag_a', 'msg_1', ROOT, 'short')),
      log.ev('agent_input', agentInput('ag_a', 'msg_2', BEIDOU, 'pong!')),
    );
    expect(a.inbox_chars).toBe(0);
  });

  it('a message to an unknown recipient lands nowhere but still counts for the sender', () => {
    const { log, state } = withChild();
    reduce(state, log.ev('send_message', { caller_id: 'ag_a', to: 'ag_ghost', content: 'hi', message_id: 'msg_x' }));
    expect(state.agents.has('ag_ghost')).toBe(false);
    expect(agentOf(state, 'ag_a').sent_count).toBe(1);
    expect(agentOf(state, ROOT).inbox.size).toBe(0);
  });

  it('agent_input removes the delivered message and counts it', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'hello', message_id: 'msg_1' }),
      log.ev('send_message', { caller_id: USER, to: 'ag_a', content: 'abc', message_id: 'msg_2' }),
      log.ev('inbox.posted', { to: 'ag_a', from: BEIDOU, kind: 'system', content: 'ping', message_id: 'msg_3' }),
      // The delivered text is formatted for the agent: the inbox gives back what it held.
      log.at(3_500).ev('agent_input', agentInput('ag_a', 'msg_2', USER, '[from the user] abc')),
    );
    const a = agentOf(state, 'ag_a');
    expect([...a.inbox.keys()]).toEqual(['msg_1', 'msg_3']);
    expect(a.inbox_chars).toBe(9);
    expect(a.delivered_count).toBe(1);
    expect(a).toMatchObject({ started: true, last_activity_at: 3_500 });
  });

  it('an agent_input for an unknown or already delivered message changes no inbox count', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'hello', message_id: 'msg_1' }),
      log.ev('agent_input', agentInput('ag_a', 'msg_1', ROOT, 'hello')),
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'again', message_id: 'msg_2' }),
    );
    const before = agentOf(state, 'ag_a');
    expect(before.delivered_count).toBe(1);

    apply(
      state,
      log.ev('agent_input', agentInput('ag_a', 'msg_unknown', ROOT, 'zzz')),
      // A duplicate delivery of a message already consumed.
      log.at(3_700).ev('agent_input', agentInput('ag_a', 'msg_1', ROOT, 'hello')),
      // An input for an agent that does not exist.
      log.ev('agent_input', agentInput('ag_ghost', 'msg_2', ROOT, 'again')),
    );
    const a = agentOf(state, 'ag_a');
    expect([...a.inbox.keys()]).toEqual(['msg_2']);
    expect(a.inbox_chars).toBe(5);
    expect(a.delivered_count).toBe(1);
    expect(state.agents.has('ag_ghost')).toBe(false);
    // It still counts as the agent's activity (the idle clock restarts).
    expect(a.last_activity_at).toBe(3_700);
  });

  it("the server's own messages are not the agent's activity; anyone else's are", () => {
    const { log, state } = withChild();
    apply(
      state,
      log.at(4_000).ev('liveness.nudge', { agent_id: 'ag_a', nudge_count: 2, idle_s: 600 }),
      log.ev('inbox.posted', { to: 'ag_a', from: BEIDOU, kind: 'system', content: 'wake up', message_id: 'msg_n' }),
      log.at(4_100).ev('agent_input', agentInput('ag_a', 'msg_n', BEIDOU, 'wake up')),
    );
    let a = agentOf(state, 'ag_a');
    expect(a.delivered_count).toBe(1);
    expect(a).toMatchObject({ nudges: 2, started: false, last_activity_at: 1_500 });

    apply(
      state,
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'x', message_id: 'msg_m' }),
      log.at(4_200).ev('agent_input', agentInput('ag_a', 'msg_m', ROOT, 'x')),
    );
    a = agentOf(state, 'ag_a');
    expect(a).toMatchObject({ nudges: 0, started: true, last_activity_at: 4_200, delivered_count: 2 });
  });
});

describe('delivering (a reply on its way out)', () => {
  function withChild() {
    const { log, state } = boot();
    reduce(state, log.at(1_500).ev('agent_spawned', agentSpawned('ag_a')));
    return { log, state };
  }

  it('leaves the messages in the inbox, marked redelivered, until their agent_input', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'hello', message_id: 'msg_1' }),
      log.ev('inbox.posted', { to: 'ag_a', from: BEIDOU, kind: 'system', content: 'ping', message_id: 'msg_2' }),
      log.ev('send_message', { caller_id: USER, to: 'ag_a', content: 'later', message_id: 'msg_3' }),
      log.at(3_000).ev('delivering', { caller_id: 'ag_a', message_ids: ['msg_1', 'msg_2'], via: 'read_inbox' }),
    );
    let a = agentOf(state, 'ag_a');
    // Replayed without agent_input (a crash between the two): still there, to be delivered again, marked.
    expect([...a.inbox.keys()]).toEqual(['msg_1', 'msg_2', 'msg_3']);
    expect(a.inbox.get('msg_1')?.redelivered).toBe(true);
    expect(a.inbox.get('msg_2')?.redelivered).toBe(true);
    expect(a.inbox.get('msg_3')?.redelivered).toBeUndefined();
    expect(a.inbox_chars).toBe(14);
    // Not the agent's activity, and not a delivery yet.
    expect(a).toMatchObject({ delivered_count: 0, started: false, last_activity_at: 1_500 });

    apply(state, log.at(3_100).ev('agent_input', agentInput('ag_a', 'msg_1', ROOT, 'hello')));
    a = agentOf(state, 'ag_a');
    expect([...a.inbox.keys()]).toEqual(['msg_2', 'msg_3']);
    expect(a.delivered_count).toBe(1);
  });

  it('ignores ids no longer in the inbox and agents that do not exist', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'hello', message_id: 'msg_1' }),
      log.ev('agent_input', agentInput('ag_a', 'msg_1', ROOT, 'hello')),
      log.ev('delivering', { caller_id: 'ag_a', message_ids: ['msg_1', 'msg_unknown'], via: 'hook' }),
      log.ev('delivering', { caller_id: 'ag_ghost', message_ids: ['msg_1'], via: 'hook' }),
    );
    const a = agentOf(state, 'ag_a');
    expect(a.inbox.size).toBe(0);
    expect(a.inbox_chars).toBe(0);
    expect(a.delivered_count).toBe(1);
    expect(state.agents.has('ag_ghost')).toBe(false);
  });
});

describe('plans', () => {
  function withPlan() {
    const { log, state } = boot();
    const declared = log.at(5_000).ev('plan_declared', {
      plan_id: 'pl_1',
      owner_agent_id: ROOT,
      team_id: null,
      plan_path: '/ws/plan.md',
      tasks: [planTask('a', 'ready'), planTask('b', 'blocked', ['a']), planTask('c', 'blocked', ['a'])],
    });
    reduce(state, declared);
    return { log, state, declared };
  }

  it('plan_declared records the plan with its tasks ready or blocked, on the task and its owner', () => {
    const { state, declared } = withPlan();
    const plan = state.plans.get('pl_1');
    expect(plan).toMatchObject({
      plan_id: 'pl_1',
      task_id: TASK,
      owner_agent_id: ROOT,
      plan_path: '/ws/plan.md',
      created_at: 5_000,
      removed_at: null,
    });
    expect([...plan!.tasks.keys()]).toEqual(['a', 'b', 'c']);
    expect(plan!.tasks.get('a')).toEqual({ ...planTask('a', 'ready'), agent_id: null });
    expect(plan!.tasks.get('b')).toEqual({ ...planTask('b', 'blocked', ['a']), agent_id: null });
    expect(plan!.tasks.get('c')!.status).toBe('blocked');
    expect(taskOf(state).plan_ids).toEqual(['pl_1']);
    expect(agentOf(state, ROOT)).toMatchObject({ active_plan_id: 'pl_1', started: true, last_activity_at: 5_000 });

    // The plan's dependency lists are its own, not the event's.
    declared.tasks[1]!.depends_on.push('zz');
    expect(plan!.tasks.get('b')!.depends_on).toEqual(['a']);
  });

  it('task_spawned puts a task in flight with its agent; task_done, task_ready and task_failed set the status', () => {
    const { log, state } = withPlan();
    apply(
      state,
      log.ev('team_created', teamCreated('tm_p', ROOT, { via: 'spawn_agent' })),
      log.ev('agent_spawned', agentSpawned('ag_w', { team_id: 'tm_p', plan_id: 'pl_1', plan_task_id: 'a' })),
      log.at(5_100).ev('task_spawned', { plan_id: 'pl_1', plan_task_id: 'a', team_id: 'tm_p', agent_id: 'ag_w' }),
    );
    const tasks = state.plans.get('pl_1')!.tasks;
    expect(tasks.get('a')).toMatchObject({ status: 'in_flight', agent_id: 'ag_w' });
    expect(agentOf(state, 'ag_w')).toMatchObject({ plan_id: 'pl_1', plan_task_id: 'a' });
    // Spawning a plan task is the owner's activity.
    expect(agentOf(state, ROOT).last_activity_at).toBe(5_100);

    apply(
      state,
      log.ev('task_done', { plan_id: 'pl_1', plan_task_id: 'a' }),
      log.ev('task_ready', { plan_id: 'pl_1', plan_task_id: 'b' }),
      log.ev('task_failed', { plan_id: 'pl_1', plan_task_id: 'c', reason: 'cannot' }),
    );
    expect([...tasks.values()].map((t) => [t.id, t.status, t.agent_id])).toEqual([
      ['a', 'done', 'ag_w'],
      ['b', 'ready', null],
      ['c', 'failed', null],
    ]);
  });

  it('plan task events for an unknown plan or plan task change nothing', () => {
    const { log, state } = withPlan();
    const before = structuredClone(state.plans);
    apply(
      state,
      log.ev('task_done', { plan_id: 'pl_1', plan_task_id: 'nope' }),
      log.ev('task_spawned', { plan_id: 'pl_ghost', plan_task_id: 'a', team_id: 'tm_p', agent_id: 'ag_w' }),
      log.ev('task_spawned', { plan_id: 'pl_1', plan_task_id: 'nope', team_id: 'tm_p', agent_id: 'ag_w' }),
    );
    expect(state.plans).toEqual(before);
    expect(state.plans.has('pl_ghost')).toBe(false);
  });

  it('plan_removed marks the plan removed and clears the owner active plan, but not a newer one', () => {
    const { log, state } = withPlan();
    const shape = [...state.plans.get('pl_1')!.tasks.values()].map(({ id, status, agent_id }) => ({
      id,
      status,
      agent_id,
    }));
    reduce(state, log.at(5_500).ev('plan_removed', { plan_id: 'pl_1', owner_agent_id: ROOT }));
    expect(state.plans.get('pl_1')!.removed_at).toBe(5_500);
    // A removed plan keeps its ids and statuses; the rest is in the log, not in memory.
    const removed = [...state.plans.get('pl_1')!.tasks.values()];
    expect(removed.map(({ id, status, agent_id }) => ({ id, status, agent_id }))).toEqual(shape);
    expect(removed.map((t) => [t.role, t.skill, t.task, t.description, t.model, t.depends_on])).toEqual(
      removed.map(() => ['', '', '', '', null, []]),
    );
    expect(agentOf(state, ROOT).active_plan_id).toBeNull();
    expect(taskOf(state).plan_ids).toEqual(['pl_1']);

    apply(
      state,
      log.ev('plan_declared', {
        plan_id: 'pl_2',
        owner_agent_id: ROOT,
        team_id: null,
        plan_path: '/ws/p2.md',
        tasks: [planTask('x', 'ready')],
      }),
      log.ev('plan_declared', {
        plan_id: 'pl_3',
        owner_agent_id: ROOT,
        team_id: null,
        plan_path: '/ws/p3.md',
        tasks: [planTask('y', 'ready')],
      }),
      log.at(5_600).ev('plan_removed', { plan_id: 'pl_2', owner_agent_id: ROOT }),
    );
    expect(state.plans.get('pl_2')!.removed_at).toBe(5_600);
    expect(agentOf(state, ROOT).active_plan_id).toBe('pl_3');
    expect(taskOf(state).plan_ids).toEqual(['pl_1', 'pl_2', 'pl_3']);
  });
});

describe('questions', () => {
  function withChain() {
    const { log, state } = boot();
    apply(
      state,
      log.ev('agent_spawned', agentSpawned('ag_a')),
      log.ev('agent_spawned', agentSpawned('ag_b', { leader_id: 'ag_a' })),
    );
    return { log, state };
  }

  it('question_asked held by an agent starts the chain at that agent', () => {
    const { log, state } = withChain();
    reduce(state, log.at(6_000).ev('question_asked', questionAsked('q_1', 'ag_b', 'ag_a', { context: 'ctx' })));
    expect(state.questions.get('q_1')).toEqual({
      qid: 'q_1',
      task_id: TASK,
      asker: 'ag_b',
      questions: [question('Proceed with q_1?')],
      prompt: 'prompt of q_1',
      context: 'ctx',
      origin: 'ask_user',
      subject_agent_id: null,
      chain: ['ag_a'],
      status: 'pending',
      answers: null,
      answer_text: null,
      answered_by: null,
      created_at: 6_000,
      answered_at: null,
      audit: [{ by: 'ag_b', action: 'asked', reason: null, ts: 6_000 }],
    });
    expect(taskOf(state).question_ids).toEqual(['q_1']);
    expect(agentOf(state, 'ag_b')).toMatchObject({ started: true, last_activity_at: 6_000 });
  });

  it('question_asked with a null holder is at the user gateway', () => {
    const { log, state } = withChain();
    reduce(
      state,
      log.ev('question_asked', questionAsked('q_s', BEIDOU, null, { origin: 'root_review', subject_agent_id: ROOT })),
    );
    expect(state.questions.get('q_s')).toMatchObject({
      chain: [USER],
      asker: BEIDOU,
      origin: 'root_review',
      subject_agent_id: ROOT,
      status: 'pending',
    });
    expect(state.questions.get('q_s')!.audit).toEqual([expect.objectContaining({ by: BEIDOU, action: 'asked' })]);
  });

  it('question_escalated grows the chain up to the user and audits each hop', () => {
    const { log, state } = withChain();
    apply(
      state,
      log.at(6_000).ev('question_asked', questionAsked('q_1', 'ag_b', 'ag_a')),
      log.at(6_100).ev('question_escalated', { qid: 'q_1', by: 'ag_a', new_holder: ROOT, reason: 'not mine' }),
      log.at(6_200).ev('question_escalated', { qid: 'q_1', by: ROOT, new_holder: null, reason: 'ask the user' }),
    );
    const q = state.questions.get('q_1')!;
    expect(q.chain).toEqual(['ag_a', ROOT, USER]);
    expect(q.status).toBe('pending');
    expect(q.audit).toEqual([
      { by: 'ag_b', action: 'asked', reason: null, ts: 6_000 },
      { by: 'ag_a', action: 'escalated', reason: 'not mine', ts: 6_100 },
      { by: ROOT, action: 'escalated', reason: 'ask the user', ts: 6_200 },
    ]);
    expect(agentOf(state, 'ag_a').last_activity_at).toBe(6_100);
    expect(agentOf(state, ROOT).last_activity_at).toBe(6_200);
  });

  it('question_answered settles the question with the answers and who gave them', () => {
    const { log, state } = withChain();
    const answers = [{ selected_labels: ['Yes'], selected_values: ['Yes'], text: null }];
    apply(
      state,
      log.ev('question_asked', questionAsked('q_1', 'ag_b', 'ag_a')),
      log.at(6_300).ev('question_answered', {
        qid: 'q_1',
        asker: 'ag_b',
        chain_len: 1,
        answers,
        answer_text: 'Yes',
        by: 'ag_a',
        reason: 'obvious',
      }),
    );
    const q = state.questions.get('q_1')!;
    expect(q).toMatchObject({
      status: 'answered',
      answers,
      answer_text: 'Yes',
      answered_by: 'ag_a',
      answered_at: 6_300,
    });
    expect(q.audit.at(-1)).toEqual({ by: 'ag_a', action: 'answered', reason: 'obvious', ts: 6_300 });
    expect(agentOf(state, 'ag_a').last_activity_at).toBe(6_300);
    // Settled, its texts leave memory (the log keeps them); its summary stays.
    expect(q).toMatchObject({ questions: [], context: null });
    expect(q.prompt.length).toBeGreaterThan(0);
  });

  it('question_answered by the user at the gateway', () => {
    const { log, state } = withChain();
    apply(
      state,
      log.ev('question_asked', questionAsked('q_1', ROOT, null)),
      log.at(6_400).ev('question_answered', {
        qid: 'q_1',
        asker: ROOT,
        chain_len: 1,
        answers: [{ selected_labels: [], selected_values: [], text: 'free' }],
        answer_text: 'free',
        by: USER,
        reason: null,
      }),
    );
    expect(state.questions.get('q_1')).toMatchObject({
      status: 'answered',
      answered_by: USER,
      answer_text: 'free',
      answered_at: 6_400,
    });
    expect(state.questions.get('q_1')!.audit.map((a) => a.action)).toEqual(['asked', 'answered']);
  });

  it('question_declined settles the question as declined by the user, with no answers', () => {
    const { log, state } = withChain();
    apply(
      state,
      log.ev('question_asked', questionAsked('q_2', 'ag_a', null)),
      log.at(6_500).ev('question_declined', { qid: 'q_2', asker: 'ag_a', reason: 'later' }),
    );
    const q = state.questions.get('q_2')!;
    expect(q).toMatchObject({
      status: 'declined',
      answered_by: USER,
      answered_at: 6_500,
      answers: null,
      answer_text: null,
    });
    expect(q.audit.at(-1)).toEqual({ by: USER, action: 'declined', reason: 'later', ts: 6_500 });
  });

  it('answers, declines and escalations of an unknown question create nothing', () => {
    const { log, state } = withChain();
    apply(
      state,
      log.ev('question_escalated', { qid: 'q_x', by: 'ag_a', new_holder: null, reason: 'r' }),
      log.ev('question_answered', {
        qid: 'q_x',
        asker: 'ag_a',
        chain_len: 1,
        answers: [],
        answer_text: '',
        by: USER,
        reason: null,
      }),
      log.ev('question_declined', { qid: 'q_x', asker: 'ag_a', reason: 'r' }),
    );
    expect(state.questions.size).toBe(0);
    expect(taskOf(state).question_ids).toEqual([]);
  });
});

describe('reviews and the watchdog', () => {
  function withChild() {
    const { log, state } = boot();
    reduce(state, log.at(1_500).ev('agent_spawned', agentSpawned('ag_a')));
    return { log, state };
  }

  it('status review_pending opens a review; re-pings count on it; acknowledgement clears it', () => {
    const { log, state } = withChild();
    reduce(state, log.at(7_000).ev('status', { agent_id: 'ag_a', state: 'review_pending', detail: 'done with X' }));
    const a = agentOf(state, 'ag_a');
    expect(a.review).toEqual({ detail: 'done with X', since: 7_000, pings: 0, last_ping_at: 7_000, escalated: false });
    expect(a.termination_request).toBeNull();
    expect(a).toMatchObject({ started: true, last_activity_at: 7_000 });

    // A later non-handoff status leaves the review open.
    reduce(state, log.at(7_050).ev('status', { agent_id: 'ag_a', state: 'working', detail: 'still here' }));
    expect(a.review).toMatchObject({ detail: 'done with X', since: 7_000 });

    reduce(
      state,
      log.at(7_300).ev('completion.reping', { agent_id: 'ag_a', leader_id: ROOT, ping_count: 1, pending: 'review' }),
    );
    expect(a.review).toMatchObject({ pings: 1, last_ping_at: 7_300 });
    // A re-ping for the other kind of handoff finds nothing pending.
    reduce(
      state,
      log
        .at(7_350)
        .ev('completion.reping', { agent_id: 'ag_a', leader_id: ROOT, ping_count: 9, pending: 'termination' }),
    );
    expect(a.review).toMatchObject({ pings: 1, last_ping_at: 7_300 });
    expect(a.termination_request).toBeNull();
    reduce(
      state,
      log.at(7_600).ev('completion.reping', { agent_id: 'ag_a', leader_id: ROOT, ping_count: 2, pending: 'review' }),
    );
    expect(a.review).toEqual({ detail: 'done with X', since: 7_000, pings: 2, last_ping_at: 7_600, escalated: false });
    expect(a.termination_request).toBeNull();

    reduce(
      state,
      log.ev('review.escalated_to_user', { agent_id: 'ag_a', leader_id: ROOT, pending: 'review', qid: 'q_esc' }),
    );
    expect(a.review!.escalated).toBe(true);

    reduce(state, log.ev('review.acknowledged', { agent_id: 'ag_a', by: ROOT }));
    expect(a.review).toBeNull();
  });

  it('status termination_requested opens a termination request, counted and cleared the same way', () => {
    const { log, state } = withChild();
    reduce(
      state,
      log.at(7_000).ev('status', { agent_id: 'ag_a', state: 'termination_requested', detail: 'nothing left' }),
    );
    const a = agentOf(state, 'ag_a');
    expect(a.termination_request).toEqual({
      detail: 'nothing left',
      since: 7_000,
      pings: 0,
      last_ping_at: 7_000,
      escalated: false,
    });
    expect(a.review).toBeNull();

    reduce(
      state,
      log
        .at(7_400)
        .ev('completion.reping', { agent_id: 'ag_a', leader_id: ROOT, ping_count: 3, pending: 'termination' }),
    );
    expect(a.termination_request).toMatchObject({ pings: 3, last_ping_at: 7_400, since: 7_000 });

    reduce(state, log.ev('review.acknowledged', { agent_id: 'ag_a', by: USER }));
    expect(a.termination_request).toBeNull();
  });

  it('completion.approved clears the handoff and is activity of the leader', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.ev('status', { agent_id: 'ag_a', state: 'review_pending', detail: 'd' }),
      log.ev('status', { agent_id: 'ag_a', state: 'termination_requested', detail: 't' }),
    );
    expect(agentOf(state, 'ag_a').review).not.toBeNull();
    expect(agentOf(state, 'ag_a').termination_request).not.toBeNull();
    reduce(state, log.at(7_900).ev('completion.approved', { agent_id: 'ag_a', leader_id: ROOT }));
    expect(agentOf(state, 'ag_a')).toMatchObject({ review: null, termination_request: null });
    expect(agentOf(state, ROOT)).toMatchObject({ started: true, last_activity_at: 7_900 });
  });

  it('liveness.nudge counts nudges until the agent acts again', () => {
    const { log, state } = withChild();
    apply(
      state,
      log.at(8_000).ev('liveness.nudge', { agent_id: 'ag_a', nudge_count: 1, idle_s: 300 }),
      log.at(8_100).ev('liveness.nudge', { agent_id: 'ag_a', nudge_count: 2, idle_s: 400 }),
      log.ev('liveness.escalated_to_user', { agent_id: 'ag_a', idle_s: 500, qid: null }),
    );
    const a = agentOf(state, 'ag_a');
    expect(a).toMatchObject({ nudges: 2, last_nudge_at: 8_100, nudge_escalated: true, last_activity_at: 1_500 });

    reduce(
      state,
      log
        .at(8_200)
        .ev('tool_called', { caller_id: 'ag_a', message_id: null, tool_use_id: 'tu_1', name: 'Read', input: {} }),
    );
    expect(a).toMatchObject({ nudges: 0, nudge_escalated: false, last_activity_at: 8_200, last_nudge_at: 8_100 });
  });
});

describe('agent lifecycle', () => {
  function launched() {
    const { log, state } = boot();
    apply(
      state,
      log.at(1_500).ev('agent_spawned', agentSpawned('ag_a')),
      log.ev('launch.requested', {
        agent_id: 'ag_a',
        prompt: 'p',
        first_message: 'f',
        model: null,
        workspace_path: '/ws/ag_a',
        project_workspace_path: '/ws',
      }),
    );
    return { log, state };
  }

  it('launch.assigned gives the agent a spawner; agent_started runs it; agent_completed stops it', () => {
    const { log, state } = launched();
    reduce(state, log.ev('launch.assigned', { agent_id: 'ag_a', spawner_id: 'sp_1', resume: false, session_id: null }));
    const a = agentOf(state, 'ag_a');
    expect(a).toMatchObject({ spawner_id: 'sp_1', running: false, started: false });

    reduce(state, log.at(9_000).ev('agent_started', agentStarted('ag_a', 'sp_1', 'sess-1', false)));
    expect(a).toMatchObject({
      running: true,
      started: true,
      session_id: 'sess-1',
      spawner_id: 'sp_1',
      parked: false,
      last_activity_at: 9_000,
    });

    reduce(state, log.ev('agent_completed', { agent_id: 'ag_a', terminated: false, stop_reason: 'end_turn' }));
    expect(a.running).toBe(false);
    // A plain end keeps the agent with its spawner, launch and all, to resume later.
    expect(a.spawner_id).toBe('sp_1');
    expect(a.launch).not.toBeNull();
    expect(a.started).toBe(true);

    // A resume that reports no session keeps the one it had.
    reduce(state, log.ev('agent_started', agentStarted('ag_a', 'sp_2', null, true)));
    expect(a).toMatchObject({ running: true, session_id: 'sess-1', spawner_id: 'sp_2' });
  });

  it('agent_completed as terminated drops launch and spawner', () => {
    const { log, state } = launched();
    apply(
      state,
      log.ev('agent_started', agentStarted('ag_a', 'sp_1', 's', false)),
      log.ev('agent_completed', { agent_id: 'ag_a', terminated: true, stop_reason: 'end_turn' }),
    );
    expect(agentOf(state, 'ag_a')).toMatchObject({ running: false, launch: null, spawner_id: null, parked: false });
  });

  it('an escalated crash parks the agent, unless it is being terminated; a new start unparks it', () => {
    const { log, state } = launched();
    apply(
      state,
      log.ev('agent_started', agentStarted('ag_a', 'sp_1', 's', false)),
      log.ev('tool_called', {
        caller_id: 'ag_a',
        message_id: 'm1',
        tool_use_id: 'tu_1',
        name: 'Bash',
        input: { cmd: 'ls' },
      }),
      log.ev('agent_completed', { agent_id: 'ag_a', terminated: false, stop_reason: 'crash_escalated' }),
    );
    const a = agentOf(state, 'ag_a');
    expect(a).toMatchObject({ running: false, parked: true, spawner_id: null });
    expect(a.open_tool_uses.size).toBe(0);
    expect(a.launch).not.toBeNull();

    reduce(state, log.ev('agent_started', agentStarted('ag_a', 'sp_3', null, true)));
    expect(a).toMatchObject({ parked: false, running: true, spawner_id: 'sp_3' });

    apply(
      state,
      log.ev('terminate.posted', { caller_id: ROOT, agent_id: 'ag_a', reason: 'leader' }),
      log.ev('agent_completed', { agent_id: 'ag_a', terminated: false, stop_reason: 'contract_violation_escalated' }),
    );
    expect(a).toMatchObject({ running: false, parked: false, spawner_id: 'sp_3' });

    // An escalated contract violation parks like an escalated crash; a plain crash does not.
    apply(
      state,
      log.ev('agent_spawned', agentSpawned('ag_b')),
      log.ev('agent_started', agentStarted('ag_b', 'sp_4', 's-b', false)),
      log.ev('agent_completed', { agent_id: 'ag_b', terminated: false, stop_reason: 'crashed' }),
    );
    expect(agentOf(state, 'ag_b')).toMatchObject({ running: false, parked: false, spawner_id: 'sp_4' });
    apply(
      state,
      log.ev('agent_started', agentStarted('ag_b', 'sp_4', null, true)),
      log.ev('agent_completed', { agent_id: 'ag_b', terminated: false, stop_reason: 'contract_violation_escalated' }),
    );
    expect(agentOf(state, 'ag_b')).toMatchObject({ running: false, parked: true, spawner_id: null });
  });

  it('spawner.lost frees only the listed agents that were on that spawner', () => {
    const { log, state } = launched();
    apply(
      state,
      log.ev('agent_spawned', agentSpawned('ag_b')),
      log.ev('agent_started', agentStarted('ag_a', 'sp_1', 's-a', false)),
      log.ev('agent_started', agentStarted('ag_b', 'sp_2', 's-b', false)),
      log.ev('tool_called', { caller_id: 'ag_a', message_id: null, tool_use_id: 'tu_a', name: 'Read', input: {} }),
      log.ev('tool_called', { caller_id: 'ag_b', message_id: null, tool_use_id: 'tu_b', name: 'Read', input: {} }),
    );
    expect(agentOf(state, 'ag_a').open_tool_uses.has('tu_a')).toBe(true);

    reduce(state, log.ev('spawner.lost', { spawner_id: 'sp_1', agent_ids: ['ag_a', 'ag_b', 'ag_ghost'] }));
    const a = agentOf(state, 'ag_a');
    const b = agentOf(state, 'ag_b');
    expect(a).toMatchObject({ spawner_id: null, running: false, session_id: 's-a' });
    expect(a.open_tool_uses.size).toBe(0);
    expect(a.launch).not.toBeNull();
    expect(b).toMatchObject({ spawner_id: 'sp_2', running: true });
    expect([...b.open_tool_uses]).toEqual(['tu_b']);
    expect(state.agents.has('ag_ghost')).toBe(false);
  });

  it('holds at most MAX_OPEN_TOOL_USES open tool uses per agent, the oldest forgotten first', () => {
    const { log, state } = launched();
    for (let i = 0; i < MAX_OPEN_TOOL_USES + 5; i++)
      reduce(
        state,
        log.ev('tool_called', { caller_id: 'ag_a', message_id: null, tool_use_id: `tu_${i}`, name: 'Read', input: {} }),
      );
    const open = agentOf(state, 'ag_a').open_tool_uses;
    expect(open.size).toBe(MAX_OPEN_TOOL_USES);
    expect(open.has('tu_4')).toBe(false);
    expect(open.has('tu_5')).toBe(true);
    expect(agentOf(state, 'ag_a').stats.tool_calls).toBe(MAX_OPEN_TOOL_USES + 5);
  });

  it('counts strikes from agent_crashed and contract_violation, across spawners; a clean turn or an escalation resets them', () => {
    const { log, state } = launched();
    const a = agentOf(state, 'ag_a');
    expect(a).toMatchObject({ crash_strikes: 0, contract_strikes: 0 });
    const crash = (strike_count: number) =>
      log.ev('agent_crashed', {
        caller_id: 'ag_a',
        exception: 'ProcessExit',
        msg: 'exited with code 1',
        strike_count,
        stderr: '',
      });
    apply(state, log.ev('agent_started', agentStarted('ag_a', 'sp_1', 's-1', false)), crash(1));
    expect(a).toMatchObject({ crash_strikes: 1, session_id: 's-1' });
    // Another spawner takes over: the count is the agent's, not sp_1's.
    apply(
      state,
      log.ev('spawner.lost', { spawner_id: 'sp_1', agent_ids: ['ag_a'] }),
      log.ev('agent_started', agentStarted('ag_a', 'sp_2', 's-1', true)),
    );
    expect(a.crash_strikes).toBe(1);
    // The second strike forgets the session: the next start, wherever it happens, is afresh.
    reduce(state, crash(2));
    expect(a).toMatchObject({ crash_strikes: 2, session_id: null });
    reduce(state, log.ev('agent_started', agentStarted('ag_a', 'sp_2', 's-2', false)));
    expect(a.session_id).toBe('s-2');
    reduce(state, log.ev('contract_violation', { agent_id: 'ag_a', strike_count: 1, action: 'resumed' }));
    expect(a).toMatchObject({ crash_strikes: 2, contract_strikes: 1 });
    reduce(state, log.ev('strikes.reset', { agent_id: 'ag_a' }));
    expect(a).toMatchObject({ crash_strikes: 0, contract_strikes: 0 });
    // Strike 3 escalates: the agent is parked and a later relaunch counts from zero again.
    apply(
      state,
      crash(1),
      crash(2),
      crash(3),
      log.ev('agent_completed', { agent_id: 'ag_a', terminated: false, stop_reason: 'crash_escalated' }),
    );
    expect(a).toMatchObject({ parked: true, crash_strikes: 0, contract_strikes: 0 });
  });

  it('terminate.posted marks the target and is activity of the caller; terminate.consumed ends it', () => {
    const { log, state } = launched();
    apply(
      state,
      log.ev('launch.assigned', { agent_id: 'ag_a', spawner_id: 'sp_1', resume: false, session_id: null }),
      log.ev('agent_started', agentStarted('ag_a', 'sp_1', 's', false)),
      log.ev('status', { agent_id: 'ag_a', state: 'review_pending', detail: 'd' }),
      log.ev('status', { agent_id: 'ag_a', state: 'termination_requested', detail: 't' }),
      log.at(9_500).ev('terminate.posted', { caller_id: ROOT, agent_id: 'ag_a', reason: 'leader' }),
    );
    const a = agentOf(state, 'ag_a');
    expect(a).toMatchObject({ terminate_posted: true, terminate_consumed: false, terminated_at: null, running: true });
    expect(agentOf(state, ROOT)).toMatchObject({ started: true, last_activity_at: 9_500 });

    reduce(state, log.at(9_600).ev('terminate.consumed', { agent_id: 'ag_a', via: 'spawner' }));
    expect(a).toMatchObject({
      terminate_posted: true,
      terminate_consumed: true,
      terminated_at: 9_600,
      review: null,
      termination_request: null,
      launch: null,
      spawner_id: null,
      running: false,
    });
  });

  it('terminate.consumed without a prior post still marks it posted', () => {
    const { log, state } = launched();
    reduce(state, log.at(9_700).ev('terminate.consumed', { agent_id: 'ag_a', via: 'server' }));
    expect(agentOf(state, 'ag_a')).toMatchObject({
      terminate_posted: true,
      terminate_consumed: true,
      terminated_at: 9_700,
    });
  });

  it('task_ended records the terminal status, and is ignored for an unknown task', () => {
    const { log, state } = launched();
    reduce(state, log.at(9_900).ev('task_ended', { status: 'failed', reason: 'root crashed' }));
    expect(taskOf(state)).toMatchObject({
      status: 'failed',
      ended_at: 9_900,
      end_reason: 'root crashed',
      last_event_at: 9_900,
    });

    reduce(state, new FakeLog('tsk_ghost').ev('task_ended', { status: 'done', reason: 'r' }));
    expect(state.tasks.has('tsk_ghost')).toBe(false);
    expect(state.tasks.size).toBe(1);
  });

  it('usage and cost add up per agent, the cost across sessions via the cost base', () => {
    const { log, state } = launched();
    apply(
      state,
      log.ev('agent_started', agentStarted('ag_a', 'sp_1', 's1', false)),
      log.ev('turn.usage', {
        caller_id: 'ag_a',
        message_id: 'm1',
        model: null,
        stop_reason: null,
        input_tokens: 100,
        output_tokens: 20,
        cache_creation_input_tokens: 5,
        cache_read_input_tokens: 7,
      }),
      log.ev('turn.usage', {
        caller_id: 'ag_a',
        message_id: 'm2',
        model: null,
        stop_reason: 'end_turn',
        input_tokens: 10,
        output_tokens: 1,
      }),
      log.ev('tool_called', { caller_id: 'ag_a', message_id: 'm2', tool_use_id: 'tu_1', name: 'Read', input: {} }),
      log.ev('tool_called', { caller_id: 'ag_a', message_id: 'm2', tool_use_id: 'tu_2', name: 'Read', input: {} }),
      log.ev('tool_result', {
        caller_id: 'ag_a',
        tool_use_id: 'tu_1',
        duration_ms: 3,
        is_error: false,
        error_reason: null,
      }),
      log.ev('run.cost', {
        agent_id: 'ag_a',
        total_cost_usd: 0.5,
        duration_ms: 1,
        duration_api_ms: 1,
        num_turns: 2,
        usage: {},
        model_usage: {},
      }),
    );
    const a = agentOf(state, 'ag_a');
    expect(a.stats).toEqual({ input_tokens: 122, output_tokens: 21, cost_usd: 0.5, tool_calls: 2, llm_calls: 2 });
    expect([...a.open_tool_uses]).toEqual(['tu_2']);

    // A new session: its cumulative cost adds to what the earlier sessions cost.
    apply(
      state,
      log.ev('agent_started', agentStarted('ag_a', 'sp_1', 's2', false)),
      log.ev('run.cost', {
        agent_id: 'ag_a',
        total_cost_usd: 0.25,
        duration_ms: 1,
        duration_api_ms: 1,
        num_turns: 1,
        usage: {},
        model_usage: {},
      }),
    );
    expect(a.cost_base).toBe(0.5);
    expect(a.stats.cost_usd).toBe(0.75);
    expect(a.open_tool_uses.size).toBe(0);

    // A resume continues the same session: its total replaces that session's share.
    apply(
      state,
      log.ev('agent_started', agentStarted('ag_a', 'sp_1', 's2', true)),
      log.ev('run.cost', {
        agent_id: 'ag_a',
        total_cost_usd: 0.375,
        duration_ms: 1,
        duration_api_ms: 1,
        num_turns: 2,
        usage: {},
        model_usage: {},
      }),
    );
    expect(a.cost_base).toBe(0.5);
    expect(a.stats.cost_usd).toBe(0.875);
  });
});

describe('replay', () => {
  function mixedLog(): StoredEvent[] {
    const log = new FakeLog(TASK, 10_000, 7);
    return [
      log.ev('task_created', taskCreated()),
      log.ev('agent_spawned', agentSpawned(ROOT, { leader_id: USER })),
      log.ev('launch.requested', {
        agent_id: ROOT,
        prompt: 'p',
        first_message: 'f',
        model: null,
        workspace_path: '/ws/r',
        project_workspace_path: '/ws',
      }),
      log.ev('launch.assigned', { agent_id: ROOT, spawner_id: 'sp_1', resume: false, session_id: null }),
      log.ev('agent_started', agentStarted(ROOT, 'sp_1', 'sess-r', false)),
      log.ev('team_created', teamCreated('tm_1', ROOT)),
      log.ev('agent_spawned', agentSpawned('ag_a', { team_id: 'tm_1' })),
      log.ev('plan_declared', {
        plan_id: 'pl_1',
        owner_agent_id: ROOT,
        team_id: null,
        plan_path: '/ws/p.md',
        tasks: [planTask('a', 'ready'), planTask('b', 'blocked', ['a'])],
      }),
      log.ev('task_spawned', { plan_id: 'pl_1', plan_task_id: 'a', team_id: 'tm_1', agent_id: 'ag_a' }),
      log.ev('send_message', { caller_id: ROOT, to: 'ag_a', content: 'start', message_id: 'msg_1' }),
      log.ev('inbox.posted', { to: 'ag_a', from: BEIDOU, kind: 'system', content: 'note', message_id: 'msg_2' }),
      log.ev('agent_input', agentInput('ag_a', 'msg_1', ROOT, 'start')),
      log.ev('inbox.posted', {
        to: ROOT,
        from: 'ag_a',
        kind: 'review_report',
        content: 'old report',
        message_id: 'msg_r',
      }),
      log.ev('inbox.withdrawn', { to: ROOT, from: 'ag_a', message_id: 'msg_r', reason: 'replaced' }),
      log.ev('question_asked', questionAsked('q_1', 'ag_a', ROOT)),
      log.ev('question_escalated', { qid: 'q_1', by: ROOT, new_holder: null, reason: 'user knows' }),
      log.ev('question_answered', {
        qid: 'q_1',
        asker: 'ag_a',
        chain_len: 2,
        answers: [{ selected_labels: ['Yes'], selected_values: ['Yes'], text: null }],
        answer_text: 'Yes',
        by: USER,
        reason: null,
      }),
      log.ev('status', { agent_id: 'ag_a', state: 'review_pending', detail: 'done' }),
      log.ev('completion.reping', { agent_id: 'ag_a', leader_id: ROOT, ping_count: 1, pending: 'review' }),
      log.ev('liveness.nudge', { agent_id: ROOT, nudge_count: 1, idle_s: 120 }),
      log.ev('task_done', { plan_id: 'pl_1', plan_task_id: 'a' }),
      log.ev('task_ready', { plan_id: 'pl_1', plan_task_id: 'b' }),
      log.ev('terminate.posted', { caller_id: ROOT, agent_id: 'ag_a', reason: 'leader' }),
      log.ev('terminate.consumed', { agent_id: 'ag_a', via: 'server' }),
      log.ev('agent_completed', { agent_id: ROOT, terminated: false, stop_reason: 'end_turn' }),
      log.ev('task_ended', { status: 'done', reason: 'all done' }),
    ];
  }

  it('reducing the same events into two fresh states gives deep-equal states', () => {
    const events = mixedLog();
    const first = apply(emptyState(), ...events);
    const second = apply(emptyState(), ...events);
    expect(second).toEqual(first);

    // The states are the fold of the whole log, not trivially empty.
    expect(first.agents.size).toBe(2);
    expect(taskOf(first)).toMatchObject({
      status: 'done',
      event_count: events.length,
      last_event_at: events.at(-1)!.ts,
    });
    expect(first.questions.get('q_1')!.chain).toEqual([ROOT, USER]);
    expect(agentOf(first, 'ag_a')).toMatchObject({ terminate_consumed: true, delivered_count: 1, inbox_chars: 4 });
  });

  it('replaying the log as read back from disk (JSON) rebuilds the live state, and reduction leaves the events untouched', () => {
    const events = mixedLog();
    const snapshot = structuredClone(events);
    const live = apply(emptyState(), ...events);
    expect(events).toEqual(snapshot);

    const fromDisk = events.map((e) => JSON.parse(JSON.stringify(e)) as StoredEvent);
    expect(apply(emptyState(), ...fromDisk)).toEqual(live);
  });
});
