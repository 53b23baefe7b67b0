import type { DomainContext } from '../domain/context.js';
import { lateAnswer } from '../domain/questions.js';
import type { StoredEvent } from '../events/catalogue.js';
import type { Registry } from '../registry/registry.js';
import type { QuestionRecord } from '../registry/state.js';

/**
 * Blocked `ask_user` calls, waiting for their question to be answered or declined. A waiter
 * is handed the question only once the answer is durable (a reply is an acknowledgement).
 * A call that ends first (timeout, dropped connection, server stop) leaves the question
 * pending; its answer then goes to the asker's inbox (domain/questions.ts).
 */
export class QuestionWaiters {
  private readonly waiters = new Map<string, Set<(q: QuestionRecord) => void>>();

  constructor(
    private readonly registry: Registry,
    private readonly domain: DomainContext,
  ) {}

  /** Questions some call waits for (the tests' check that none is left behind). */
  get size(): number {
    return this.waiters.size;
  }

  /** Whether a blocked call is waiting for this question (then the answer is not posted to the inbox). */
  has(qid: string): boolean {
    return this.waiters.has(qid);
  }

  /** Durable observer: hands settled questions to their waiting calls. */
  onDurable(events: readonly StoredEvent[]): void {
    for (const e of events) {
      if (e.event !== 'question_answered' && e.event !== 'question_declined') continue;
      const set = this.waiters.get(e.qid);
      const q = this.registry.state.questions.get(e.qid);
      if (!set || !q) continue;
      this.waiters.delete(e.qid);
      for (const resolve of set) resolve(q);
    }
  }

  /**
   * Waits for the question to be answered or declined; resolves undefined if the signal
   * aborts first. Call it before committing the question, so a fast answer finds the call.
   */
  wait(qid: string, signal: AbortSignal): Promise<QuestionRecord | undefined> {
    const q = this.registry.state.questions.get(qid);
    if (q && q.status !== 'pending') return Promise.resolve(q);
    return new Promise((resolve) => {
      let set = this.waiters.get(qid);
      if (!set) this.waiters.set(qid, (set = new Set()));
      const done = (answered?: QuestionRecord) => {
        signal.removeEventListener('abort', onAbort);
        set.delete(done);
        if (set.size === 0 && this.waiters.get(qid) === set) this.waiters.delete(qid);
        resolve(answered);
      };
      const onAbort = () => {
        done(undefined);
        // Answered while this call waited, but the call ended before the answer was durable:
        // the answer relied on this call, so it goes to the inbox instead.
        const answered = this.registry.state.questions.get(qid);
        const late = answered ? lateAnswer(this.domain, answered) : [];
        if (late.length > 0) void this.registry.commit(late).catch(() => undefined);
      };
      if (signal.aborted) return done(undefined);
      signal.addEventListener('abort', onAbort, { once: true });
      set.add(done);
    });
  }
}
