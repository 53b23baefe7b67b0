import type { PlanRecord } from './state.js';

/**
 * Where `declare_plan` keeps a plan's readable copy (the `plan_declared` event is the
 * truth, and carries the plan whole): written before the event is committed, marked
 * removed by `remove_plan`, kept for audit. The embedded store keeps files in the home;
 * the PostgreSQL store keeps rows (store/postgres/plans.ts; the files: store/embedded/plans.ts), so no replica's disk holds them.
 */
export interface PlanStore {
  /** The plan's `plan_path`: a file, or a location in the database. */
  location(taskId: string, planId: string): string;
  /** Keeps the copy; if it cannot, the plan is not declared. */
  save(plan: { taskId: string; planId: string; ownerAgentId: string; location: string; text: string }): Promise<void>;
  /** Takes back a copy whose `plan_declared` could not be committed. */
  discard(plan: { taskId: string; planId: string; location: string }): Promise<void>;
  /** Marks the copy removed, before `plan_removed` is committed (already marked: done). */
  markRemoved(plan: PlanRecord): Promise<void>;
  /** Takes back `markRemoved` when `plan_removed` could not be committed. */
  unmarkRemoved(plan: PlanRecord): Promise<void>;
}
