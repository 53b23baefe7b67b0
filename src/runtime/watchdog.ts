import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { DomainContext } from '../domain/context.js';
import { idleNudge, liveAgents, pendingQuestions, reviewPing, type ActivityView } from '../domain/watchdog.js';
import type { EventDraft } from '../events/catalogue.js';
import type { Registry } from '../registry/registry.js';
import type { TaskRecord } from '../registry/state.js';
import type { Clock } from '../util/clock.js';

/**
 * The watchdog's timer: every `BEIDOU_WATCHDOG_S` it runs the two passes of
 * domain/watchdog.ts over each running task, deciding for one agent and committing that
 * before it decides the next. A pass that fails is logged and recorded (`watchdog.exception`); it never crashes
 * the server. `tick()` is public so a test can drive it with a fake clock.
 */
export class Watchdog {
  private timer: NodeJS.Timeout | null = null;
  private running = false;

  constructor(
    private readonly deps: {
      registry: Registry;
      domain: DomainContext;
      config: Config;
      clock: Clock;
      activity: ActivityView;
      logger: Logger;
    },
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.deps.config.watchdogS * 1000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** One pass over every running task; overlapping ticks are skipped. */
  async tick(): Promise<void> {
    if (this.running) return;
    this.running = true;
    const { registry, domain, clock, activity } = this.deps;
    try {
      for (const task of registry.state.tasks.values()) {
        if (task.status !== 'running') continue;
        // Each decision is made just before its commit, on the state the previous one left.
        await this.pass(task, 'A', async (commit) => {
          for (const child of liveAgents(registry.state, task)) {
            for (const pending of ['review', 'termination'] as const)
              await commit(reviewPing(domain, child, pending, clock.now()));
          }
        });
        await this.pass(task, 'B', async (commit) => {
          const questions = pendingQuestions(registry.state, task);
          for (const agent of liveAgents(registry.state, task))
            await commit(idleNudge(domain, agent, questions, clock.now(), activity));
        });
      }
    } finally {
      this.running = false;
    }
  }

  private async pass(
    task: TaskRecord,
    pass: 'A' | 'B',
    run: (commit: (drafts: EventDraft[] | null) => Promise<unknown>) => Promise<void>,
  ): Promise<void> {
    const { registry, logger } = this.deps;
    try {
      await run(async (drafts) => drafts && registry.commit(drafts));
    } catch (err) {
      logger.error({ err, pass, task_id: task.task_id }, 'watchdog pass failed');
      await registry
        .commit([
          { event: 'watchdog.exception', task_id: task.task_id, pass, message: (err as Error).message ?? String(err) },
        ])
        .catch(() => undefined);
    }
  }
}
