import type { Logger } from 'pino';
import type { ArchiveIndex } from '../registry/archive.js';
import type { Registry } from '../registry/registry.js';
import type { Clock } from '../util/clock.js';
import type { Inboxes } from './inbox.js';
import type { QuestionWaiters } from './question-waiters.js';

/**
 * History leaves memory: every so often (and once at start) it unloads each ended task
 * whose end is at least `BEIDOU_ARCHIVE_AFTER_S` old, by the server's clock, and writes its
 * entry to the archive index. A task something live still points at (an agent not yet
 * terminated, a pending question, a waiting call, a delivery holding a message) stays and
 * is tried again at the next pass. `tick()` is public so a test can drive it with a fake clock.
 */
export class Archiver {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<string[]> | null = null;

  constructor(
    private readonly deps: {
      registry: Registry;
      index: ArchiveIndex;
      archiveAfterS: number;
      clock: Clock;
      inboxes: Inboxes;
      questions: QuestionWaiters;
      /** Runs before a pass unloads anything: the rollups write their last rows of the tasks. */
      beforeUnload: () => Promise<void>;
      logger: Logger;
    },
  ) {}

  start(): void {
    // A tenth of the delay, between 1 s and 60 s: a task leaves memory soon after it is due.
    const everyMs = Math.min(60, Math.max(1, this.deps.archiveAfterS / 10)) * 1000;
    this.timer = setInterval(() => void this.tick(), everyMs);
    this.timer.unref();
    void this.tick();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running?.catch(() => undefined);
  }

  /** One pass; resolves with the ids it unloaded. A pass while one runs waits for that one. */
  tick(): Promise<string[]> {
    return (this.running ??= this.pass().finally(() => (this.running = null)));
  }

  private due(): string[] {
    const { registry, archiveAfterS, clock } = this.deps;
    const now = clock.now();
    const due: string[] = [];
    for (const t of registry.state.tasks.values()) {
      if (t.status !== 'running' && t.ended_at !== null && t.ended_at + archiveAfterS <= now) due.push(t.task_id);
    }
    return due;
  }

  private held(taskId: string): string | null {
    const { registry, inboxes, questions } = this.deps;
    const task = registry.task(taskId);
    if (!task) return null;
    for (const id of task.agent_ids)
      if (inboxes.holds(id)) return `agent ${id} has a waiting read or a delivery in flight`;
    for (const qid of task.question_ids) if (questions.has(qid)) return `a call waits on question ${qid}`;
    return null;
  }

  private async pass(): Promise<string[]> {
    const { registry, index, clock, logger } = this.deps;
    if (this.due().length === 0) return [];
    try {
      await this.deps.beforeUnload();
    } catch (err) {
      logger.warn({ err }, 'the rollups could not be written before archiving; archiving waits for the next pass');
      return [];
    }
    const entries = [];
    // Checked again after the await: the state may have moved on.
    for (const taskId of this.due()) {
      const refusal = registry.unloadRefusal(taskId) ?? this.held(taskId);
      if (refusal) {
        logger.debug({ task_id: taskId, reason: refusal }, 'ended task kept in memory for now');
        continue;
      }
      const entry = registry.unload(taskId, clock.now());
      if (entry) entries.push(entry);
    }
    if (entries.length === 0) return [];
    try {
      await index.put(entries);
    } catch (err) {
      // Unloaded all the same: a start that misses the entries replays those tasks.
      logger.error({ err }, 'could not write the archive index; a restart replays these tasks');
    }
    logger.info(
      { tasks: entries.length },
      `archived ${entries.length} ended task${entries.length === 1 ? '' : 's'} out of memory`,
    );
    return entries.map((e) => e.task_id);
  }
}
