import type { ArchiveMark } from '../events/log.js';
import type { RegistryState, TaskRecord } from './state.js';

/**
 * History leaves memory: an ended task is unloaded from the registry after
 * `BEIDOU_ARCHIVE_AFTER_S`, and what the server still needs of it without reading its
 * events is one entry of the archive index, kept in the store (`archived_tasks`: in
 * `stats.db` on one machine, a table of the database with PostgreSQL). A start reads the
 * index and replays only the tasks it does not hold (or whose mark no longer matches the
 * log, which stays the truth).
 */
export interface ArchivedTask {
  task_id: string;
  /** Where the task's stored events ended when it was archived: checked against the store at start. */
  mark: ArchiveMark;
  /** The task's record as it ended (its agent, team, plan and question ids included). */
  task: TaskRecord;
  /** Its agents: all of them, and those not terminated (0: archiving requires it). */
  agents: { total: number; live: number };
  /** What its agents cost, summed as it ended (the task list shows it). */
  cost_usd: number;
  archived_at: number;
}

/** The archive index in the store. */
export interface ArchiveIndex {
  load(): Promise<ArchivedTask[]>;
  /** The entries of these tasks only (a standby's check of the ended tasks it still holds). */
  loadFor(taskIds: readonly string[]): Promise<ArchivedTask[]>;
  /** Adds (or replaces) entries. */
  put(entries: readonly ArchivedTask[]): Promise<void>;
  remove(taskIds: readonly string[]): Promise<void>;
  /** Every entry replaced by these (`beidou stats rebuild`). */
  replaceAll(entries: readonly ArchivedTask[]): Promise<void>;
  close(): Promise<void>;
}

/** One row of `archived_tasks`, as both stores keep it. */
export interface ArchiveRow {
  task_id: string;
  last_seq: number;
  bytes: number | null;
  status: string;
  created_at: number;
  ended_at: number | null;
  archived_at: number;
  agents_total: number;
  agents_live: number;
  cost_usd: number;
  /** The task record, as JSON. */
  record: string;
}

export function archiveRow(e: ArchivedTask): ArchiveRow {
  return {
    task_id: e.task_id,
    last_seq: e.mark.lastSeq,
    bytes: e.mark.bytes,
    status: e.task.status,
    created_at: e.task.created_at,
    ended_at: e.task.ended_at,
    archived_at: e.archived_at,
    agents_total: e.agents.total,
    agents_live: e.agents.live,
    cost_usd: e.cost_usd,
    record: JSON.stringify(e.task),
  };
}

export function fromArchiveRow(r: ArchiveRow): ArchivedTask {
  return {
    task_id: r.task_id,
    mark: { lastSeq: Number(r.last_seq), bytes: r.bytes === null ? null : Number(r.bytes) },
    task: JSON.parse(r.record) as TaskRecord,
    agents: { total: Number(r.agents_total), live: Number(r.agents_live) },
    cost_usd: Number(r.cost_usd),
    archived_at: Number(r.archived_at),
  };
}

/**
 * Why a task cannot leave memory now, or null when it can: it must have ended, every agent
 * of it be terminated with no process, launch or spawner left, and no question of it be
 * pending. (What only the runtime knows, waiting calls and reserved messages, the
 * archiver checks besides.)
 */
export function unloadRefusal(state: RegistryState, taskId: string): string | null {
  const task = state.tasks.get(taskId);
  if (!task) return 'not in memory';
  if (task.status === 'running') return 'still running';
  for (const id of task.agent_ids) {
    const a = state.agents.get(id);
    if (!a) continue;
    if (!a.terminate_consumed) return `agent ${id} is not terminated yet`;
    if (a.running || a.spawner_id !== null || a.launch !== null) return `agent ${id} still has a process, a spawner or a launch`;
  }
  for (const qid of task.question_ids) if (state.questions.get(qid)?.status === 'pending') return `question ${qid} is pending`;
  return null;
}

/** Takes a task out of the state, returning its record and agent counts. */
export function removeTask(state: RegistryState, taskId: string): { task: TaskRecord; agents: { total: number; live: number }; cost_usd: number } {
  const task = state.tasks.get(taskId)!;
  let live = 0;
  let cost_usd = 0;
  for (const id of task.agent_ids) {
    const agent = state.agents.get(id);
    if (agent?.terminate_consumed === false) live++;
    cost_usd += agent?.stats.cost_usd ?? 0;
    state.agents.delete(id);
  }
  for (const id of task.team_ids) state.teams.delete(id);
  for (const id of task.plan_ids) state.plans.delete(id);
  for (const id of task.question_ids) state.questions.delete(id);
  state.tasks.delete(taskId);
  return { task, agents: { total: task.agent_ids.length, live }, cost_usd };
}
