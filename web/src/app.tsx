import { useEffect } from 'preact/hooks';
import { openStream, serverVersion } from './api.js';
import { ConfirmDialog } from './confirm-dialog.js';
import { Header } from './header.js';
import { NewTask } from './new-task.js';
import { Overview } from './overview.js';
import { Questions } from './questions.js';
import { useTaskRoute } from './route.js';
import { SignIn } from './sign-in.js';
import { setState, setStream, useStore } from './store.js';
import { TaskList } from './task-list.js';
import { TaskPage } from './task-page.js';
import { Toasts } from './toasts.js';
import type { PendingQuestion, TaskItem } from './types.js';

/**
 * The page: the task list and the questions come from one live stream (GET
 * /api/tasks/stream), whichever task is open, so the list never stops updating.
 */
export function App() {
  const s = useStore();
  const taskId = useTaskRoute();

  useEffect(() => {
    void serverVersion().then((version) => setState({ version }));
  }, []);

  useEffect(() => {
    if (!s.token) return;
    const close = openStream('/tasks/stream', {
      resume: false,
      onEvent: (name, data) => {
        if (name === 'tasks') setState({ tasks: (JSON.parse(data) as { tasks: TaskItem[] }).tasks });
        else if (name === 'questions')
          setState({ questions: (JSON.parse(data) as { questions: PendingQuestion[] }).questions });
      },
      onState: (connected) => setStream('tasks', connected),
    });
    return () => {
      close();
      setStream('tasks', null);
    };
  }, [s.token]);

  const streams = Object.values(s.streams);
  const live = streams.length > 0 && streams.every(Boolean);

  if (!s.token) {
    return (
      <div class="app">
        <Header version={s.version} signedIn={false} live={false} />
        <SignIn />
      </div>
    );
  }
  const summary = s.tasks?.find((t) => t.task_id === taskId);
  return (
    <div class="app">
      <Header version={s.version} signedIn live={live} />
      <div class="layout">
        <aside class="sidebar">
          <div class="sidebar-head">
            <h2>Tasks</h2>
            <span class="count">{s.tasks?.length ?? 0}</span>
            <button
              type="button"
              class="primary small push-right"
              data-testid="new-task-open"
              onClick={() => setState({ newTaskOpen: true })}
            >
              New task
            </button>
          </div>
          <TaskList tasks={s.tasks} selected={taskId} />
        </aside>
        <main class="main">
          <Questions questions={s.questions} tasks={s.tasks} />
          {taskId ? (
            <TaskPage key={taskId} taskId={taskId} summary={summary} />
          ) : (
            <Overview tasks={s.tasks} questions={s.questions} />
          )}
        </main>
      </div>
      {s.newTaskOpen && <NewTask />}
      {s.confirmation && <ConfirmDialog key={s.confirmation.id} confirmation={s.confirmation} />}
      <Toasts toasts={s.toasts} />
    </div>
  );
}
