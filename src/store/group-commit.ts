import { EventLogFailedError } from '../events/event-log.js';

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

/**
 * What one commit wrote. `write` returns what to do once the commit's appends are
 * acknowledged (tell subscribers): observers hear of events only after their callers can.
 */
export type CommitWriter<T> = (batch: T[]) => Promise<(() => void) | undefined>;

/**
 * The group commit both logs share (JSONL files, PostgreSQL rows): every append made in
 * one turn of the event loop, or while a commit is in flight, joins the next commit; one
 * commit runs at a time; each append's promise settles with the commit that carried it.
 * A commit that throws fails the log: its appends and every queued or later one are
 * refused with `EventLogFailedError`, since memory is now ahead of the store.
 *
 * `T` is what an append marks dirty (a task's file or row queue); `write` takes the batch
 * and stores what is pending in each. `dropped` is told of the dirty items a failure
 * leaves unwritten, so the log can forget their pending lines.
 */
export class GroupCommit<T> {
  private dirty = new Set<T>();
  private waiters: Waiter[] = [];
  private scheduled = false;
  private committing: Promise<void> | null = null;
  private failed: Error | null = null;

  constructor(
    private readonly write: CommitWriter<T>,
    private readonly dropped: (items: Iterable<T>) => void = () => undefined,
  ) {}

  /** Why the log failed (null while it works): the cause of every refusal. */
  get failure(): Error | null {
    return this.failed;
  }

  /** Queues `items` for the next commit; resolves once that commit is durable. */
  add(items: Iterable<T>): Promise<void> {
    for (const item of items) this.dirty.add(item);
    const durable = new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    this.schedule();
    return durable;
  }

  /** Fails the log from outside a commit (the writer was fenced): refuses what is queued. */
  fail(err: Error): void {
    this.failed ??= err;
    this.refuseQueued();
  }

  /** Resolves once everything appended so far is durable; rejects if the log has failed. */
  async flush(): Promise<void> {
    if (this.failed) throw new EventLogFailedError(this.failed);
    if (this.waiters.length === 0 && !this.committing) return;
    await this.add([]);
  }

  private schedule(): void {
    if (this.failed) {
      this.refuseQueued();
      return;
    }
    if (this.scheduled || this.committing) return;
    this.scheduled = true;
    // setImmediate lets every append made in this turn of the event loop join the commit.
    setImmediate(() => {
      this.scheduled = false;
      this.committing = this.commit().finally(() => {
        this.committing = null;
        if (this.waiters.length > 0) this.schedule();
      });
    });
  }

  private async commit(): Promise<void> {
    const batch = [...this.dirty];
    const waiters = this.waiters;
    this.dirty = new Set();
    this.waiters = [];
    let after: (() => void) | undefined;
    try {
      after = await this.write(batch);
    } catch (err) {
      this.failed ??= err as Error;
      const error = new EventLogFailedError(this.failed);
      for (const w of waiters) w.reject(error);
      this.refuseQueued();
      return;
    }
    for (const w of waiters) w.resolve();
    after?.();
  }

  private refuseQueued(): void {
    const error = new EventLogFailedError(this.failed);
    for (const w of this.waiters.splice(0)) w.reject(error);
    this.dropped(this.dirty);
    this.dirty.clear();
  }
}
