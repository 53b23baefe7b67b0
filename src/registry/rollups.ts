import Database from 'better-sqlite3';
import type { StoredEvent } from '../events/catalogue.js';
import { agentStatus } from './queries.js';
import { USER, type RegistryState } from './state.js';

/**
 * Rollups: aggregated rows for dashboards and SQL, never a source of truth. They are derived
 * from the registry state for the entities each event touched, batched off the hot path,
 * and rebuilt whole from the state (itself a reduction of the logs) at start.
 * `RollupStore` is the seam where a shared database replaces the embedded SQLite
 * (`pg-rollups.ts`): its writes are asynchronous, so `rebuild`, `flush` and `close` return
 * promises (SQLite's settle having written synchronously, as before).
 */
export interface RollupStore {
  /** Marks what these events touched; written in the next batch. */
  track(events: readonly StoredEvent[]): void;
  /** Rewrites every row from the state; `replace`: rows of entities the state no longer has go too. */
  rebuild(options?: { replace?: boolean }): Promise<void>;
  /** Writes the pending batch now. */
  flush(): Promise<void>;
  close(): Promise<void>;
  /** Drops the pending batch unwritten (a replica stepping down); where absent, `close`. */
  discard?(): Promise<void>;
}

/** The entities an event touched, by kind: what a batch rewrites. */
export class TouchedRows {
  readonly tasks = new Set<string>();
  readonly agents = new Set<string>();
  readonly teams = new Set<string>();
  readonly questions = new Set<string>();

  add(events: readonly StoredEvent[]): void {
    for (const e of events) {
      this.tasks.add(e.task_id);
      const fields = e as unknown as Record<string, unknown>;
      for (const key of ['agent_id', 'caller_id', 'to', 'leader_id'] as const) {
        const v = fields[key];
        if (typeof v === 'string') this.agents.add(v);
      }
      if (typeof fields.team_id === 'string') this.teams.add(fields.team_id);
      if (typeof fields.qid === 'string') this.questions.add(fields.qid);
    }
  }

  addAll(state: RegistryState): void {
    for (const id of state.tasks.keys()) this.tasks.add(id);
    for (const id of state.teams.keys()) this.teams.add(id);
    for (const id of state.agents.keys()) this.agents.add(id);
    for (const id of state.questions.keys()) this.questions.add(id);
  }

  merge(other: TouchedRows): void {
    for (const id of other.tasks) this.tasks.add(id);
    for (const id of other.teams) this.teams.add(id);
    for (const id of other.agents) this.agents.add(id);
    for (const id of other.questions) this.questions.add(id);
  }

  get size(): number {
    return this.tasks.size + this.agents.size + this.teams.size + this.questions.size;
  }

  clear(): void {
    this.tasks.clear();
    this.agents.clear();
    this.teams.clear();
    this.questions.clear();
  }
}

/** One row per table, from the state: the derivation both stores write. Undefined: the entity is gone. */
export function taskRow(state: RegistryState, id: string) {
  const t = state.tasks.get(id);
  if (!t) return undefined;
  let input = 0;
  let output = 0;
  let cost = 0;
  for (const agentId of t.agent_ids) {
    const s = state.agents.get(agentId)?.stats;
    if (!s) continue;
    input += s.input_tokens;
    output += s.output_tokens;
    cost += s.cost_usd;
  }
  return {
    task_id: t.task_id,
    name: t.name,
    text: t.text,
    status: t.status,
    root_agent_id: t.root_agent_id,
    created_at: t.created_at,
    ended_at: t.ended_at,
    agent_count: t.agent_ids.length,
    team_count: t.team_ids.length,
    event_count: t.event_count,
    input_tokens: input,
    output_tokens: output,
    cost_usd: cost,
  };
}

export function teamRow(state: RegistryState, id: string) {
  const t = state.teams.get(id);
  if (!t) return undefined;
  return {
    team_id: t.team_id,
    task_id: t.task_id,
    name: t.name,
    leader_id: t.leader_id,
    parent_team_id: t.parent_team_id,
    depth: t.depth,
    member_count: t.member_ids.length,
    created_at: t.created_at,
  };
}

export function agentRow(state: RegistryState, id: string) {
  const a = state.agents.get(id);
  if (!a) return undefined;
  return {
    agent_id: a.agent_id,
    task_id: a.task_id,
    team_id: a.team_id,
    name: a.name,
    role: a.role,
    skill: a.skill,
    model: a.model,
    leader_id: a.leader_id,
    status: agentStatus(a),
    created_at: a.created_at,
    terminated_at: a.terminated_at,
    ...a.stats,
    messages_sent: a.sent_count,
    messages_delivered: a.delivered_count,
    inbox_depth: a.inbox.size,
  };
}

export function questionRow(state: RegistryState, id: string) {
  const q = state.questions.get(id);
  if (!q) return undefined;
  const holder = q.chain.at(-1)!;
  return {
    qid: q.qid,
    task_id: q.task_id,
    asker_agent_id: q.asker,
    holder: holder === USER ? null : holder,
    status: q.status,
    prompt: q.prompt,
    created_at: q.created_at,
    answered_at: q.answered_at,
  };
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS tasks (
  task_id TEXT PRIMARY KEY, name TEXT, text TEXT NOT NULL, status TEXT NOT NULL,
  root_agent_id TEXT NOT NULL, created_at REAL NOT NULL, ended_at REAL,
  agent_count INTEGER NOT NULL, team_count INTEGER NOT NULL, event_count INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS teams (
  team_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, name TEXT NOT NULL, leader_id TEXT NOT NULL,
  parent_team_id TEXT, depth INTEGER NOT NULL, member_count INTEGER NOT NULL, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS agents (
  agent_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, team_id TEXT, name TEXT NOT NULL, role TEXT,
  skill TEXT NOT NULL, model TEXT, leader_id TEXT NOT NULL, status TEXT NOT NULL,
  created_at REAL NOT NULL, terminated_at REAL,
  input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL,
  tool_calls INTEGER NOT NULL, llm_calls INTEGER NOT NULL,
  messages_sent INTEGER NOT NULL, messages_delivered INTEGER NOT NULL, inbox_depth INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS questions (
  qid TEXT PRIMARY KEY, task_id TEXT NOT NULL, asker_agent_id TEXT NOT NULL, holder TEXT,
  status TEXT NOT NULL, prompt TEXT NOT NULL, created_at REAL NOT NULL, answered_at REAL
);
CREATE INDEX IF NOT EXISTS agents_by_task ON agents(task_id);
CREATE INDEX IF NOT EXISTS teams_by_task ON teams(task_id);
CREATE INDEX IF NOT EXISTS questions_by_task ON questions(task_id);
`;

const BATCH_MS = 100;

export class SqliteRollups implements RollupStore {
  private readonly db: Database.Database;
  private readonly touched = new TouchedRows();
  private timer: NodeJS.Timeout | null = null;
  private readonly upsertTask: Database.Statement;
  private readonly upsertTeam: Database.Statement;
  private readonly upsertAgent: Database.Statement;
  private readonly upsertQuestion: Database.Statement;

  constructor(
    file: string,
    private readonly state: RegistryState,
    /** Rollups are derived data: a failed write is reported, never allowed to stop the server. */
    private readonly onError: (err: unknown) => void = () => undefined,
  ) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec(SCHEMA);
    this.upsertTask = this.db.prepare(
      `INSERT OR REPLACE INTO tasks VALUES (@task_id, @name, @text, @status, @root_agent_id, @created_at, @ended_at,
        @agent_count, @team_count, @event_count, @input_tokens, @output_tokens, @cost_usd)`,
    );
    this.upsertTeam = this.db.prepare(
      `INSERT OR REPLACE INTO teams VALUES (@team_id, @task_id, @name, @leader_id, @parent_team_id, @depth, @member_count, @created_at)`,
    );
    this.upsertAgent = this.db.prepare(
      `INSERT OR REPLACE INTO agents VALUES (@agent_id, @task_id, @team_id, @name, @role, @skill, @model, @leader_id,
        @status, @created_at, @terminated_at, @input_tokens, @output_tokens, @cost_usd, @tool_calls, @llm_calls,
        @messages_sent, @messages_delivered, @inbox_depth)`,
    );
    this.upsertQuestion = this.db.prepare(
      `INSERT OR REPLACE INTO questions VALUES (@qid, @task_id, @asker_agent_id, @holder, @status, @prompt, @created_at, @answered_at)`,
    );
  }

  track(events: readonly StoredEvent[]): void {
    this.touched.add(events);
    if (!this.timer) {
      this.timer = setTimeout(() => {
        try {
          this.write();
        } catch (err) {
          this.onError(err);
        }
      }, BATCH_MS);
      this.timer.unref();
    }
  }

  async rebuild(options: { replace?: boolean } = {}): Promise<void> {
    this.touched.addAll(this.state);
    this.write(options.replace ?? false);
  }

  async flush(): Promise<void> {
    this.write();
  }

  /** The batch in one transaction, synchronously: the promise of `flush` settles having written. */
  private write(replace = false): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const { state, touched } = this;
    const write = this.db.transaction(() => {
      if (replace) for (const table of ['tasks', 'teams', 'agents', 'questions']) this.db.exec(`DELETE FROM ${table}`);
      for (const id of touched.tasks) run(this.upsertTask, taskRow(state, id));
      for (const id of touched.teams) run(this.upsertTeam, teamRow(state, id));
      for (const id of touched.agents) run(this.upsertAgent, agentRow(state, id));
      for (const id of touched.questions) run(this.upsertQuestion, questionRow(state, id));
    });
    write();
    touched.clear();
  }

  async close(): Promise<void> {
    this.write();
    this.db.close();
  }
}

function run(statement: Database.Statement, row: Record<string, unknown> | undefined): void {
  if (row) statement.run(row);
}
