import type { EventDraft } from '../events/catalogue.js';
import {
  BEIDOU,
  USER,
  type AgentRecord,
  type InboxKind,
  type InboxMessage,
  type RegistryState,
} from '../registry/state.js';
import type { DomainContext } from './context.js';
import { composedText, envelope, fromHeader, headerName, normaliseWords, reviewReport } from './envelope.js';
import { DomainError } from './errors.js';
import { assertContentSize, assertInboxRoom } from './limits.js';

/**
 * Inbox decisions. An inbox is `sent − delivered`: `send_message` (a peer or the user) and
 * `inbox.posted` (what the server routes: reports, questions, answers, pings) add a message;
 * `agent_input` takes it out, whichever path delivered it.
 */

/** The three ways a message reaches its agent; each commits the same `agent_input`. */
export type DeliveryPath = 'read_inbox' | 'spawner' | 'hook';

/** A message as an agent (or the admin) sees it. */
export interface DeliveredMessage {
  message_id: string;
  from: string;
  from_name: string;
  kind: InboxMessage['kind'];
  /** The sender's words (or the server's text), normalised (envelope.ts). */
  content: string;
  /** The message as every other path delivers it: the server's header, the sender's words set apart. */
  text: string;
  ts: number;
  /** Present (true) when an earlier delivery of this message may have reached the agent. */
  redelivered?: true;
}

/** Who sent it, for people and models: an agent's name, or `user` / `beidou` as they are. */
export function displayName(state: RegistryState, id: string): string {
  if (id === USER || id === BEIDOU) return id;
  return state.agents.get(id)?.name ?? id;
}

/** What an inbox holds, without a word of its contents: how many, from whom, the newest id. */
export interface InboxSummary {
  count: number;
  /** Senders in the order of their oldest waiting message. */
  senders: Array<{ agent_id: string; name: string; count: number }>;
  /** The newest waiting message, so a watcher can tell new mail from mail it already rang for. */
  latest: string | null;
}

export function inboxSummary(state: RegistryState, agent: Pick<AgentRecord, 'inbox'>): InboxSummary {
  const senders = new Map<string, { agent_id: string; name: string; count: number }>();
  let latest: string | null = null;
  for (const m of agent.inbox.values()) {
    const s = senders.get(m.from);
    if (s) s.count += 1;
    else senders.set(m.from, { agent_id: m.from, name: displayName(state, m.from), count: 1 });
    latest = m.message_id;
  }
  return { count: agent.inbox.size, senders: [...senders.values()], latest };
}

/** Why an inbox watcher has nothing more to wait for, or null while the agent can still get mail. */
export function inboxWatchEnd(
  state: RegistryState,
  agent: Pick<AgentRecord, 'task_id' | 'terminate_consumed'>,
): 'agent_terminated' | 'task_ended' | null {
  if (agent.terminate_consumed) return 'agent_terminated';
  const task = state.tasks.get(agent.task_id);
  return task && task.status !== 'running' ? 'task_ended' : null;
}

/**
 * The text an agent sees for a message, the same on every delivery path: the server's
 * `[from <name> (<agent_id>)]` header, then the sender's words set apart (envelope.ts:
 * `[from w (ag_1)] hello` for one plain line, else quoted below with `> `), after a
 * `[redelivered] ` prefix when an earlier delivery of it may have reached the agent. A review
 * report gets the server's `[REVIEW REQUIRED]` after the header; what the server composed
 * itself (questions, answers, termination requests, its own notices, each with any agent's
 * words already set apart) follows the header as it is, but for a later line that reads as
 * framing (which only content stored before the envelopes can hold): that one is quoted.
 */
export function deliveredText(
  state: RegistryState,
  message: Pick<InboxMessage, 'from' | 'kind' | 'content' | 'redelivered'>,
): string {
  const header = fromHeader(displayName(state, message.from), message.from);
  let text: string;
  if (message.kind === 'message' || message.kind === 'user') text = envelope(header, message.content);
  else if (message.kind === 'review_report') text = reviewReport(header, message.content);
  // Composed by the server; content stored before the envelopes existed may carry an agent's lines raw.
  else text = `${header} ${composedText(message.content)}`;
  return message.redelivered ? `[redelivered] ${text}` : text;
}

/**
 * The wake-up notice for a message that has arrived (`notifications/claude/channel`): who it
 * is from and how to read it, never the words. Claude Code sets a channel's content inside
 * its own `<channel …>` tags, where a sender's `</channel>` or `<…>` would read as Claude
 * Code's markup; the message itself reaches the agent, set apart, through a delivery path.
 */
export function arrivalNotice(state: RegistryState, message: Pick<InboxMessage, 'from' | 'message_id'>): string {
  const ref = message.message_id.replace(/[^\w.:-]/g, '').slice(0, 48);
  return `[Beidou] 1 new message from ${headerName(displayName(state, message.from))} (${headerName(message.from)}): it arrives as your next turn, or call mcp__beidou__read_inbox to read it (ref ${ref})`;
}

export function deliveredView(state: RegistryState, message: InboxMessage): DeliveredMessage {
  return {
    message_id: message.message_id,
    from: message.from,
    from_name: displayName(state, message.from),
    kind: message.kind,
    content: normaliseWords(message.content),
    text: deliveredText(state, message),
    ts: message.ts,
    ...(message.redelivered ? { redelivered: true as const } : {}),
  };
}

/**
 * A message the server routes into an inbox, not refused by the caps: answers handed to an
 * asker and the server's own pings and escalations. What it writes on an agent's behalf goes
 * through `toLeaderDraft` or checks `assertInboxRoom` first.
 */
export function inboxPosted(
  ctx: Pick<DomainContext, 'ids'>,
  to: Pick<AgentRecord, 'agent_id' | 'task_id'>,
  from: string,
  kind: Exclude<InboxKind, 'message' | 'user'>,
  content: string,
): EventDraft {
  return {
    event: 'inbox.posted',
    task_id: to.task_id,
    to: to.agent_id,
    from,
    kind,
    content,
    message_id: ctx.ids.next('msg'),
  };
}

/**
 * A message into `recipient`'s inbox from a peer or the user. From the recipient's leader
 * (or the user) to an agent waiting on a review or a termination request, it is the answer:
 * rework, so the hand-off is cleared (`review.acknowledged`) — unless the agent is already
 * on its way out.
 */
export function messageDrafts(
  ctx: Pick<DomainContext, 'ids'>,
  fromId: string,
  recipient: AgentRecord,
  content: string,
  messageId: string = ctx.ids.next('msg'),
): EventDraft[] {
  const drafts: EventDraft[] = [
    {
      event: 'send_message',
      task_id: recipient.task_id,
      caller_id: fromId,
      to: recipient.agent_id,
      content,
      message_id: messageId,
    },
  ];
  const fromLeader = fromId === USER || fromId === recipient.leader_id;
  if (fromLeader && (recipient.review || recipient.termination_request) && !recipient.terminate_posted) {
    drafts.push({ event: 'review.acknowledged', task_id: recipient.task_id, agent_id: recipient.agent_id, by: fromId });
  }
  return drafts;
}

/**
 * The checks every sender shares (an agent through `send_message`, the user through the
 * admin API), then the message. Refuses oversized content, a terminated recipient and a full inbox.
 */
export function postMessage(
  ctx: DomainContext,
  fromId: string,
  recipient: AgentRecord,
  content: string,
): { messageId: string; drafts: EventDraft[] } {
  assertContentSize(ctx.config, 'content', content);
  if (recipient.terminate_consumed) {
    throw new DomainError(
      'recipient_terminated',
      `${recipient.name} (${recipient.agent_id}) has been terminated and can no longer receive messages; escalate to your own leader rather than spawning a replacement`,
      { to: recipient.agent_id },
    );
  }
  assertInboxRoom(ctx, recipient, content);
  const messageId = ctx.ids.next('msg');
  return { messageId, drafts: messageDrafts(ctx, fromId, recipient, content, messageId) };
}

/**
 * What the server routes into the caller's leader's inbox on the caller's behalf (a review
 * report, a termination request). It counts against the leader's inbox caps like any
 * message the caller could have sent (`inbox_full`); `replacing` are earlier messages the
 * same commit withdraws.
 */
export function toLeaderDraft(
  ctx: Pick<DomainContext, 'ids' | 'state' | 'config'>,
  caller: AgentRecord,
  kind: 'review_report' | 'termination_request',
  content: string,
  replacing: readonly InboxMessage[] = [],
): EventDraft {
  const leader = ctx.state.agents.get(caller.leader_id);
  if (leader) assertInboxRoom(ctx, leader, content, replacing);
  return inboxPosted(ctx, { agent_id: caller.leader_id, task_id: caller.task_id }, caller.agent_id, kind, content);
}

/**
 * The caller's review reports still waiting in its leader's inbox, which a new report
 * replaces (`inbox.withdrawn`), so the leader sees one report per child. `undelivered`, when
 * given, narrows them to what no delivery has taken in hand (a spawner push in flight).
 */
export function pendingReports(
  state: RegistryState,
  caller: AgentRecord,
  undelivered?: ReadonlySet<string>,
): InboxMessage[] {
  const leader = state.agents.get(caller.leader_id);
  if (!leader) return [];
  return [...leader.inbox.values()].filter(
    (m) => m.kind === 'review_report' && m.from === caller.agent_id && (!undelivered || undelivered.has(m.message_id)),
  );
}

export function withdrawnDrafts(
  leader: Pick<AgentRecord, 'agent_id' | 'task_id'>,
  messages: readonly InboxMessage[],
): EventDraft[] {
  return messages.map((m) => ({
    event: 'inbox.withdrawn' as const,
    task_id: leader.task_id,
    to: leader.agent_id,
    from: m.from,
    message_id: m.message_id,
    reason: 'replaced' as const,
  }));
}

/**
 * A delivery begins: the messages go out in a reply not yet flushed. Committed (durable)
 * before the reply; `deliveryDrafts` follows the flush. Replayed alone, it leaves them in
 * the inbox marked `redelivered`.
 */
export function deliveringDraft(
  agent: AgentRecord,
  messages: readonly InboxMessage[],
  via: 'read_inbox' | 'hook',
): EventDraft {
  return {
    event: 'delivering',
    task_id: agent.task_id,
    caller_id: agent.agent_id,
    message_ids: messages.map((m) => m.message_id),
    via,
  };
}

/** Delivering messages: one `agent_input` each, which takes it out of the inbox. */
export function deliveryDrafts(agent: AgentRecord, messages: readonly InboxMessage[], via: DeliveryPath): EventDraft[] {
  return messages.map((m) => ({
    event: 'agent_input' as const,
    task_id: agent.task_id,
    caller_id: agent.agent_id,
    from: m.from,
    message_kind: m.kind === 'message' || m.kind === 'user' ? ('user' as const) : ('system' as const),
    source: 'queue' as const,
    content: m.content,
    message_id: m.message_id,
    via,
  }));
}
