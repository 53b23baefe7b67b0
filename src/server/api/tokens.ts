import { Router, type Request } from 'express';
import { z } from 'zod';
import { agentTokensRevoked, spawnerTokensRevoked } from '../../domain/revocation.js';
import { SYSTEM_LOG } from '../../events/catalogue.js';
import { nameField } from '../../primitives/fields.js';
import type { AgentRecord } from '../../registry/state.js';
import type { Services } from '../../runtime/services.js';
import type { Authenticator } from '../http/auth.js';
import { thenBody } from '../http/body.js';
import { ApiError, parseOr400 } from '../http/errors.js';

/**
 * The admin routes that mint and revoke tokens (docs/api.md, "Tokens"): an agent's token
 * (optionally revoking the ones before it), the revocation of an agent's tokens, spawner
 * tokens (optionally limited to some tasks) and the revocation of every spawner token. A
 * revocation is an event, so it holds across restarts and on every replica.
 */

/** A JWT travels in a header: 100 task ids keep a limited token well under the 16 KiB Node allows. */
const MAX_TOKEN_TASKS = 100;

const agentTokenBody = z.strictObject({ revoke_previous: z.boolean().default(false) });
const emptyBody = z.strictObject({});
const spawnerTokenBody = z.strictObject({
  task_ids: z
    .array(nameField())
    .min(1, 'must name at least one task (leave task_ids out for a token that takes any task)')
    .max(MAX_TOKEN_TASKS, `must name at most ${MAX_TOKEN_TASKS} tasks`)
    .optional(),
});

export function tokensApi(services: Services, auth: Authenticator): Router {
  const { registry, tokens, ids, clock } = services;
  const api = Router();
  const admin = thenBody(auth.require('admin'));

  /** A registered agent whose tokens can work: not terminated, not of a quarantined task. */
  const liveAgent = (req: Request, what: string): AgentRecord => {
    const id = String(req.params.id ?? '');
    const agent = registry.agent(id);
    // An archived task's agents are all terminated.
    if (registry.archivedAgents.has(id) || agent?.terminate_consumed)
      throw new ApiError(409, 'agent_terminated', `agent ${id} has been terminated; ${what}`);
    if (agent) return agent;
    const q = registry.quarantineOf('agents', id);
    if (q)
      throw new ApiError(409, 'task_quarantined', `task ${q.task_id} is quarantined; repair it with beidou doctor`, {
        task_id: q.task_id,
      });
    throw new ApiError(404, 'unknown_agent', `no agent ${id}`);
  };

  /** Revokes every token of the agent minted until now; the event, once committed. */
  const revokeAgent = async (agent: AgentRecord) => {
    const draft = agentTokensRevoked(agent, clock.now());
    await registry.commit([draft]);
    return draft;
  };

  api.post('/agents/:id/token', admin, async (req, res) => {
    const { revoke_previous } = parseOr400(agentTokenBody, req.body);
    const agent = liveAgent(req, 'a token for it would not work');
    if (revoke_previous) await revokeAgent(agent);
    // Minted after the revocation (even within its millisecond), so it is not refused by it.
    res.json({ token: await tokens.mintAgent(agent.agent_id, agent.task_id, { after: agent.tokens_revoked_before }) });
  });

  api.post('/agents/:id/revoke-tokens', admin, async (req, res) => {
    parseOr400(emptyBody, req.body);
    const agent = liveAgent(req, 'its tokens are refused already');
    const revoked = await revokeAgent(agent);
    res.json({
      ok: true,
      agent_id: agent.agent_id,
      before: revoked.before,
      // Its spawner stopped its process; it is launched again with a fresh token.
      relaunched: revoked.spawner_id !== null,
    });
  });

  api.post('/spawner-tokens', admin, async (req, res) => {
    const { task_ids } = parseOr400(spawnerTokenBody, req.body);
    const taskIds = task_ids ? [...new Set(task_ids)] : null;
    taskIds?.forEach((taskId, i) => {
      const known = registry.task(taskId) || registry.archived.has(taskId) || registry.quarantined.has(taskId);
      if (!known)
        throw new ApiError(404, 'unknown_task', `task_ids[${i}]: no task ${taskId}`, { field: `task_ids[${i}]` });
    });
    const token = await tokens.mintSpawner(ids.next('sp'), taskIds, {
      after: registry.state.spawner_tokens_revoked_before,
    });
    res.json({ token, task_ids: taskIds });
  });

  api.post('/spawner-tokens/revoke', admin, async (req, res) => {
    parseOr400(emptyBody, req.body);
    if (registry.quarantined.has(SYSTEM_LOG)) {
      throw new ApiError(
        409,
        'task_quarantined',
        `the system log (${SYSTEM_LOG}) is quarantined; repair it with beidou doctor --repair while the server is stopped`,
        { task_id: SYSTEM_LOG },
      );
    }
    const draft = spawnerTokensRevoked(registry.state, clock.now());
    const { before } = draft;
    const streams = services.spawners.streamsMintedBy(before);
    // Its durable observer (the spawner hub) closes those streams.
    await registry.commit([draft]);
    res.json({ ok: true, before, streams_closed: streams });
  });

  return api;
}
