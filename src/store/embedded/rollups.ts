import Database from 'better-sqlite3';
import type { StoredEvent } from '../../events/catalogue.js';
import { agentRow, questionRow, taskRow, teamRow, TouchedRows, type RollupStore } from '../../registry/rollups.js';
import type { RegistryState } from '../../registry/state.js';
import { ensurePrivateFile } from '../../util/durable-file.js';

/** The embedded store's rollups: `stats.db` in the home, SQLite, written synchronously in batches. */
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
    ensurePrivateFile(file);
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
