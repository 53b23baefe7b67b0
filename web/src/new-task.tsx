import { useEffect, useRef, useState } from 'preact/hooks';
import { request } from './api.js';
import { setState, toast } from './store.js';
import type { CreatedTask, Skill } from './types.js';

/** Starts a task (POST /api/tasks) and opens its page. */
export function NewTask() {
  const dialog = useRef<HTMLDialogElement>(null);
  const [text, setText] = useState('');
  const [name, setName] = useState('');
  const [skill, setSkill] = useState('leader');
  const [spawn, setSpawn] = useState(true);
  const [skills, setSkills] = useState<Skill[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    dialog.current?.showModal();
    request<{ skills: Skill[] }>('GET', '/skills')
      .then((r) => setSkills(r.skills))
      .catch(() => setSkills([]));
  }, []);

  const close = () => setState({ newTaskOpen: false });

  const submit = async (e: Event) => {
    e.preventDefault();
    if (!text.trim()) return setError('Describe the task.');
    setBusy(true);
    setError(null);
    try {
      const created = await request<CreatedTask>('POST', '/tasks', {
        task: text,
        skill,
        spawn,
        ...(name.trim() ? { name: name.trim() } : {}),
      });
      close();
      location.hash = `#/tasks/${created.task_id}`;
      toast(
        spawn
          ? 'Task started; its root is queued for a spawner.'
          : `Task started; join it as its root with: beidou attach --agent ${created.root_agent_id} --server ${location.origin}`,
      );
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };

  const names = skills.length > 0 ? skills : [{ name: 'leader', description: '' }];
  return (
    <dialog
      ref={dialog}
      class="modal wide"
      aria-labelledby="new-task-title"
      onCancel={(e) => {
        e.preventDefault();
        close();
      }}
    >
      <form data-testid="new-task-form" onSubmit={submit}>
        <h2 id="new-task-title">New task</h2>
        <label for="new-task-text">What should the team do?</label>
        <textarea
          id="new-task-text"
          data-testid="new-task-text"
          rows={6}
          value={text}
          onInput={(e) => setText(e.currentTarget.value)}
          autofocus
        />
        <div class="form-row">
          <div>
            <label for="new-task-name">Name (optional)</label>
            <input
              id="new-task-name"
              data-testid="new-task-name"
              type="text"
              maxLength={200}
              value={name}
              onInput={(e) => setName(e.currentTarget.value)}
            />
          </div>
          <div>
            <label for="new-task-skill">Root skill</label>
            <select
              id="new-task-skill"
              data-testid="new-task-skill"
              value={skill}
              onChange={(e) => setSkill(e.currentTarget.value)}
            >
              {names.map((s) => (
                <option key={s.name} value={s.name} title={s.description}>
                  {s.name}
                </option>
              ))}
            </select>
          </div>
        </div>
        <label class="check">
          <input
            type="checkbox"
            data-testid="new-task-spawn"
            checked={spawn}
            onChange={(e) => setSpawn(e.currentTarget.checked)}
          />
          <span>
            Run the root on a spawner
            <small class="muted block">Untick it to connect the root yourself, with beidou attach.</small>
          </span>
        </label>
        {error && (
          <p class="error" role="alert" data-testid="new-task-error">
            {error}
          </p>
        )}
        <div class="actions">
          <button type="button" onClick={close}>
            Cancel
          </button>
          <button type="submit" class="primary" data-testid="new-task-submit" disabled={busy}>
            {busy ? 'Starting…' : 'Start task'}
          </button>
        </div>
      </form>
    </dialog>
  );
}
