import { useState } from 'preact/hooks';
import { QuestionCard } from './question-card.js';
import type { PendingQuestion, TaskItem } from './types.js';

/**
 * The questions waiting for the user, across tasks, on every page. Each card is keyed by
 * its qid and this panel always renders in the same place, so a card is never remounted
 * by a refresh: what the user typed stays.
 */
export function Questions({ questions, tasks }: { questions: PendingQuestion[] | null; tasks: TaskItem[] | null }) {
  const list = questions ?? [];
  // Hidden, not unmounted: a folded card keeps what was typed in it.
  const [folded, setFolded] = useState(false);
  const byId = new Map((tasks ?? []).map((t) => [t.task_id, t]));
  return (
    <section
      class={`panel questions${list.length ? ' has-questions' : ''}`}
      data-testid="questions-panel"
      aria-labelledby="questions-title"
    >
      <div class="panel-head">
        <h2 id="questions-title">Waiting for you</h2>
        <span class={`count${list.length ? ' attention' : ''}`} data-testid="questions-count">
          {list.length}
        </span>
        {list.length > 0 && (
          <button type="button" class="small push-right" aria-expanded={!folded} onClick={() => setFolded(!folded)}>
            {folded ? 'Show' : 'Hide'}
          </button>
        )}
      </div>
      {list.length === 0 ? (
        <p class="muted empty">{questions === null ? 'Loading…' : 'No question is waiting for you.'}</p>
      ) : (
        <div class="question-list" hidden={folded}>
          {list.map((q) => (
            <QuestionCard key={q.qid} question={q} task={byId.get(q.task_id)} />
          ))}
        </div>
      )}
    </section>
  );
}
