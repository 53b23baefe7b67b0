import { Router, type Request } from 'express';
import { createSession } from 'better-sse';
import { zodToInvalidInput } from '../../domain/errors.js';
import { spawnerTakes } from '../../domain/revocation.js';
import { NotYourAgent, spooledMark, spoolHighWater } from '../../domain/spawners.js';
import { EVENT_FIELDS, SPAWNER_EVENTS, type EventDraft } from '../../events/catalogue.js';
import { UnstorableEventError } from '../../events/event-log.js';
import {
  ackBody,
  eventsBody,
  heartbeatBody,
  INSTANCE_HEADER,
  SPOOL_SEQ_HEADER,
  startedBody,
  streamQuery,
  type SpawnerCommand,
} from '../../protocol/spawner.js';
import type { Services } from '../../runtime/services.js';
import type { Authenticator } from '../http/auth.js';
import { ApiError, fromDomainError, parseOr400 } from '../http/errors.js';

/**
 * The spawner endpoints (spawner tokens only): one SSE stream of commands, and posts for
 * heartbeats, acknowledgements, starts and drained events. docs/spawner-protocol.md has
 * the whole protocol.
 */

export function spawnerApi(services: Services, auth: Authenticator, stopping: AbortSignal): Router {
  const { spawners, registry } = services;
  const api = Router();
  api.use(auth.admit('spawner')); // the token, the body, the token again

  const principal = (req: Request) => {
    const p = req.principal;
    if (p?.kind !== 'spawner') throw new Error('spawner route without a spawner principal');
    return p;
  };
  // One spawner token may serve several spawner processes (machines): each names its own
  // instance, and the pair is the spawner's identity.
  const spawnerId = (req: Request) => {
    const p = principal(req);
    const instance = req.header(INSTANCE_HEADER) ?? '';
    if (!/^[A-Za-z0-9._:-]{1,100}$/.test(instance)) {
      throw new ApiError(
        400,
        'invalid_input',
        `${INSTANCE_HEADER}: must name this spawner instance ([A-Za-z0-9._:-], at most 100)`,
      );
    }
    return `${p.spawnerId}.${instance}`;
  };
  // A report from a spawner's spool carries its spool sequence: one at or below the
  // spawner's high-water mark was committed before (a replay) and is acknowledged, not redone.
  const spoolSeq = (req: Request): number | null => {
    const raw = req.header(SPOOL_SEQ_HEADER);
    if (raw === undefined) return null;
    if (!/^[1-9][0-9]{0,14}$/.test(raw))
      throw new ApiError(400, 'invalid_input', `${SPOOL_SEQ_HEADER}: must be a positive integer`);
    return Number(raw);
  };
  const replayed = (id: string, seq: number | null) => seq !== null && seq <= spoolHighWater(registry.state, id);
  // A token limited to some tasks acts on their agents only (the scheduler gives it no other;
  // this holds whatever else comes to name one).
  const inScope = (req: Request, agentId: string) => {
    const { taskIds } = principal(req);
    const agent = registry.agent(agentId);
    if (taskIds && !(agent && spawnerTakes(taskIds, agent.task_id)))
      throw new ApiError(
        409,
        'not_your_agent',
        `agent ${agentId} is not of the tasks this spawner token is limited to`,
      );
  };
  const mine = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof NotYourAgent) throw new ApiError(409, 'not_your_agent', err.message);
      throw err;
    }
  };

  api.get('/stream', async (req, res) => {
    const id = spawnerId(req);
    const { spawnerId: tokenId, taskIds, gen } = principal(req);
    const { max_agents, name } = parseOr400(streamQuery, req.query);
    // 400 (not 429): the spawner asks for more than it may ever run; it stops rather than retry.
    const refused = spawners.admission({ spawnerId: id, tokenId, maxAgents: max_agents });
    if (refused) throw new ApiError(400, refused.code, refused.message, refused.details);
    // A keep-alive every heartbeat: a spawner that hears nothing for three of them drops
    // the stream and reconnects (a paused or lost server, a balancer holding a dead one).
    const session = await createSession(req, res, {
      keepAlive: services.config.spawnerHeartbeatS * 1000,
      trustClientEventId: false,
    });
    let seq = 0;
    const send = (command: SpawnerCommand) => {
      if (session.isConnected) session.push(command, 'command', String(++seq));
    };
    const end = () => res.end();
    stopping.addEventListener('abort', end, { once: true });
    session.on('disconnected', () => {
      stopping.removeEventListener('abort', end);
      spawners.disconnect(id, send);
    });
    // Checked again as it registers (its token may have been revoked, or another instance of
    // it connected, while the stream opened): refused, the stream just ends.
    spawners.connect({
      spawnerId: id,
      name: name || id,
      maxAgents: max_agents,
      taskIds,
      tokenId,
      gen,
      send,
      close: end,
    });
  });

  api.post('/heartbeat', async (req, res) => {
    // An older spawner posts `{}` (or nothing): a beat without a report.
    const body = parseOr400(heartbeatBody, req.body ?? {});
    await spawners.heartbeat(spawnerId(req), body.agents, principal(req).taskIds);
    res.json({ ok: true });
  });

  api.post('/ack', async (req, res) => {
    const body = parseOr400(ackBody, req.body);
    const id = spawnerId(req);
    const seq = spoolSeq(req);
    if (replayed(id, seq)) return void res.json({ ok: true, replayed: true });
    inScope(req, body.agent_id);
    const mark = spooledMark(registry.state, id, body.agent_id, seq);
    await mine(async () => {
      if (body.type === 'deliver') {
        if (!body.message_id) throw new ApiError(400, 'invalid_input', 'message_id: required for a delivery ack');
        await spawners.acknowledgeDelivery(id, body.agent_id, body.message_id, mark);
      } else {
        await spawners.acknowledgeTermination(id, body.agent_id, mark);
      }
    });
    res.json({ ok: true });
  });

  api.post('/agents/:id/started', async (req, res) => {
    const body = parseOr400(startedBody, req.body);
    const id = spawnerId(req);
    const agentId = String(req.params.id);
    const seq = spoolSeq(req);
    if (replayed(id, seq)) return void res.json({ ok: true, replayed: true });
    inScope(req, agentId);
    await mine(() =>
      spawners.started(id, agentId, body.session_id, body.resumed, spooledMark(registry.state, id, agentId, seq)),
    );
    res.json({ ok: true });
  });

  api.post('/agents/:id/events', async (req, res) => {
    const agentId = String(req.params.id);
    const { events } = parseOr400(eventsBody, req.body);
    const id = spawnerId(req);
    const seq = spoolSeq(req);
    if (replayed(id, seq)) return void res.json({ ok: true, accepted: 0, replayed: true });
    inScope(req, agentId);
    const agent = registry.agent(agentId);
    if (!agent) throw new ApiError(404, 'unknown_agent', `no agent ${agentId}`);
    // Validate all first: a batch is taken whole or not at all.
    const drafts = events.map((raw, i) => {
      const name = raw.event;
      if (typeof name !== 'string' || !(SPAWNER_EVENTS as readonly string[]).includes(name)) {
        throw new ApiError(400, 'invalid_input', `events[${i}].event: must be one of ${SPAWNER_EVENTS.join(', ')}`, {
          field: `events[${i}].event`,
        });
      }
      const schema = EVENT_FIELDS[name as (typeof SPAWNER_EVENTS)[number]];
      // Identity comes from the route (the agent this spawner runs), never from the payload;
      // a spawner's forced termination is always the grace backstop's.
      const identity =
        name === 'terminate.forced'
          ? { agent_id: agentId, caller_id: 'watchdog', reason: 'watchdog_grace', team_id: agent.team_id }
          : 'agent_id' in schema.shape
            ? { agent_id: agentId }
            : { caller_id: agentId };
      const parsed = schema.safeParse({ ...raw, ...identity });
      if (!parsed.success) {
        const err = fromDomainError(zodToInvalidInput(parsed.error));
        throw new ApiError(400, 'invalid_input', `events[${i}] (${name}) ${err.message}`, {
          field: `events[${i}].${String(err.details?.field ?? '')}`,
        });
      }
      return { event: name, task_id: agent.task_id, ...parsed.data } as EventDraft;
    });
    await mine(() => spawners.report(id, agentId, drafts, spooledMark(registry.state, id, agentId, seq))).catch(
      (err: unknown) => {
        // Serialised before any of it is numbered: nothing of the batch was written.
        if (err instanceof UnstorableEventError && err.index < drafts.length) {
          const i = err.index;
          throw new ApiError(
            400,
            'invalid_input',
            `events[${i}] (${drafts[i]!.event}) cannot be stored: ${err.reason}`,
            { field: `events[${i}]` },
          );
        }
        throw err;
      },
    );
    res.json({ ok: true, accepted: drafts.length });
  });

  return api;
}
