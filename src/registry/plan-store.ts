import path from 'node:path';
import { renameDurably, writeFileAtomicAsync } from '../util/durable-file.js';
import type { PlanRecord } from './state.js';

/**
 * Where `declare_plan` keeps a plan's readable copy (the `plan_declared` event is the
 * truth, and carries the plan whole): written before the event is committed, marked
 * removed by `remove_plan`, kept for audit. The embedded store keeps files in the home;
 * the PostgreSQL store keeps rows (`pg-plans.ts`), so no replica's disk holds them.
 */
export interface PlanStore {
  /** The plan's `plan_path`: a file, or a location in the database. */
  location(taskId: string, planId: string): string;
  /** Keeps the copy; if it cannot, the plan is not declared. */
  save(plan: { taskId: string; planId: string; ownerAgentId: string; location: string; text: string }): Promise<void>;
  /** Marks the copy removed, before `plan_removed` is committed. */
  markRemoved(plan: PlanRecord): Promise<void>;
}

/** `plans/{task_id}/{plan_id}.json`, renamed to `{plan_id}.removed.json` on removal. */
export class FilePlanStore implements PlanStore {
  constructor(private readonly dir: string) {}

  location(taskId: string, planId: string): string {
    return path.join(this.dir, taskId, `${planId}.json`);
  }

  async save(plan: { location: string; text: string }): Promise<void> {
    // Atomic (temp file, fsync, rename, fsync of the folder): never seen half-written.
    await writeFileAtomicAsync(plan.location, plan.text);
  }

  async markRemoved(plan: PlanRecord): Promise<void> {
    renameDurably(plan.plan_path, removedPlanPath(plan.plan_path));
  }
}

export function removedPlanPath(file: string): string {
  return file.replace(/\.json$/, '.removed.json');
}
