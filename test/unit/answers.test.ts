import { describe, expect, it } from 'vitest';
import { DomainError } from '../../src/domain/errors.js';
import type { QuestionItem } from '../../src/registry/state.js';
import { renderAnswerText, validateAnswers, type AnswerInput } from '../../src/domain/answers.js';

/**
 * The answer side of ask_user (docs/tools.md: ask_user's answer_text and the
 * answer_question input): validation against the questions asked, selected_values, answer_text.
 */

const freeText = (header = '', question = 'Anything else?'): QuestionItem => ({
  question,
  header,
  multiSelect: false,
  options: [],
});

const singleSelect = (header = 'Colour'): QuestionItem => ({
  question: 'Which colour?',
  header,
  multiSelect: false,
  options: [
    { label: 'Red', description: 'warm', value: 'red' },
    { label: 'Blue', description: 'cool' },
    { label: 'Custom', description: 'describe it', value: 'custom', requires_text: true },
  ],
});

const multiSelect = (header = 'Langs'): QuestionItem => ({
  question: 'Which languages?',
  header,
  multiSelect: true,
  options: [
    { label: 'TypeScript', description: 'typed JS', value: 'ts' },
    { label: 'Rust', description: 'systems' },
    { label: 'Go', description: 'services', value: 'golang' },
  ],
});

const answer = (selected_labels: string[], text: string | null = null): AnswerInput => ({ selected_labels, text });

/** Validates and renders in one go, as the question broker does. */
function answerText(questions: QuestionItem[], input: AnswerInput[]): string {
  return renderAnswerText(questions, validateAnswers(questions, input));
}

/** The DomainError a call throws (fails the test if it does not throw one). */
function errorOf(fn: () => unknown): DomainError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(DomainError);
    return err as DomainError;
  }
  throw new Error('expected a DomainError, but nothing was thrown');
}

describe('renderAnswerText (the answer_text rules of docs/tools.md)', () => {
  it('free-text only: the typed text', () => {
    expect(answerText([freeText()], [answer([], 'ship on friday')])).toBe('ship on friday');
  });

  it('single-select: the chosen label', () => {
    expect(answerText([singleSelect('')], [answer(['Red'])])).toBe('Red');
    expect(answerText([singleSelect('')], [answer(['Blue'])])).toBe('Blue');
  });

  it('"Other" on a single-select (no label, typed text): the typed text', () => {
    expect(answerText([singleSelect('')], [answer([], 'green, obviously')])).toBe('green, obviously');
  });

  it('multi-select: the chosen labels, comma-joined, in the order given', () => {
    expect(answerText([multiSelect('')], [answer(['TypeScript', 'Go'])])).toBe('TypeScript, Go');
    expect(answerText([multiSelect('')], [answer(['Rust'])])).toBe('Rust');
  });

  it('grouped: one line per sub-question, prefixed "<header>: " only when the header is non-empty', () => {
    const questions = [singleSelect('Colour'), multiSelect('Langs'), freeText(''), freeText('Notes')];
    const text = answerText(questions, [
      answer(['Red']),
      answer(['TypeScript', 'Rust']),
      answer([], 'no header here'),
      answer([], 'keep it small'),
    ]);
    expect(text).toBe(['Colour: Red', 'Langs: TypeScript, Rust', 'no header here', 'Notes: keep it small'].join('\n'));
  });

  it('a single sub-question with a header is prefixed too', () => {
    expect(answerText([freeText('Deadline')], [answer([], 'friday')])).toBe('Deadline: friday');
  });
});

describe('validateAnswers', () => {
  it('derives selected_values from each option value, falling back to the label', () => {
    const [single, multi, free] = validateAnswers(
      [singleSelect(), multiSelect(), freeText()],
      [answer(['Blue']), answer(['TypeScript', 'Rust', 'Go']), answer([], 'typed')],
    );
    expect(single).toEqual({ selected_labels: ['Blue'], selected_values: ['Blue'], text: null });
    expect(multi).toEqual({
      selected_labels: ['TypeScript', 'Rust', 'Go'],
      selected_values: ['ts', 'Rust', 'golang'],
      text: null,
    });
    expect(free).toEqual({ selected_labels: [], selected_values: [], text: 'typed' });
    expect(validateAnswers([singleSelect()], [answer(['Red'])])).toEqual([
      { selected_labels: ['Red'], selected_values: ['red'], text: null },
    ]);
  });

  it('the "Other" path keeps selected_labels and selected_values empty and the text in text', () => {
    expect(validateAnswers([singleSelect()], [answer([], 'green')])).toEqual([
      { selected_labels: [], selected_values: [], text: 'green' },
    ]);
  });

  it('a requires_text option with its text keeps both the value and the text', () => {
    const [a] = validateAnswers([singleSelect()], [answer(['Custom'], 'teal')]);
    expect(a).toEqual({ selected_labels: ['Custom'], selected_values: ['custom'], text: 'teal' });
    // The typed text must survive into the rendering, not only the label.
    expect(renderAnswerText([singleSelect('')], [a!])).toContain('teal');
  });

  it('answer_count_mismatch when the number of answers differs from the number of sub-questions', () => {
    const few = errorOf(() => validateAnswers([singleSelect(), freeText()], [answer(['Red'])]));
    expect(few.code).toBe('answer_count_mismatch');
    expect(few.details).toMatchObject({ expected: 2, got: 1 });
    const many = errorOf(() => validateAnswers([freeText()], [answer([], 'a'), answer([], 'b')]));
    expect(many.code).toBe('answer_count_mismatch');
    expect(many.details).toMatchObject({ expected: 1, got: 2 });
  });

  it('invalid_input naming answers[i].selected_labels for a label that is not an option', () => {
    const err = errorOf(() =>
      validateAnswers([freeText(), multiSelect()], [answer([], 'ok'), answer(['TypeScript', 'Cobol'])]),
    );
    expect(err.code).toBe('invalid_input');
    expect(err.details).toMatchObject({ field: 'answers[1].selected_labels', index: 1 });
    expect(err.message).toContain('answers[1].selected_labels');
    expect(err.message).toContain('Cobol');
  });

  it('invalid_input for two labels on a single-select question', () => {
    const err = errorOf(() => validateAnswers([singleSelect()], [answer(['Red', 'Blue'])]));
    expect(err.code).toBe('invalid_input');
    expect(err.details).toMatchObject({ field: 'answers[0].selected_labels', index: 0 });
    expect(err.message).toContain('answers[0].selected_labels');
  });

  it('invalid_input naming answers[i].text when a free-text question gets no text (missing, null, or blank)', () => {
    for (const text of [null, undefined, '', '   ']) {
      const err = errorOf(() =>
        validateAnswers([singleSelect(), freeText()], [answer(['Red']), { selected_labels: [], text }]),
      );
      expect(err.code).toBe('invalid_input');
      expect(err.details).toMatchObject({ field: 'answers[1].text', index: 1 });
      expect(err.message).toContain('answers[1].text');
    }
  });

  it('invalid_input when a free-text question gets labels', () => {
    const err = errorOf(() => validateAnswers([freeText()], [answer(['Red'], 'x')]));
    expect(err.code).toBe('invalid_input');
    expect(err.details).toMatchObject({ field: 'answers[0].selected_labels' });
  });

  it('invalid_input naming answers[i].text when a requires_text option comes without text', () => {
    for (const text of [null, '  ']) {
      const err = errorOf(() => validateAnswers([singleSelect()], [answer(['Custom'], text)]));
      expect(err.code).toBe('invalid_input');
      expect(err.details).toMatchObject({ field: 'answers[0].text', index: 0 });
      expect(err.message).toContain('Custom');
    }
  });

  it('invalid_input when a choice question gets neither a label nor text', () => {
    const err = errorOf(() => validateAnswers([multiSelect()], [answer([], null)]));
    expect(err.code).toBe('invalid_input');
    expect(String(err.details.field)).toMatch(/^answers\[0\]\./);
  });
});
