import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
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

  async discard(plan: { location: string }): Promise<void> {
    await rm(plan.location, { force: true });
  }

  async markRemoved(plan: PlanRecord): Promise<void> {
    moveTolerant(plan.plan_path, removedPlanPath(plan.plan_path));
  }

  async unmarkRemoved(plan: PlanRecord): Promise<void> {
    moveTolerant(removedPlanPath(plan.plan_path), plan.plan_path);
  }
}

/** Renames `from` to `to`, done already when `from` is gone and `to` is there (a retry after a failed commit). */
function moveTolerant(from: string, to: string): void {
  try {
    renameDurably(from, to);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || !existsSync(to)) throw err;
  }
}

export function removedPlanPath(file: string): string {
  return file.replace(/\.json$/, '.removed.json');
}
