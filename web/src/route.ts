import { useEffect, useState } from 'preact/hooks';

/** Hash routing: `#/tasks/<task_id>` is a task's page, anything else the overview. */
export function currentTask(): string | null {
  const m = /^#\/tasks\/([^/?#]+)/.exec(location.hash);
  return m ? decodeURIComponent(m[1]!) : null;
}

export function useTaskRoute(): string | null {
  const [task, setTask] = useState(currentTask);
  useEffect(() => {
    const on = () => setTask(currentTask());
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return task;
}
