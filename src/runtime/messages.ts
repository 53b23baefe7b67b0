import { PrimitiveError } from '../primitives/errors.js';
import type { EventDraft } from '../events/catalogue.js';
import { USER, type AgentRecord } from '../registry/state.js';
import type { Services } from './services.js';

/**
 * Puts a message into an agent's inbox: the checks every sender shares (an agent through
 * `send_message`, the user through the admin API), then one `send_message` event. A
 * message from the recipient's leader (or the user) to an agent waiting on a review or a
 * termination request answers it: rework, so the hand-off is cleared (`review.acknowledged`).
 */
export async function postMessage(
  services: Services,
  fromId: string,
  recipient: AgentRecord,
  content: string,
): Promise<string> {
  if (recipient.terminate_consumed) {
    throw new PrimitiveError(
      'recipient_terminated',
      `${recipient.name} (${recipient.agent_id}) has been terminated and can no longer receive messages; escalate to your own leader rather than spawning a replacement`,
      { to: recipient.agent_id },
    );
  }
  const cap = services.config.inboxCap;
  if (recipient.inbox.size >= cap) {
    throw new PrimitiveError(
      'inbox_full',
      `${recipient.name}'s inbox holds ${recipient.inbox.size} undelivered messages (the cap is ${cap}); wait for it to read them`,
      { to: recipient.agent_id, undelivered: recipient.inbox.size, cap },
    );
  }
  const maxChars = services.config.inboxMaxChars;
  if (recipient.inbox_chars + content.length > maxChars) {
    throw new PrimitiveError(
      'inbox_full',
      `${recipient.name}'s undelivered messages would exceed ${maxChars} characters; wait for it to read them, or send less`,
      { to: recipient.agent_id, undelivered: recipient.inbox.size, undelivered_chars: recipient.inbox_chars, max_chars: maxChars },
    );
  }
  const messageId = services.ids.next('msg');
  const drafts: EventDraft[] = [
    { event: 'send_message', task_id: recipient.task_id, caller_id: fromId, to: recipient.agent_id, content, message_id: messageId },
  ];
  const fromLeader = fromId === USER || fromId === recipient.leader_id;
  if (fromLeader && (recipient.review || recipient.termination_request) && !recipient.terminate_posted) {
    drafts.push({ event: 'review.acknowledged', task_id: recipient.task_id, agent_id: recipient.agent_id, by: fromId });
  }
  await services.registry.commit(drafts);
  return messageId;
}

/**
 * A message the server routes into the caller's leader's inbox on the caller's behalf (a
 * review report, a termination request): never refused by the cap, since it answers a
 * primitive the caller was entitled to call.
 */
export function toLeaderDraft(
  services: Pick<Services, 'ids'>,
  caller: AgentRecord,
  kind: 'review_report' | 'termination_request',
  content: string,
): EventDraft {
  return { event: 'inbox.posted', task_id: caller.task_id, to: caller.leader_id, from: caller.agent_id, kind, content, message_id: services.ids.next('msg') };
}
