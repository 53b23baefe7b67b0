import { DatabaseInUseError } from './connect.js';
import { WriterFencedError, type WriterLease } from './lease.js';
import type { TaskLog } from './replay.js';

/**
 * One group commit of the PostgreSQL log into `events`: every pending row of the batch in
 * one statement, fenced by the writer lease's epoch. The log (`PgEventLog.write`) takes the
 * rows from its tasks and, once this resolves, holds them as durable.
 */

/** Stores the batch's rows, or throws in words an operator can act on (the log then fails). */
export async function commitRows(
  lease: WriterLease,
  taken: ReadonlyArray<{ rows: TaskLog['pending'] }>,
): Promise<void> {
  const taskIds: string[] = [];
  const seqs: number[] = [];
  const tss: number[] = [];
  const names: string[] = [];
  const lines: string[] = [];
  const newTasks: string[] = [];
  const newTaskTs: number[] = [];
  for (const { rows } of taken) {
    for (const { event, line } of rows) {
      taskIds.push(event.task_id);
      seqs.push(event.seq);
      tss.push(event.ts);
      names.push(event.event);
      lines.push(line);
      if (event.seq === 1) {
        newTasks.push(event.task_id);
        newTaskTs.push(event.ts);
      }
    }
  }
  try {
    if (lines.length > 0) {
      const client = (lease.client ??= await lease.reconnect());
      // One statement: one round trip and one transaction. The fence row is held (FOR
      // SHARE) so that a takeover bumping the epoch waits for this commit, and sees it in
      // its replay; a commit after a takeover inserts nothing.
      const { rows } = await client.query<{ stored: number }>(
        `WITH fence AS (
           SELECT epoch FROM log_writer WHERE epoch = $1 FOR SHARE
         ), new_tasks AS (
           INSERT INTO log_tasks (task_id, created_ts)
           SELECT * FROM unnest($2::text[], $3::float8[]) WHERE EXISTS (SELECT 1 FROM fence)
         ), stored AS (
           INSERT INTO events (task_id, seq, ts, event, body)
           SELECT t, s, ts, e, b::json FROM unnest($4::text[], $5::int[], $6::float8[], $7::text[], $8::text[]) AS r(t, s, ts, e, b)
           WHERE EXISTS (SELECT 1 FROM fence)
           RETURNING 1
         )
         -- Standbys following the log are told at commit (NOTIFY is sent only if it commits).
         SELECT (SELECT count(*)::int FROM stored) AS stored, pg_notify('beidou_events', $1::text) AS told`,
        [lease.epoch, newTasks, newTaskTs, taskIds, seqs, tss, names, lines],
      );
      if (rows[0]!.stored !== lines.length) throw new WriterFencedError(lease.epoch);
    }
  } catch (err) {
    // Memory is ahead of the store, and whether a commit cut short was stored is not
    // known: nothing of this batch is acknowledged, and nothing more will be (the throw).
    if (err instanceof WriterFencedError) void lease.fenced(err);
    throw describeCommitFailure(err);
  }
}

/** A commit's failure in words an operator can act on; the driver's message stays in it. */
function describeCommitFailure(err: unknown): Error {
  if (err instanceof WriterFencedError || err instanceof DatabaseInUseError) return err;
  const e = err as { code?: string; detail?: string; message?: string };
  if (e.code === '23505') {
    return new Error(
      `another writer already stored an event this server numbered (${e.detail ?? e.message}): the (task_id, seq) key refused the commit`,
    );
  }
  return new Error(
    `a commit to PostgreSQL failed (${e.message ?? String(err)}); whether it was stored is unknown, and nothing of it was acknowledged`,
  );
}
