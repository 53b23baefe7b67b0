import { z } from 'zod';
import { DomainError, invalidInput } from '../domain/errors.js';
import { postMessage } from '../domain/messages.js';
import { definePrimitive } from './define.js';
import { nameField } from './fields.js';

export const sendMessage = definePrimitive({
  name: 'send_message',
  title: 'Send a message',
  description: [
    'Send a message to another agent of your task; it lands in their inbox and reaches them as their next turn.',
    'Use list_peers to find agent ids. Non-blocking: returns once the message is stored.',
    'A message from a leader to a child that signalled review also acknowledges the review (rework).',
    'Errors: unknown_recipient (no such agent in your task),',
    'recipient_terminated (it was terminated; escalate to your own leader instead of replacing it),',
    'inbox_full (it has too many unread messages or characters, BEIDOU_INBOX_CAP / BEIDOU_INBOX_MAX_CHARS; wait and retry),',
    'content_too_large (content is over BEIDOU_MAX_CONTENT_CHARS characters; details.field, max, setting).',
  ].join(' '),
  inputSchema: z.strictObject({
    to: nameField().describe("Recipient's agent id (same task)."),
    content: z.string().min(1, 'must not be empty').describe('Message body; include enough context to act on it.'),
  }),
  outputSchema: z.object({
    delivered: z.literal(true),
    message_id: z.string(),
  }),
  allowedDuringReview: true,
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  async handler({ to, content }, { services, caller }) {
    if (to === caller.agent_id) throw invalidInput('to', 'you cannot send a message to yourself');
    const recipient = services.registry.agent(to);
    // An agent of another task is answered as one that does not exist: another answer would
    // tell an agent which ids exist in tasks that are not its own.
    if (!recipient || recipient.task_id !== caller.task_id) {
      throw new DomainError('unknown_recipient', `no agent ${to} in your task; use list_peers to find agent ids`, {
        to,
      });
    }
    const { messageId, drafts } = postMessage(services.domain, caller.agent_id, recipient, content);
    await services.registry.commit(drafts, { writer: caller.agent_id });
    return { delivered: true as const, message_id: messageId };
  },
});
