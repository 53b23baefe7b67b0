import { useState } from 'preact/hooks';
import { request } from './api.js';
import { taskTitle, when } from './format.js';
import { confirmAction, toast } from './store.js';
import type { PendingQuestion, QuestionItem, TaskItem } from './types.js';

/**
 * One question waiting for the user, rendered as ask_user describes it: radios for a
 * single choice, checkboxes for multiSelect, a text field for a free-text item, text
 * required for an option with `requires_text` and for the typed "Other" answer. What the
 * user has chosen and typed lives here, in a component keyed by qid, so no live update
 * can reset it.
 */

/** The label a person picks to type their own answer on a choice question (src/domain/answers.ts). */
const OTHER = 'Other';

interface ItemState {
  chosen: string[];
  text: string;
}

const ORIGINS: Record<string, string> = {
  ask_user: 'Question',
  root_review: 'Root review',
  root_termination: 'End of task',
  review_escalation: 'Stuck review',
  liveness_escalation: 'Idle agent',
  agent_failure: 'Agent down',
};

/** The choices shown: the item's options, plus the implicit "Other" unless an option already carries that label. */
function choices(item: QuestionItem): Array<{ label: string; description: string; requires_text?: boolean }> {
  if (item.options.length === 0) return [];
  const own = item.options.some((o) => o.label === OTHER);
  return own
    ? item.options
    : [...item.options, { label: OTHER, description: 'Type your own answer below.', requires_text: true }];
}

/** Why the text is needed for what is chosen, or null when it is optional. */
function textNeed(item: QuestionItem, s: ItemState): string | null {
  if (item.options.length === 0) return 'your answer';
  if (s.chosen.includes(OTHER) && !item.options.some((o) => o.label === OTHER)) return `"${OTHER}"`;
  const needs = item.options.find((o) => o.requires_text && s.chosen.includes(o.label));
  return needs ? `"${needs.label}"` : null;
}

/** The first thing that keeps the answer from being sent, in the words of the form. */
function problem(items: readonly QuestionItem[], states: readonly ItemState[]): string | null {
  for (const [i, item] of items.entries()) {
    const s = states[i]!;
    const where = items.length > 1 ? ` (question ${i + 1})` : '';
    if (item.options.length > 0 && s.chosen.length === 0) return `Choose an option${where}.`;
    const need = textNeed(item, s);
    if (need && !s.text.trim())
      return item.options.length === 0 ? `Type your answer${where}.` : `${need} needs text${where}.`;
  }
  return null;
}

export function QuestionCard({ question, task }: { question: PendingQuestion; task: TaskItem | undefined }) {
  const { qid, questions } = question;
  const [states, setStates] = useState<ItemState[]>(() => questions.map(() => ({ chosen: [], text: '' })));
  const [declining, setDeclining] = useState(false);
  const [reason, setReason] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const update = (i: number, patch: Partial<ItemState>) =>
    setStates((all) => all.map((s, j) => (j === i ? { ...s, ...patch } : s)));
  const choose = (i: number, label: string, multi: boolean, on: boolean) =>
    setStates((all) =>
      all.map((s, j) => {
        if (j !== i) return s;
        if (!multi) return { ...s, chosen: [label] };
        return {
          ...s,
          chosen: on ? [...s.chosen.filter((l) => l !== label), label] : s.chosen.filter((l) => l !== label),
        };
      }),
    );

  // How a toast names the question: the server's own ones by what they are about.
  const named =
    question.asker_name === 'beidou' && question.subject_name
      ? `the question about ${question.subject_name}`
      : `${question.asker_name}'s question`;

  const answer = async (e: Event) => {
    e.preventDefault();
    const wrong = problem(questions, states);
    if (wrong) return setError(wrong);
    setBusy(true);
    setError(null);
    try {
      const answers = states.map((s) => ({ selected_labels: s.chosen, text: s.text.trim() ? s.text : null }));
      await request('POST', `/questions/${encodeURIComponent(qid)}/answer`, { answers });
      toast(`Answered ${named}`);
    } catch (err) {
      setError((err as Error).message);
      setBusy(false);
    }
  };

  const decline = async () => {
    if (!reason.trim()) return setError('Say why you decline: the asker is told.');
    setError(null);
    if (!(await confirmAction(`Decline ${named}? The asker is told: "${reason.trim()}"`, 'Decline'))) return;
    setBusy(true);
    try {
      await request('POST', `/questions/${encodeURIComponent(qid)}/decline`, { reason: reason.trim() });
      toast(`Declined ${named}`);
    } catch (err) {
      setError((err as Error).message);
      setBusy(false);
    }
  };

  // The root's review puts its detail in the question and in the context: show it once.
  const context =
    question.context && !questions.some((q) => q.question.includes(question.context!.trim())) ? question.context : null;
  const taskName = task ? taskTitle(task) : (question.task_name ?? question.task_id);

  return (
    <form
      class="question-card"
      data-testid="question-card"
      data-qid={qid}
      data-task-id={question.task_id}
      onSubmit={answer}
      noValidate
    >
      <div class="question-head">
        <span class="chip">{ORIGINS[question.origin] ?? question.origin}</span>
        <span class="asker" data-testid="question-asker">
          {question.asker_name}
        </span>
        {question.subject_name && question.subject_name !== question.asker_name && (
          <span class="muted">about {question.subject_name}</span>
        )}
        <span class="muted">in</span>
        <a class="question-task" data-testid="question-task" href={`#/tasks/${question.task_id}`}>
          {taskName}
        </a>
        <span class="muted grow-right">{when(question.created_at)}</span>
      </div>
      {context && (
        <blockquote class="question-context" data-testid="question-context">
          {context}
        </blockquote>
      )}
      {questions.map((item, i) => {
        const s = states[i]!;
        const need = textNeed(item, s);
        const textId = `${qid}-${i}-text`;
        return (
          <fieldset key={i} class="question-item" data-testid="question-item" data-index={i}>
            <legend>
              {item.header && item.header !== ORIGINS[question.origin] && <span class="chip soft">{item.header}</span>}
              <span class={`question-text-label${item.question.length > 140 ? ' long' : ''}`}>{item.question}</span>
            </legend>
            {choices(item).map((o) => (
              <div key={o.label} class="option">
                <label data-testid="question-option" data-label={o.label}>
                  <input
                    type={item.multiSelect ? 'checkbox' : 'radio'}
                    name={`${qid}-${i}`}
                    value={o.label}
                    checked={s.chosen.includes(o.label)}
                    onChange={(e) => choose(i, o.label, item.multiSelect, e.currentTarget.checked)}
                  />
                  {o.label}
                </label>
                {o.description && <span class="option-desc">{o.description}</span>}
              </div>
            ))}
            <label for={textId} class="text-label">
              {item.options.length === 0 ? 'Your answer' : need ? `Text for ${need} (required)` : 'Note (optional)'}
            </label>
            <textarea
              id={textId}
              data-testid="question-text"
              rows={item.options.length === 0 ? 3 : 2}
              required={need !== null}
              value={s.text}
              onInput={(e) => update(i, { text: e.currentTarget.value })}
            />
          </fieldset>
        );
      })}
      {error && (
        <p class="error" role="alert" data-testid="question-error">
          {error}
        </p>
      )}
      {declining && (
        <div class="decline">
          <label for={`${qid}-decline`}>Why do you decline? (the asker is told)</label>
          <textarea
            id={`${qid}-decline`}
            data-testid="question-decline-reason"
            rows={2}
            value={reason}
            onInput={(e) => setReason(e.currentTarget.value)}
          />
        </div>
      )}
      <div class="actions">
        {declining ? (
          <>
            <button type="button" onClick={() => setDeclining(false)} disabled={busy}>
              Keep it
            </button>
            <button
              type="button"
              class="danger"
              data-testid="question-decline-confirm"
              onClick={decline}
              disabled={busy}
            >
              Decline
            </button>
          </>
        ) : (
          <button type="button" data-testid="question-decline" onClick={() => setDeclining(true)} disabled={busy}>
            Decline…
          </button>
        )}
        <button type="submit" class="primary" data-testid="question-answer" disabled={busy}>
          {busy ? 'Sending…' : 'Answer'}
        </button>
      </div>
    </form>
  );
}
