import { human, money, taskTitle, when } from './format.js';
import type { TaskItem } from './types.js';

/** Every task, newest first (the server's order), live from the tasks stream; a row links to its page. */
export function TaskList({ tasks, selected }: { tasks: TaskItem[] | null; selected: string | null }) {
  if (tasks === null) return <p class="muted pad">Loading tasks…</p>;
  if (tasks.length === 0) {
    return (
      <p class="muted pad" data-testid="task-list">
        No tasks yet. Start one with <b>New task</b>, or <code>beidou task start "…"</code>.
      </p>
    );
  }
  return (
    <nav class="task-list" data-testid="task-list" aria-label="Tasks">
      {tasks.map((t) => (
        <a
          key={t.task_id}
          href={`#/tasks/${t.task_id}`}
          class={`task-row${t.task_id === selected ? ' selected' : ''}`}
          data-testid="task-row"
          data-task-id={t.task_id}
          data-status={t.status}
          aria-current={t.task_id === selected ? 'page' : undefined}
        >
          <div class="task-row-top">
            <span class="task-name" data-testid="task-name" title={t.text ?? undefined}>
              {taskTitle(t)}
            </span>
            <span class={`pill s-${t.status}`} data-testid="task-status">
              {human(t.status)}
            </span>
          </div>
          <div class="task-row-meta">
            <span data-testid="task-agents">
              {t.agents.live}/{t.agents.total} live
            </span>
            <span data-testid="task-cost">{money(t.cost_usd)}</span>
            <span>{when(t.created_at)}</span>
          </div>
        </a>
      ))}
    </nav>
  );
}
