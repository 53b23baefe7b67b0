import { DomainError } from './errors.js';
import type { Answer, QuestionItem } from '../registry/state.js';

/**
 * Answers to ask_user questions: validation against the questions asked, the server-derived
 * `selected_values`, and the `answer_text` rendering (docs/tools.md, ask_user). Pure functions.
 */

export interface AnswerInput {
  selected_labels: string[];
  text: string | null | undefined;
}

/** The label a person picks to type their own answer on a choice question. */
export const OTHER = 'Other';

export function validateAnswers(questions: readonly QuestionItem[], answers: readonly AnswerInput[]): Answer[] {
  if (answers.length !== questions.length) {
    throw new DomainError(
      'answer_count_mismatch',
      `the question has ${questions.length} sub-question(s) but ${answers.length} answer(s) were given; answer each one, in order`,
      { expected: questions.length, got: answers.length },
    );
  }
  return questions.map((q, i) => validateOne(q, answers[i]!, i));
}

function validateOne(q: QuestionItem, a: AnswerInput, i: number): Answer {
  const fail = (field: string, message: string) =>
    new DomainError('invalid_input', `answers[${i}].${field}: ${message}`, {
      field: `answers[${i}].${field}`,
      index: i,
    });
  const text = typeof a.text === 'string' && a.text.trim().length > 0 ? a.text : null;
  const chosen = [...new Set(a.selected_labels)];
  // "Other" is the typed-answer path: stored as no label plus the text.
  const labels = chosen.filter((l) => l !== OTHER);
  if (q.options.length === 0) {
    if (labels.length > 0)
      throw fail(
        'selected_labels',
        'this is a free-text question; leave selected_labels empty and put the answer in text',
      );
    if (!text) throw fail('text', 'this is a free-text question; text must not be empty');
    return { selected_labels: [], selected_values: [], text };
  }
  const byLabel = new Map(q.options.map((o) => [o.label, o]));
  for (const label of labels) {
    if (!byLabel.has(label)) {
      throw fail(
        'selected_labels',
        `"${label}" is not an option (options: ${q.options.map((o) => o.label).join(', ')})`,
      );
    }
  }
  if (!q.multiSelect && labels.length > 1)
    throw fail('selected_labels', 'this is a single-select question; choose one option');
  if (labels.length === 0 && !text)
    throw fail('selected_labels', 'choose an option, or leave it empty and type your own answer in text');
  if (chosen.includes(OTHER) && labels.length > 0 && !q.multiSelect)
    throw fail('selected_labels', `choose one option, or "${OTHER}" with your text`);
  if ((chosen.includes(OTHER) || labels.length === 0) && !text)
    throw fail('text', `"${OTHER}" needs the typed answer in text`);
  for (const label of labels) {
    if (byLabel.get(label)?.requires_text && !text) throw fail('text', `the option "${label}" requires a text answer`);
  }
  return {
    selected_labels: labels,
    selected_values: labels.map((l) => byLabel.get(l)!.value ?? l),
    text,
  };
}

/** One line per sub-question, prefixed with its header when it has one. */
export function renderAnswerText(questions: readonly QuestionItem[], answers: readonly Answer[]): string {
  return questions
    .map((q, i) => {
      const line = renderOne(q, answers[i]!);
      return q.header.length > 0 ? `${q.header}: ${line}` : line;
    })
    .join('\n');
}

function renderOne(q: QuestionItem, a: Answer): string {
  const labels = a.selected_labels;
  if (q.options.length === 0) return a.text ?? '';
  if (!q.multiSelect) {
    // "Other" (or no choice) is the typed text; a chosen option that asked for text shows both.
    if (labels.length === 0) return a.text ?? '';
    return a.text ? `${labels[0]}: ${a.text}` : labels[0]!;
  }
  return [...labels, ...(a.text ? [a.text] : [])].join(', ');
}

/** A flat summary of the questions for the `question_asked` event (cut at 200 characters). */
export function promptSummary(questions: readonly QuestionItem[]): string {
  const flat = questions.map((q) => (q.header ? `${q.header}: ${q.question}` : q.question)).join(' | ');
  return flat.length > 200 ? `${flat.slice(0, 199)}…` : flat;
}
