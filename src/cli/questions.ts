import { printableBlock, printableLine } from '../util/text.js';
import { api, CliError, flagsFrom, printJson, type ClientOptions, type FlagOf } from './client.js';

interface PendingQuestion {
  qid: string;
  task_id: string;
  asker_agent_id: string;
  origin: string;
  questions: Array<{
    question: string;
    header: string;
    multiSelect: boolean;
    options: Array<{ label: string; description: string; requires_text?: boolean }>;
  }>;
  context: string | null;
  chain: string[];
  created_at: number;
}

/** `beidou questions [--json]`: the questions waiting for the user. */
export async function questions(opts: ClientOptions & { json?: boolean }): Promise<void> {
  const pending = await api<PendingQuestion[]>(opts, 'GET', '/questions/pending');
  if (opts.json) {
    process.stdout.write(`${JSON.stringify(pending)}\n`);
    return;
  }
  if (pending.length === 0) {
    process.stdout.write('no questions are waiting for you\n');
    return;
  }
  const out: string[] = [];
  for (const q of pending) {
    out.push(`${q.qid}  task ${q.task_id}  from ${q.asker_agent_id}  (${q.origin}, via ${q.chain.join(' -> ')})`);
    // The asker's words: no escape sequence or control, every further line of them marked `| `.
    if (q.context) out.push(`  context: ${printableBlock(q.context, '    | ')}`);
    q.questions.forEach((item, i) => {
      const header = item.header ? `[${printableLine(item.header)}] ` : '';
      out.push(`  ${i + 1}. ${header}${printableBlock(item.question, '     | ')}`);
      if (item.options.length === 0) out.push('     (free text: --text "...")');
      for (const o of item.options)
        out.push(
          `     - ${printableLine(o.label)}: ${printableBlock(o.description, '       | ')}${o.requires_text ? ' (needs --text)' : ''}`,
        );
      if (item.multiSelect) out.push('     (choose any number)');
    });
    out.push('');
  }
  out.push('answer with: beidou answer QID --choose LABEL [--choose LABEL] [--text "..."]   (one sub-question)');
  out.push('         or: beidou answer QID --answers \'[{"selected_labels":["A"],"text":null}, ...]\'');
  process.stdout.write(`${out.join('\n')}\n`);
}

export interface AnswerOptions extends ClientOptions {
  choose?: string[];
  text?: string;
  answers?: string;
}

/** `beidou answer QID`: answers a question as the user. */
export async function answer(qid: string, opts: AnswerOptions): Promise<void> {
  let answers: unknown;
  if (opts.answers) {
    if (opts.choose?.length || opts.text)
      throw new CliError('give either --answers JSON, or --choose/--text, not both', 2);
    try {
      answers = JSON.parse(opts.answers);
    } catch {
      throw new CliError('--answers must be a JSON array of {selected_labels, text}', 2);
    }
  } else {
    if (!opts.choose?.length && !opts.text)
      throw new CliError('say what to answer: --choose LABEL and/or --text "..." (or --answers JSON)', 2);
    answers = [{ selected_labels: opts.choose ?? [], text: opts.text ?? null }];
  }
  try {
    await api(
      opts,
      'POST',
      `/questions/${encodeURIComponent(qid)}/answer`,
      { answers },
      opts.answers ? inAnswersJson : fromAnswerFlags,
    );
  } catch (err) {
    if (err instanceof CliError && err.code === 'answer_count_mismatch' && !opts.answers) {
      throw new CliError(
        `${err.message}; --choose/--text answer one sub-question: give them all with --answers JSON`,
        1,
        err.code,
      );
    }
    throw err;
  }
  process.stdout.write(`answered ${qid}\n`);
}

/** `--choose`/`--text` fill the one answer's `selected_labels` and `text`. */
const fromAnswerFlags: FlagOf = (field) => {
  const m = /^answers\[\d+\]\.(selected_labels|text)$/.exec(field);
  if (m) return m[1] === 'text' ? '--text' : '--choose';
  return field === 'answers' ? '--choose/--text' : undefined;
};

/** `--answers` is the request's array as typed: the field is named inside it. */
const inAnswersJson: FlagOf = (field) => (field.startsWith('answers') ? `--answers (${field})` : undefined);

export interface DeclineOptions extends ClientOptions {
  reason?: string;
  json?: boolean;
}

/** `beidou decline QID --reason TEXT`: the user will not answer; the asker's ask_user fails with user_declined. */
export async function decline(qid: string, opts: DeclineOptions): Promise<void> {
  if (opts.reason === undefined) throw new CliError('say why: --reason "..." (the asking agent reads it)', 2);
  await api(
    opts,
    'POST',
    `/questions/${encodeURIComponent(qid)}/decline`,
    { reason: opts.reason },
    flagsFrom({ reason: '--reason' }),
  );
  if (opts.json) printJson({ ok: true, qid });
  else process.stdout.write(`declined ${qid}\n`);
}
