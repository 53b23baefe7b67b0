import { money } from './format.js';
import type { PendingQuestion, TaskItem } from './types.js';

/** The page with no task chosen: how the teams stand, at a glance. */
export function Overview({ tasks, questions }: { tasks: TaskItem[] | null; questions: PendingQuestion[] | null }) {
  const all = tasks ?? [];
  const running = all.filter((t) => t.status === 'running');
  const live = all.reduce((n, t) => n + t.agents.live, 0);
  const cost = all.reduce((n, t) => n + t.cost_usd, 0);
  return (
    <article class="overview" data-testid="overview">
      <h1>Overview</h1>
      <dl class="tiles">
        <div>
          <dt>Running tasks</dt>
          <dd>
            {running.length} <small>of {all.length}</small>
          </dd>
        </div>
        <div>
          <dt>Live agents</dt>
          <dd>{live}</dd>
        </div>
        <div>
          <dt>Questions for you</dt>
          <dd>{questions?.length ?? 0}</dd>
        </div>
        <div>
          <dt>Cost so far</dt>
          <dd>{money(cost)}</dd>
        </div>
      </dl>
      <p class="muted">Pick a task to see its team, its plan and its events as they happen, or start a new one.</p>
    </article>
  );
}
