import { excerpt, plural, usd } from '../util/text.js';
import type { EventName, StoredEvent } from './catalogue.js';

/**
 * One readable sentence per event (`leader-1 → worker-2: message (84 chars) "…"`), for
 * people watching a task (`beidou tail`, the demo's story). Pure: the caller says how an id
 * is shown (`name`): an agent by its display name; a question id as itself (`beidou tail`,
 * where it is what `beidou answer` takes) or as a short label (`#1`, the demo). Every event
 * of the catalogue has one (the mapped type makes a new event without a sentence a compile
 * error).
 */
export type Namer = (id: string | null) => string;

type Of<N extends EventName> = Extract<StoredEvent, { event: N }>;
type Sentences = { [N in EventName]: (e: Of<N>, name: Namer) => string };

const quoted = (text: string, max = 60) => `"${excerpt(text, max)}"`;
const chars = (text: string) => plural([...text].length, 'char');
const reasonOf = (text: string | null) => (text ? ` (${excerpt(text, 80)})` : '');

/** `Formal or Casual`, `A, B or C`. */
const oneOf = (labels: string[], word: string) =>
  labels.length < 2 ? labels.join('') : `${labels.slice(0, -1).join(', ')} ${word} ${labels.at(-1)}`;

/** A question as asked: each sub-question's header, text and what the answer may be. */
function askedOf(questions: Of<'question_asked'>['questions']): string {
  return questions
    .map((q) => {
      const labels = q.options.map((o) => (o.requires_text ? `${o.label} with text` : o.label));
      const choice =
        labels.length === 0
          ? 'free text'
          : q.multiSelect
            ? `choose any of ${oneOf(labels, 'and')}`
            : `choose ${oneOf(labels, 'or')}`;
      return `[${q.header}] ${quoted(q.question)} (${choice})`;
    })
    .join('; ');
}

/** Who answered: an agent holding the question (a leader), or the user, who answers at the gateway. */
const answererOf = (by: string, n: Namer) => (by === 'user' ? 'user (at the gateway)' : n(by));

/** What an agent's status change says: a hand-off for review, a request to stop, or the new state. */
function statusOf(e: Of<'status'>, n: Namer): string {
  const detail = e.detail ? ` ${quoted(e.detail, 80)}` : '';
  if (e.state === 'review_pending') return `${n(e.agent_id)} hands its work in for review:${detail}`;
  if (e.state === 'termination_requested') return `${n(e.agent_id)} asks to be terminated:${detail}`;
  return `${n(e.agent_id)}: ${e.state.replace(/_/g, ' ')}${detail}`;
}

const SENTENCES: Sentences = {
  task_created: (e, n) =>
    `user started the task with ${n(e.root_agent_id)} as its root (skill ${e.skill}): ${quoted(e.text)}`,
  task_ended: (e) => `the task ended: ${e.status}${reasonOf(e.reason)}`,
  agent_spawned: (e, n) =>
    `${n(e.leader_id)} → ${e.name}: spawned${e.role ? ` as ${e.role}` : ''} (skill ${e.skill}${e.plan_task_id ? `, plan task ${e.plan_task_id}` : ''})`,
  'launch.requested': (e, n) => `${n(e.agent_id)}: launch queued for a spawner`,
  team_created: (e, n) => `${n(e.leader_id)} created team ${e.name} (depth ${e.depth}, via ${e.via})`,
  'depth.warning': (e) => `team ${e.team_id} is ${e.depth} deep (the limit is ${e.max_depth})`,
  send_message: (e, n) => `${n(e.caller_id)} → ${n(e.to)}: message (${chars(e.content)}) ${quoted(e.content)}`,
  agent_input: (e, n) =>
    `${n(e.caller_id)} received ${e.message_kind === 'initial' ? 'its first message' : `a message from ${n(e.from)}`} (via ${e.via})`,
  delivering: (e, n) => `${n(e.caller_id)}: handing over ${plural(e.message_ids.length, 'message')} (via ${e.via})`,
  'terminate.posted': (e, n) => `${n(e.caller_id)} → ${n(e.agent_id)}: terminate (${e.reason})`,
  'terminate.consumed': (e, n) => `${n(e.agent_id)} is terminated (via ${e.via})`,
  'inbox.posted': (e, n) =>
    `${n(e.from)} → ${n(e.to)}: ${e.kind.replace(/_/g, ' ')} (${chars(e.content)}) ${quoted(e.content)}`,
  'inbox.withdrawn': (e, n) => `${n(e.from)} → ${n(e.to)}: an unread message withdrawn (${e.reason})`,
  plan_declared: (e, n) => {
    const ready = e.tasks.filter((t) => t.status === 'ready').length;
    return `${n(e.owner_agent_id)} declared a plan of ${plural(e.tasks.length, 'task')} (${ready} ready): ${e.tasks.map((t) => t.id).join(', ')}`;
  },
  plan_removed: (e, n) => `${n(e.owner_agent_id)} removed plan ${e.plan_id}`,
  task_ready: (e) => `plan task ${e.plan_task_id} is ready`,
  task_spawned: (e, n) => `plan task ${e.plan_task_id} went to ${n(e.agent_id)}`,
  task_done: (e) => `plan task ${e.plan_task_id} is done`,
  task_failed: (e) => `plan task ${e.plan_task_id} failed${reasonOf(e.reason)}`,
  status: statusOf,
  liveness_check: (e, n) =>
    `${n(e.agent_id)}: liveness check${e.all_done === null ? '' : e.all_done ? ' (team all done)' : ' (team still working)'}`,
  'review.acknowledged': (e, n) => `${n(e.by)} answered ${n(e.agent_id)}'s hand-off with more work`,
  'completion.approved': (e, n) => `${n(e.leader_id)} approved ${n(e.agent_id)}'s hand-off`,
  'terminate.forced': (e, n) => `${n(e.caller_id)} → ${n(e.agent_id)}: forced terminate (${e.reason})`,
  'review_gate.denied': (e, n) =>
    `${n(e.caller_id)}: ${e.tool_name} refused while ${e.pending_child_ids.map(n).join(', ')} wait${e.pending_child_ids.length === 1 ? 's' : ''} for review`,
  'completion.reping': (e, n) =>
    `beidou → ${n(e.leader_id)}: reminder ${e.ping_count} of ${n(e.agent_id)}'s pending ${e.pending}`,
  'review.escalated_to_user': (e, n) =>
    `beidou → user: ${n(e.agent_id)}'s ${e.pending} escalated, ${n(e.leader_id)} did not answer${e.qid ? ` (question ${n(e.qid)})` : ''}`,
  'liveness.nudge': (e, n) => `beidou → ${n(e.agent_id)}: nudge ${e.nudge_count} after ${Math.round(e.idle_s)} s idle`,
  'liveness.escalated_to_user': (e, n) =>
    `beidou → user: ${n(e.agent_id)} idle for ${Math.round(e.idle_s)} s${e.qid ? ` (question ${n(e.qid)})` : ''}`,
  'watchdog.exception': (e) => `the watchdog's ${e.pass} pass failed: ${excerpt(e.message, 80)}`,
  question_asked: (e, n) => `${n(e.asker)} → ${n(e.holder ?? 'user')}: question ${n(e.qid)} ${askedOf(e.questions)}`,
  question_escalated: (e, n) =>
    `${n(e.by)} → ${n(e.new_holder ?? 'user')}: escalated question ${n(e.qid)}${reasonOf(e.reason)}`,
  question_answered: (e, n) =>
    `${answererOf(e.by, n)} → ${n(e.asker)}: answered question ${n(e.qid)} ${quoted(e.answer_text)}${reasonOf(e.reason)}`,
  question_declined: (e, n) =>
    `user (at the gateway) → ${n(e.asker)}: declined question ${n(e.qid)}${reasonOf(e.reason)}`,
  'completion.reported': (e, n) =>
    `${n(e.agent_id)} → ${n(e.leader_id)}: hand-off reported (via ${e.via}${e.decision ? `, ${e.decision}` : ''})`,
  'completion.empty': (e, n) => `${n(e.agent_id)} → ${n(e.leader_id)}: an empty hand-off${reasonOf(e.reason)}`,
  'launch.assigned': (e, n) => `spawner ${e.spawner_id} took ${n(e.agent_id)}${e.resume ? ' (to resume it)' : ''}`,
  'spawner.lost': (e, n) =>
    `spawner ${e.spawner_id} was lost; ${e.agent_ids.length ? `${e.agent_ids.map(n).join(', ')} wait${e.agent_ids.length === 1 ? 's' : ''} for another` : 'it ran no agent'}`,
  'spawner.spooled': (e) => `spawner ${e.spawner_id} delivered spooled reports up to ${e.spool_seq}`,
  'agent.tokens_revoked': (e, n) =>
    `user: ${n(e.agent_id)}'s tokens revoked${e.spawner_id ? `; spawner ${e.spawner_id} restarts it with a fresh one` : ''}`,
  'spawner_tokens.revoked': () => 'user: every spawner token minted so far revoked',
  agent_started: (e, n) => `${n(e.agent_id)} ${e.resumed ? 'resumed' : 'started'} on spawner ${e.spawner_id}`,
  'turn.usage': (e, n) =>
    `${n(e.caller_id)}: ${e.input_tokens} tokens in, ${e.output_tokens} out${e.model ? ` (${e.model})` : ''}`,
  assistant_text: (e, n) => `${n(e.caller_id)} says ${quoted(e.text)}`,
  tool_called: (e, n) => `${n(e.caller_id)} calls ${e.name}`,
  tool_result: (e, n) =>
    `${n(e.caller_id)}: tool result in ${Math.round(e.duration_ms)} ms${e.is_error ? `, an error${e.error_reason ? ` (${e.error_reason})` : ''}` : ''}`,
  'run.cost': (e, n) => `${n(e.agent_id)}: a run of ${plural(e.num_turns, 'turn')} cost ${usd(e.total_cost_usd)}`,
  agent_error: (e, n) => `${n(e.caller_id)} failed${e.reason ? ` [${e.reason}]` : ''}: ${excerpt(e.msg, 80)}`,
  agent_crashed: (e, n) => `${n(e.caller_id)} crashed (strike ${e.strike_count}): ${excerpt(e.msg, 80)}`,
  agent_completed: (e, n) =>
    `${n(e.agent_id)}'s process ended (${e.stop_reason.replace(/_/g, ' ')}${e.terminated ? ', terminated' : ''})`,
  contract_violation: (e, n) =>
    `${n(e.agent_id)} stopped without handing off (strike ${e.strike_count}; ${e.action.replace(/_/g, ' ')})`,
  'strikes.reset': (e, n) => `${n(e.agent_id)}: strikes reset after a clean turn`,
  root_crash_escalation: (e, n) => `beidou → user: the root ${n(e.agent_id)} crashed ${e.crash_strikes} times`,
  config_warning: (e, n) => `${n(e.agent_id)}: skill ${e.skill}: ${excerpt(e.warning, 80)}`,
  'ask_user_question.redirected': (e, n) => `${n(e.caller_id)}: AskUserQuestion redirected to ask_user`,
  'disallowed_alias.denied': (e, n) => `${n(e.caller_id)}: ${e.tool_name} refused (not available here)`,
};

/** The sentence for one event; an event this version does not know is shown by its name. */
export function describeEvent(e: StoredEvent, name: Namer): string {
  const sentence = (SENTENCES as Record<string, ((e: StoredEvent, name: Namer) => string) | undefined>)[e.event];
  return sentence ? sentence(e, name) : `${e.event} (seq ${e.seq})`;
}
