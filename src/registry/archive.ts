import type { ArchiveMark } from '../events/event-log.js';
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

/** What a load reads of each row, in this order (`fromArchiveColumns`): the status and the times are in the record. */
export const ARCHIVE_LOAD_COLUMNS =
  'task_id, last_seq, bytes, agents_total, agents_live, cost_usd, archived_at, record';

/** An entry from the values of `ARCHIVE_LOAD_COLUMNS` (numbers, or the strings a driver gives for a bigint). */
export function fromArchiveColumns(v: readonly unknown[]): ArchivedTask {
  return new StoredArchivedTask(
    String(v[0]),
    { lastSeq: Number(v[1]), bytes: v[2] === null ? null : Number(v[2]) },
    { total: Number(v[3]), live: Number(v[4]) },
    Number(v[5]),
    Number(v[6]),
    v[7] as string,
  );
}

/**
 * An entry read from the store. Its task record stays JSON until something reads it (the
 * task list, a lookup of its agents or questions): a start needs only the marks, so it
 * parses none of the records, and an entry nobody asks about costs its text only.
 */
class StoredArchivedTask implements ArchivedTask {
  private record: string | null;
  private parsed: TaskRecord | null = null;

  constructor(
    readonly task_id: string,
    readonly mark: ArchiveMark,
    readonly agents: { total: number; live: number },
    readonly cost_usd: number,
    readonly archived_at: number,
    record: string,
  ) {
    this.record = record;
  }

  get task(): TaskRecord {
    if (this.parsed === null) {
      this.parsed = JSON.parse(this.record!) as TaskRecord;
      this.record = null;
    }
    return this.parsed;
  }
}

/**
 * The agents (or the questions) of archived tasks, to their task: a token or a route
 * naming one is answered without a read. Built from the entries at its first lookup, so a
 * start reads no task record for it; kept up to date as tasks are archived after that.
 */
export class ArchivedIds {
  private map: Map<string, string> | null = null;

  constructor(
    private readonly entries: ReadonlyMap<string, ArchivedTask>,
    private readonly idsOf: (task: TaskRecord) => readonly string[],
  ) {}

  get(id: string): string | undefined {
    return this.built().get(id);
  }

  has(id: string): boolean {
    return this.built().has(id);
  }

  /** An entry just added to `entries`. */
  added(entry: ArchivedTask): void {
    if (this.map) for (const id of this.idsOf(entry.task)) this.map.set(id, entry.task_id);
  }

  private built(): Map<string, string> {
    if (!this.map) {
      this.map = new Map();
      for (const e of this.entries.values()) for (const id of this.idsOf(e.task)) this.map.set(id, e.task_id);
    }
    return this.map;
  }
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
    if (a.running || a.spawner_id !== null || a.launch !== null)
      return `agent ${id} still has a process, a spawner or a launch`;
  }
  for (const qid of task.question_ids)
    if (state.questions.get(qid)?.status === 'pending') return `question ${qid} is pending`;
  return null;
}

/** Takes a task out of the state, returning its record and agent counts. */
export function removeTask(
  state: RegistryState,
  taskId: string,
): { task: TaskRecord; agents: { total: number; live: number }; cost_usd: number } {
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
