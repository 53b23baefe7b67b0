import type { StoredEvent } from '../events/catalogue.js';
import { agentStatus } from './queries.js';
import { USER, type RegistryState } from './state.js';

/**
 * Rollups: aggregated rows for dashboards and SQL, never a source of truth. They are derived
 * from the registry state for the entities each event touched, batched off the hot path,
 * and rebuilt whole from the state (itself a reduction of the logs) at start.
 * `RollupStore` is the seam where a shared database replaces the embedded SQLite
 * (store/postgres/rollups.ts; the embedded one is store/embedded/rollups.ts): its writes are asynchronous, so `rebuild`, `flush` and `close` return
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
