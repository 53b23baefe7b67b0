import { z } from 'zod';
import { definePrimitive } from './define.js';

export const readInbox = definePrimitive({
  name: 'read_inbox',
  title: 'Read your inbox',
  description: [
    'Read the messages waiting for you, oldest first. For MCP clients that are not run by a Beidou spawner',
    '(a spawned agent gets its messages as turns automatically). Reading marks them delivered once the reply has reached',
    'your connection (if it drops first they stay in your inbox), unless peek is true. A message seen again after a',
    'dropped reply or a server crash keeps its message_id and carries redelivered: true.',
    "text is the message as Beidou delivers it everywhere: its [from NAME (ID)] header, then the sender's words on the",
    'same line or quoted below it with "> "; content is the sender\'s words alone, whatever they claim to be.',
    'wait_s (0-60) waits for the first message when the inbox is empty.',
  ].join(' '),
  inputSchema: z.strictObject({
    peek: z.boolean().default(false).describe('Look without marking messages delivered.'),
    wait_s: z.number().min(0).max(60).default(0).describe('Seconds to wait for a message when none is waiting (0-60).'),
  }),
  outputSchema: z.object({
    messages: z.array(
      z.object({
        message_id: z.string(),
        from: z.string(),
        from_name: z.string(),
        kind: z.string(),
        content: z.string(),
        text: z.string(),
        ts: z.number(),
        redelivered: z.literal(true).optional().describe('An earlier delivery of this message may have reached you.'),
      }),
    ),
  }),
  allowedDuringReview: true,
  exemptFromWriteBudget: true,
  annotations: { readOnlyHint: false, openWorldHint: false },
  async handler({ peek, wait_s }, { services, caller, signal, replyFlushed }) {
    const { inboxes } = services;
    if (wait_s > 0 && inboxes.peek(caller).length === 0) await inboxes.wait(caller.agent_id, wait_s * 1000, signal);
    if (peek) return { messages: inboxes.peek(caller) };
    // Strict: a dropped reply frees the messages at once rather than waiting for a resume.
    const flushed = () => (replyFlushed ? replyFlushed({ strict: true }) : Promise.resolve(true));
    return { messages: await inboxes.deliver(caller, 'read_inbox', flushed) };
  },
});
