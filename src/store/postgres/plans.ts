import type pg from 'pg';
import type { Clock } from '../../util/clock.js';
import type { PlanStore } from '../../registry/plan-store.js';
import type { PlanRecord } from '../../registry/state.js';

/** The PostgreSQL store's plans: rows of `plans`, their `plan_path` a location naming the row. */
export class PgPlanStore implements PlanStore {
  constructor(
    private readonly pool: pg.Pool,
    private readonly clock: Clock,
  ) {}

  location(taskId: string, planId: string): string {
    return `postgres:plans/${taskId}/${planId}`;
  }

  async save(plan: { taskId: string; planId: string; ownerAgentId: string; text: string }): Promise<void> {
    await this.pool.query(
      'INSERT INTO plans (task_id, plan_id, owner_agent_id, body, created_at) VALUES ($1, $2, $3, $4::json, $5)',
      [plan.taskId, plan.planId, plan.ownerAgentId, plan.text, this.clock.now()],
    );
  }

  async discard(plan: { taskId: string; planId: string }): Promise<void> {
    await this.pool.query('DELETE FROM plans WHERE task_id = $1 AND plan_id = $2', [plan.taskId, plan.planId]);
  }

  async unmarkRemoved(plan: PlanRecord): Promise<void> {
    await this.pool.query('UPDATE plans SET removed_at = NULL WHERE task_id = $1 AND plan_id = $2', [
      plan.task_id,
      plan.plan_id,
    ]);
  }

  async markRemoved(plan: PlanRecord): Promise<void> {
    await this.pool.query('UPDATE plans SET removed_at = $3 WHERE task_id = $1 AND plan_id = $2', [
      plan.task_id,
      plan.plan_id,
      this.clock.now(),
    ]);
  }
}
