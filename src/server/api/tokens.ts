import { Router, type Request } from 'express';
import { z } from 'zod';
import {
  agentTokensRevoked,
  heldAgentsRevoked,
  spawnerHeldAgents,
  spawnerTokensRevoked,
} from '../../domain/revocation.js';
import { SYSTEM_LOG } from '../../events/catalogue.js';
import { nameField } from '../../primitives/fields.js';
import type { AgentRecord } from '../../registry/state.js';
import type { Services } from '../../runtime/services.js';
import type { Authenticator } from '../http/auth.js';
import { ApiError, parseOr400 } from '../http/errors.js';

/**
 * The admin routes that mint and revoke tokens (docs/api.md, "Tokens"; docs/security.md,
 * "Revocation"): an agent's token (optionally revoking the ones before it), the revocation of
 * an agent's tokens, spawner tokens (optionally limited to some tasks) and the revocation of
 * every spawner token, with the agent tokens their spawners were handed. A revocation is an
 * event, so it holds across restarts and on every replica; a token is minted in the current
 * generation of what it is for.
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
  const admin = auth.admit('admin');

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
    // Of the generation after the revocation, so it is not refused by it.
    res.json({ token: await tokens.mintAgent(agent.agent_id, agent.task_id, { gen: agent.tokens_gen }) });
  });

  api.post('/agents/:id/revoke-tokens', admin, async (req, res) => {
    parseOr400(emptyBody, req.body);
    const agent = liveAgent(req, 'its tokens are refused already');
    const revoked = await revokeAgent(agent);
    res.json({
      ok: true,
      agent_id: agent.agent_id,
      before: revoked.before,
      gen: agent.tokens_gen,
      // Its spawner stopped its process; it is launched again with a fresh token.
      relaunched: revoked.spawner_id !== null,
    });
  });

  /** Spawner tokens cannot be minted nor revoked while the log of their revocations is unreadable. */
  const systemLogReadable = () => {
    if (registry.quarantined.has(SYSTEM_LOG)) {
      throw new ApiError(
        409,
        'task_quarantined',
        `the system log (${SYSTEM_LOG}) is quarantined; repair it with beidou doctor --repair while the server is stopped`,
        { task_id: SYSTEM_LOG },
      );
    }
  };

  api.post('/spawner-tokens', admin, async (req, res) => {
    const { task_ids } = parseOr400(spawnerTokenBody, req.body);
    systemLogReadable();
    const taskIds = task_ids ? [...new Set(task_ids)] : null;
    taskIds?.forEach((taskId, i) => {
      const known = registry.task(taskId) || registry.archived.has(taskId) || registry.quarantined.has(taskId);
      if (!known)
        throw new ApiError(404, 'unknown_task', `task_ids[${i}]: no task ${taskId}`, { field: `task_ids[${i}]` });
    });
    const token = await tokens.mintSpawner(ids.next('sp'), taskIds, { gen: registry.state.spawner_tokens_gen });
    res.json({ token, task_ids: taskIds });
  });

  api.post('/spawner-tokens/revoke', admin, async (req, res) => {
    parseOr400(emptyBody, req.body);
    systemLogReadable();
    const now = clock.now();
    const streams = services.spawners.openStreams();
    const held = spawnerHeldAgents(registry.state);
    // Its durable observer (the spawner hub) closes their streams; from the moment it is
    // applied none of them is handed a launch, a message or a command.
    await registry.commit([spawnerTokensRevoked(now)]);
    // Then the agent tokens those spawners were handed: refused too, their agents launched
    // again with fresh ones (by a spawner with a new token). One commit per task log, each
    // decided as it is committed.
    let agents = 0;
    for (const inTask of held.values()) {
      const drafts = heldAgentsRevoked(registry.state, inTask, now);
      if (drafts.length === 0) continue;
      await registry.commit(drafts);
      agents += drafts.length;
    }
    res.json({
      ok: true,
      before: now,
      gen: registry.state.spawner_tokens_gen,
      streams_closed: streams,
      agents_revoked: agents,
    });
  });

  return api;
}
