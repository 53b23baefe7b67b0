import path from 'node:path';
import type { PlanStore } from '../../registry/plan-store.js';
import type { PlanRecord } from '../../registry/state.js';
import { renameDurably, writeFileAtomicAsync } from '../../util/durable-file.js';

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
