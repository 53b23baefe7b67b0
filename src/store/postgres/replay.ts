import type pg from 'pg';
import type { StoredEvent } from '../../events/catalogue.js';
import type { ArchiveMark, OpenOptions, ReplayReport } from '../../events/event-log.js';
import { RecentWindow, type LiveMemory } from '../recent-window.js';

/**
 * The PostgreSQL log's memory of each task (its newest durable JSON lines) and how it is filled
 * from the `events` table: the replay at `open` and `follow`, and the check of each row
 * as the JSONL replay checks a line (a follower applies what it reads the same way).
 */

export interface TaskLog {
  taskId: string;
  /**
   * The JSON of the newest durable events, within BEIDOU_LIVE_EVENTS_IN_MEMORY and
   * BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY (characters, about bytes): served by `read`, which
   * stays synchronous; older ones are read from the table. `lines.last` is the durable seq.
   */
  lines: RecentWindow<string>;
  /** Assigned but not yet handed to a commit, in seq order. */
  pending: Array<{ event: StoredEvent; line: string }>;
  /** The last seq assigned (durable, in a commit in flight, or pending). */
  assigned: number;
  /** Failed verification at start: read-only, its trusted prefix still readable. */
  quarantined: boolean;
}

/** Rows read per query at start. */
const REPLAY_PAGE = 5_000;

/** The task's log in `tasks`, a new empty one (holding at most `memory` of its lines) if it has none yet. */
export function taskLog(tasks: Map<string, TaskLog>, taskId: string, memory: LiveMemory): TaskLog {
  let task = tasks.get(taskId);
  if (!task) {
    const lines = new RecentWindow<string>(memory.events, memory.bytes, (line) => line.length);
    tasks.set(taskId, (task = { taskId, lines, pending: [], assigned: 0, quarantined: false }));
  }
  return task;
}

/**
 * Replays the stored events into `tasks` (each holding at most `memory` of its lines) but
 * those of archived tasks whose mark still matches (added to `archived`), up to position
 * `upTo` (null: all; a follower reads the rest as it follows). A task whose rows fail
 * verification is quarantined, not the replay.
 */
export async function replayStored(
  client: pg.Client,
  tasks: Map<string, TaskLog>,
  archived: Set<string>,
  onEvent: (event: StoredEvent) => void,
  options: OpenOptions & { memory: LiveMemory },
  upTo: number | null,
): Promise<ReplayReport> {
  const skipped = options.archived?.size ? await matchingMarks(client, options.archived) : [];
  for (const taskId of skipped) archived.add(taskId);
  /** The tasks to replay (the rest are archived); null: every task. */
  const only = skipped.length > 0 ? await liveTasks(client, archived) : null;
  const report: ReplayReport = { cut: [], quarantined: [], archived: skipped };
  let after: [string, number] = ['', 0];
  const bound = upTo === null ? '' : ` AND pos <= ${Math.trunc(upTo)}`;
  for (;;) {
    const { rows } = await client.query<{ task_id: string; seq: number; body: string }>(
      only
        ? `SELECT task_id, seq, body::text AS body FROM events WHERE task_id = ANY($4::text[]) AND (task_id, seq) > ($1, $2)${bound} ORDER BY task_id, seq LIMIT $3`
        : `SELECT task_id, seq, body::text AS body FROM events WHERE (task_id, seq) > ($1, $2)${bound} ORDER BY task_id, seq LIMIT $3`,
      only ? [after[0], after[1], REPLAY_PAGE, only] : [after[0], after[1], REPLAY_PAGE],
    );
    for (const row of rows) {
      const task = taskLog(tasks, row.task_id, options.memory);
      if (task.quarantined) continue;
      const problem = replayRow(task, row, onEvent);
      if (problem) {
        task.quarantined = true;
        report.quarantined.push({
          taskId: task.taskId,
          file: `events table, task ${task.taskId}`,
          line: row.seq,
          reason: problem,
        });
      }
    }
    if (rows.length < REPLAY_PAGE) return report;
    const last = rows[rows.length - 1]!;
    after = [last.task_id, last.seq];
  }
}

/** Verifies one stored row as the JSONL replay verifies a line, applies it, and keeps it; or says why not. */
export function replayRow(
  task: TaskLog,
  row: { task_id: string; seq: number; body: string },
  onEvent: (event: StoredEvent) => void,
): string | null {
  const expected = task.lines.last + 1;
  if (row.seq !== expected) return `seq ${row.seq}, expected ${expected}`;
  let event: StoredEvent;
  try {
    event = JSON.parse(row.body) as StoredEvent;
  } catch {
    return 'not valid JSON';
  }
  if (typeof event !== 'object' || event === null || Array.isArray(event) || typeof event.event !== 'string')
    return 'not an event object';
  if (event.seq !== row.seq) return `its body says seq ${String(event.seq)}`;
  if (event.task_id !== task.taskId) return `names task ${String(event.task_id)} in a row of task ${task.taskId}`;
  try {
    onEvent(event);
  } catch (err) {
    return `cannot be applied: ${(err as Error).message}`;
  }
  task.lines.push(row.body);
  task.assigned = row.seq;
  return null;
}

/** The archived tasks whose mark still matches the table: their last seq is there and nothing after it. */
async function matchingMarks(client: pg.Client, marks: ReadonlyMap<string, ArchiveMark>): Promise<string[]> {
  // The marks as one JSON text: the driver writes array literals in JavaScript, escaping each of 10,000 elements.
  const json = JSON.stringify(Array.from(marks, ([task_id, mark]) => ({ task_id, last_seq: mark.lastSeq })));
  const { rows } = await client.query<{ task_id: string }>(
    // One descent of the (task_id, seq) key per task: the seqs from the mark on are exactly the mark's.
    `SELECT m.task_id FROM json_to_recordset($1::json) AS m(task_id text, last_seq int)
      WHERE ARRAY(SELECT e.seq FROM events e WHERE e.task_id = m.task_id AND e.seq >= m.last_seq ORDER BY e.seq LIMIT 2) = ARRAY[m.last_seq]`,
    [json],
  );
  return rows.map((r) => r.task_id);
}

/** Every task the log holds but the archived ones: what a start replays. */
async function liveTasks(client: pg.Client, archived: ReadonlySet<string>): Promise<string[]> {
  const { rows } = await client.query<{ task_id: string }>('SELECT task_id FROM log_tasks ORDER BY task_id');
  return rows.map((r) => r.task_id).filter((id) => !archived.has(id));
}
