import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { DomainContext } from '../domain/context.js';
import { idleNudges, reviewPings, type ActivityView } from '../domain/watchdog.js';
import type { EventDraft } from '../events/catalogue.js';
import type { Registry } from '../registry/registry.js';
import type { TaskRecord } from '../registry/state.js';
import type { Clock } from '../util/clock.js';

/**
 * The watchdog's timer: every `BEIDOU_WATCHDOG_S` it runs the two passes of
 * domain/watchdog.ts over each running task and commits what they decide, one batch at a
 * time. A pass that fails is logged and recorded (`watchdog.exception`); it never crashes
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
        await this.pass(task, 'A', () => reviewPings(domain, task, clock.now()));
        await this.pass(task, 'B', () => idleNudges(domain, task, clock.now(), activity));
      }
    } finally {
      this.running = false;
    }
  }

  private async pass(task: TaskRecord, pass: 'A' | 'B', decide: () => EventDraft[][]): Promise<void> {
    const { registry, logger } = this.deps;
    try {
      for (const batch of decide()) await registry.commit(batch);
    } catch (err) {
      logger.error({ err, pass, task_id: task.task_id }, 'watchdog pass failed');
      await registry
        .commit([{ event: 'watchdog.exception', task_id: task.task_id, pass, message: (err as Error).message ?? String(err) }])
        .catch(() => undefined);
    }
  }
}
