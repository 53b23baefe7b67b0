import type { EventName, StoredEvent } from '../events/catalogue.js';
import { describeEvent, type Namer } from '../events/describe.js';
import { plural, usd } from '../util/text.js';

/**
 * The demo's story: a task's events told as `+1.2s  writer-3893 → root-b3b3: question #1 …`,
 * one sentence each from `describeEvent`, agents by name and questions as `#1`, `#2`, with
 * the noise left out (launch bookkeeping, deliveries, what another line already says) and a
 * run of terminations told as one line. Fed one event at a time, in `seq` order, so it can
 * be printed as the task runs.
 */

/** Bookkeeping a person watching the team does not need: launches, deliveries, usage, checks. */
const NOISE: ReadonlySet<EventName> = new Set<EventName>([
  'launch.requested',
  'launch.assigned',
  'agent_started',
  'spawner.spooled',
  'agent_input',
  'delivering',
  'liveness_check',
  'task_spawned',
  'turn.usage',
  'tool_called',
  'tool_result',
  'run.cost',
  'agent_completed',
  'strikes.reset',
  // The approval, the root's Approve or the task's end says it; `terminate.consumed` tells who stopped.
  'terminate.posted',
]);

/** Inbox posts that repeat a line of the story: a review's report (its status), a question, an answer. */
const REPEATED_POSTS = new Set(['review_report', 'termination_request', 'question', 'answer']);

/** The scripted agent's end-of-turn markers (examples/scripted-agent.mjs): a clean turn, not something it says. */
const TURN_MARKER = /^(step \d+ done|script done|handled \S+)$/;

export interface StoryOptions {
  /** Events to tell although they are noise for the plain demo (the chaos demo tells relaunches). */
  alsoTell?: readonly EventName[];
}

export class Story {
  private readonly names = new Map<string, string>();
  private readonly questions = new Map<string, string>();
  private readonly noise: ReadonlySet<EventName>;
  private startTs: number | null = null;
  /** Terminations seen in a row, told as one line once something else happens. */
  private terminated: { ts: number; ids: string[] } | null = null;
  /** The task's creation, told once the next event (the root's agent_spawned) has named its root. */
  private created: StoredEvent | null = null;
  readonly name: Namer = (id) => (id === null ? '-' : (this.names.get(id) ?? this.questions.get(id) ?? id));

  constructor(options: StoryOptions = {}) {
    const also = new Set(options.alsoTell ?? []);
    this.noise = new Set([...NOISE].filter((n) => !also.has(n)));
  }

  /** The lines this event adds to the story (often none). */
  add(e: StoredEvent): string[] {
    this.startTs ??= e.ts;
    if (e.event === 'agent_spawned') this.names.set(e.agent_id, e.name);
    if (e.event === 'question_asked') this.questions.set(e.qid, `#${this.questions.size + 1}`);
    const created = this.created ? [this.line(this.created.ts, describeEvent(this.created, this.name))] : [];
    this.created = e.event === 'task_created' ? e : null;
    if (!this.tells(e) || e.event === 'task_created') return created;
    if (e.event === 'terminate.consumed') {
      if (this.terminated) this.terminated.ids.push(e.agent_id);
      else this.terminated = { ts: e.ts, ids: [e.agent_id] };
      return created;
    }
    return [...created, ...this.terminations(), this.line(e.ts, describeEvent(e, this.name))];
  }

  /** Whatever is still held back (the task's creation, a run of terminations). */
  end(): string[] {
    const created = this.created ? [this.line(this.created.ts, describeEvent(this.created, this.name))] : [];
    this.created = null;
    return [...created, ...this.terminations()];
  }

  private terminations(): string[] {
    const group = this.terminated;
    if (!group) return [];
    this.terminated = null;
    const who = group.ids.map(this.name);
    const names = who.length === 1 ? who[0]! : `${who.slice(0, -1).join(', ')} and ${who.at(-1)}`;
    return [this.line(group.ts, `${names} ${who.length === 1 ? 'is' : 'are'} terminated`)];
  }

  private tells(e: StoredEvent): boolean {
    if (this.noise.has(e.event)) return false;
    switch (e.event) {
      case 'agent_spawned':
        return e.leader_id !== 'user'; // the root: the task's creation says it
      case 'inbox.posted':
        return !REPEATED_POSTS.has(e.kind);
      case 'assistant_text':
        return !TURN_MARKER.test(e.text);
      case 'completion.reported':
        return e.via !== 'user_gateway'; // the user's answer to the root review says it
      default:
        return true;
    }
  }

  private line(ts: number, sentence: string): string {
    return `${`+${(ts - (this.startTs ?? ts)).toFixed(1)}s`.padStart(7)}  ${sentence}`;
  }
}

/** What the task's API detail says about cost (server/views.ts `taskDetail().stats`). */
export interface CostStats {
  cost_usd: number;
  input_tokens: number;
  output_tokens: number;
}

/** The end of the story: who took part, what they said and asked, what it cost and how long it took. */
export function summaryLines(events: readonly StoredEvent[], stats: CostStats): string[] {
  const of = <N extends EventName>(n: N) =>
    events.filter((e): e is Extract<StoredEvent, { event: N }> => e.event === n);
  const first = events[0];
  const ended = of('task_ended')[0];
  const seconds = first && events.length ? (events.at(-1)!.ts - first.ts).toFixed(1) : '0';
  const agents = of('agent_spawned').map(
    (e) => `${e.name}${e.role ? ` (${e.role})` : e.leader_id === 'user' ? ' (root)' : ''}`,
  );
  const reviews = of('status').filter((e) => e.state === 'review_pending').length;
  const reworks =
    of('review.acknowledged').length + of('completion.reported').filter((e) => e.decision === 'rework').length;
  const answers = of('question_answered');
  const byUser = answers.filter((e) => e.by === 'user').length;
  const messages = of('send_message');
  const fromUser = messages.filter((e) => e.caller_id === 'user').length;
  return [
    `  task       ${ended ? `${ended.status} (${ended.reason.replace(/_/g, ' ')})` : 'not ended'} after ${seconds} s and ${plural(events.length, 'event')}`,
    `  agents     ${agents.length}: ${agents.join(', ')}`,
    `  messages   ${messages.length}${fromUser ? ` (${fromUser} from the user)` : ''} sent with send_message; ${plural(reviews, 'hand-off')} for review, ${reworks} sent back for rework`,
    `  questions  ${of('question_asked').length}: ${answers.length - byUser} answered by a leader, ${byUser} by the user${of('question_declined').length ? `, ${of('question_declined').length} declined` : ''}`,
    `  cost       ${usd(stats.cost_usd)}, ${stats.input_tokens} tokens in, ${stats.output_tokens} out${stats.cost_usd === 0 ? ' (scripted agents call no model)' : ''}`,
  ];
}
