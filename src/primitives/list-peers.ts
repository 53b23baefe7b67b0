import { z } from 'zod';
import { peersOf, peerView } from '../registry/queries.js';
import { definePrimitive } from './define.js';

const peerSchema = z.object({
  agent_id: z.string(),
  role: z.string().nullable(),
  team_id: z.string().nullable(),
  status: z.string(),
  is_leader_of: z.array(z.string()),
  name: z.string().nullable(),
});

export const listPeers = definePrimitive({
  name: 'list_peers',
  title: 'List peers',
  description: [
    'List agents of your task. scope "team" (default): your teammates and your team\'s leader;',
    '"children": members of the teams you lead; "all": every agent of the task, you included.',
    'Each peer has agent_id (use it with send_message), name (display only), role, team_id, status',
    '(pending_launch, active, terminating, terminated) and is_leader_of. Read-only.',
  ].join(' '),
  inputSchema: z.strictObject({
    scope: z.enum(['team', 'children', 'all']).default('team').describe('team (default), children or all.'),
  }),
  outputSchema: z.object({ peers: z.array(peerSchema) }),
  allowedDuringReview: true,
  annotations: { readOnlyHint: true, openWorldHint: false },
  async handler({ scope }, { services, caller }) {
    return { peers: peersOf(services.registry.state, caller, scope).map(peerView) };
  },
});
