import { z } from 'zod';
import { definePrimitive } from './define.js';

export const readInbox = definePrimitive({
  name: 'read_inbox',
  title: 'Read your inbox',
  description: [
    'Read the messages waiting for you, oldest first. For MCP clients that are not run by a Beidou spawner',
    '(a spawned agent gets its messages as turns automatically). Each message is delivered exactly once:',
    'reading marks them delivered unless peek is true. wait_s (0-60) waits for the first message when the inbox is empty.',
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
        ts: z.number(),
      }),
    ),
  }),
  allowedDuringReview: true,
  annotations: { readOnlyHint: false, openWorldHint: false },
  async handler({ peek, wait_s }, { services, caller, signal }) {
    const { inboxes } = services;
    if (wait_s > 0 && inboxes.peek(caller).length === 0) await inboxes.wait(caller.agent_id, wait_s * 1000, signal);
    return { messages: peek ? inboxes.peek(caller) : await inboxes.take(caller, 'read_inbox') };
  },
});
