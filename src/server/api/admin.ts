import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import { newTask } from '../../domain/agents.js';
import { DomainError } from '../../domain/errors.js';
import { postMessage } from '../../domain/messages.js';
import * as routing from '../../domain/questions.js';
import { terminationDrafts } from '../../domain/termination.js';
import { SYSTEM_LOG, type EventDraft, type StoredEvent } from '../../events/catalogue.js';
import { USER } from '../../registry/state.js';
import type { Services } from '../../runtime/services.js';
import { VERSION } from '../../util/version.js';
import type { AdminStreams } from './admin-streams.js';
import type { Authenticator } from '../http/auth.js';
import { ApiError, parseOr400 } from '../http/errors.js';
import { tasksStream, type TasksFeed } from './tasks-stream.js';
import { agentView, pendingQuestionsView, quarantinedDetail, taskDetail, taskListView } from './views.js';

const createTaskBody = z.strictObject({
  task: z.string().trim().min(1, 'must describe the task'),
  skill: z.string().min(1).default('leader'),
  model: z.string().min(1).optional(),
  name: z.string().min(1).max(200).optional(),
  workspace: z.string().min(1).optional(),
  spawn: z.boolean().default(true),
});

const sendBody = z.strictObject({ content: z.string().min(1, 'must not be empty') });
const emptyBody = z.strictObject({});
const answerBody = z.strictObject({
  answers: z
    .array(
      z.strictObject({ selected_labels: z.array(z.string()).default([]), text: z.string().nullable().default(null) }),
    )
    .min(1, 'must hold one answer per sub-question'),
});
const declineBody = z.strictObject({ reason: z.string().trim().min(1, 'must say why') });

const eventsQuery = z.object({
  since: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(10_000).default(1_000),
});

/** The admin REST API (docs/api.md). Thin: parse, decide (domain/), commit, render a view. */
export function adminApi(services: Services, auth: Authenticator, streams: AdminStreams, feed: TasksFeed): Router {
  const { registry, tokens, skills, domain } = services;
  const api = Router();

  api.get('/health', (_req, res) => {
    // `role`: a load balancer's health check (HAProxy's `option httpchk GET /api/health`)
    // routes to the replica answering 200; a standby answers 503 (server/standby.ts).
    res.json({ ok: true, version: VERSION, role: 'active' });
  });

  // The token first (a request without a valid token costs no body read), the body, the token again.
  const admin = auth.admit('admin');

  api.post('/tasks', admin, async (req, res) => {
    const body = parseOr400(createTaskBody, req.body);
    const { taskId, rootAgentId, drafts } = newTask(domain, {
      task: body.task,
      skill: skills.require(body.skill, 'skill'),
      model: body.model ?? null,
      name: body.name ?? null,
      workspace: body.workspace ?? null,
      spawn: body.spawn,
    });
    await registry.commit(drafts);
    const token = await tokens.mintAgent(rootAgentId, taskId);
    res.status(201).json({ task_id: taskId, root_agent_id: rootAgentId, token, mcp_url: mcpUrl(req) });
  });

  // Before /tasks/:id, which would take "stream" for a task id.
  api.get('/tasks/stream', admin, tasksStream(feed, streams));

  api.get('/tasks', admin, (_req, res) => {
    res.json({ tasks: taskListView(registry.state, registry.quarantined.values(), registry.archived.values()) });
  });

  // A quarantined task's log failed verification at start: shown, never written to.
  const quarantined = (taskId: string): never => {
    const { quarantine } = registry.quarantined.get(taskId)!;
    throw new ApiError(
      409,
      'task_quarantined',
      `task ${taskId} is quarantined: ${quarantine.file} line ${quarantine.line}: ${quarantine.reason}; repair it with beidou doctor --repair while the server is stopped`,
      { task_id: taskId, quarantine },
    );
  };
  const taskOr404 = (id: string) => {
    const task = registry.task(id);
    if (!task) {
      if (registry.quarantined.has(id)) quarantined(id);
      throw new ApiError(404, 'unknown_task', `no task ${id}`);
    }
    return task;
  };
  const agentOr404 = (id: string) => {
    const agent = registry.agent(id);
    if (!agent) {
      const q = registry.quarantineOf('agents', id);
      if (q) quarantined(q.task_id);
      throw new ApiError(404, 'unknown_agent', `no agent ${id}`);
    }
    return agent;
  };

  // An archived task (ended, unloaded from memory) is read back from the store and
  // answered as it was: its events replayed into a state of its own, the same views.
  const archivedTask = async (taskId: string) => {
    const state = await registry.loadArchived(taskId);
    return { state, task: state.tasks.get(taskId)! };
  };
  const archivedAgent = async (agentId: string) => {
    const state = await registry.loadArchived(registry.archivedAgents.get(agentId)!);
    return { state, agent: state.agents.get(agentId)! };
  };

  api.get('/tasks/:id', admin, async (req, res) => {
    const id = param(req, 'id');
    if (registry.archived.has(id)) {
      const { state, task } = await archivedTask(id);
      return void res.json(taskDetail(state, task));
    }
    const q = registry.quarantined.get(id);
    res.json(q ? quarantinedDetail(q) : taskDetail(registry.state, taskOr404(id)));
  });

  api.post('/tasks/:id/terminate', admin, async (req, res) => {
    parseOr400(emptyBody, req.body);
    const archived = registry.archived.get(param(req, 'id'));
    if (archived)
      throw new ApiError(409, 'already_terminating', `task ${archived.task_id} is already ${archived.task.status}`);
    const task = taskOr404(param(req, 'id'));
    const root = registry.agent(task.root_agent_id)!;
    if (task.status !== 'running' || root.terminate_posted) {
      throw new ApiError(
        409,
        'already_terminating',
        `task ${task.task_id} is already ${task.status === 'running' ? 'terminating' : task.status}`,
      );
    }
    await registry.commit(terminationDrafts(registry.state, USER, root, 'admin'));
    res.json({ ok: true });
  });

  /**
   * The live log `id` names: a task's, or the system log's (`beidou`: the revocations of
   * spawner tokens, no task's), readable like a task's for an audit.
   */
  const liveLog = (id: string): string => {
    if (id !== SYSTEM_LOG) return taskOr404(id).task_id;
    if (registry.quarantined.has(SYSTEM_LOG)) quarantined(SYSTEM_LOG);
    return SYSTEM_LOG;
  };

  api.get('/tasks/:id/events', admin, async (req, res) => {
    const id = param(req, 'id');
    const archived = registry.archived.has(id);
    const log = archived ? null : liveLog(id);
    const { since, limit } = parseOr400(eventsQuery, req.query);
    // From memory where the log holds them, else from the store (an archived task, a live one's older events).
    const events = await registry.log.readStored(log ?? id, since, limit);
    res.json({ events, cursor: events.length > 0 ? events[events.length - 1]!.seq : since });
  });

  api.get('/tasks/:id/events/stream', admin, async (req, res) => {
    const archived = registry.archived.get(param(req, 'id'));
    if (archived) return archivedStream(req, res, archived.task_id, archived.mark.lastSeq);
    const log = liveLog(param(req, 'id'));
    const { since } = parseOr400(eventsQuery, req.query);
    let cursor = resumeCursor(req.header('last-event-id'), since, registry.log.durableSeq(log));
    const stream = await streams.open(req, res);
    if (!stream) return;
    const send = (e: StoredEvent) => {
      if (e.seq <= cursor) return;
      cursor = e.seq;
      stream.push(e, 'message', String(e.seq));
    };
    // The backlog, then live batches: the last read of the backlog is synchronous (from
    // memory) and the subscription follows it in the same turn, so no gap, no duplicate.
    // Older events than memory holds are read from the store, a page at a time, each
    // page waiting for a slow client to take the last.
    for (;;) {
      const older = cursor < registry.log.readFloor(log);
      const batch = older ? await registry.log.readStored(log, cursor, 1_000) : registry.log.read(log, cursor, 1_000);
      if (batch.length === 0) {
        if (older) return; // archived meanwhile: nothing more will come
        break;
      }
      batch.forEach(send);
      if (!(await stream.drained())) return;
    }
    stream.onEnd(registry.log.subscribe(log, (events) => events.forEach(send)));
  });

  /**
   * The stream of an archived task: its stored events after the cursor, then open as the
   * stream of any ended task is (nothing more will come; keep-alives until the client goes).
   */
  const archivedStream = async (req: Request, res: Response, taskId: string, head: number) => {
    const { since } = parseOr400(eventsQuery, req.query);
    let cursor = resumeCursor(req.header('last-event-id'), since, head);
    const stream = await streams.open(req, res);
    if (!stream) return;
    for (;;) {
      const batch = await registry.log.readStored(taskId, cursor, 1_000);
      if (batch.length === 0) break;
      for (const e of batch) if (!stream.push(e, 'message', String(e.seq))) return;
      cursor = batch[batch.length - 1]!.seq;
      if (!(await stream.drained())) return;
    }
  };

  api.get('/agents/:id', admin, async (req, res) => {
    const id = param(req, 'id');
    if (registry.archivedAgents.has(id)) return void res.json(agentView((await archivedAgent(id)).agent));
    res.json(agentView(agentOr404(id)));
  });

  api.post('/agents/:id/send', admin, async (req, res) => {
    const { content } = parseOr400(sendBody, req.body);
    if (registry.archivedAgents.has(param(req, 'id'))) {
      // Its agents are terminated: the same decision refuses, on the task read back.
      const { state, agent } = await archivedAgent(param(req, 'id'));
      postMessage({ ...domain, state }, USER, agent, content);
      throw new ApiError(409, 'task_archived', `task ${agent.task_id} has ended and is archived`);
    }
    const agent = agentOr404(param(req, 'id'));
    const { messageId, drafts } = postMessage(domain, USER, agent, content);
    await registry.commit(drafts);
    res.json({ ok: true, message_id: messageId });
  });

  api.get('/questions/pending', admin, (_req, res) => {
    res.json(pendingQuestionsView(registry.state));
  });

  /** A settled question is refused as `stale`; the REST contract calls it 409 `already_answered`. */
  const asUser = async (qid: string, decide: (ctx: typeof domain) => EventDraft[]) => {
    const q = registry.quarantineOf('questions', qid);
    if (q) quarantined(q.task_id);
    const archivedIn = registry.archivedQuestions.get(qid);
    // A question of an archived task is settled: the same decision refuses it, on the task read back.
    const ctx = archivedIn ? { ...domain, state: await registry.loadArchived(archivedIn) } : domain;
    let drafts: EventDraft[];
    try {
      drafts = decide(ctx);
    } catch (err) {
      if (err instanceof DomainError && err.code === 'stale')
        throw new ApiError(409, 'already_answered', err.message, err.details);
      throw err;
    }
    if (archivedIn) throw new ApiError(409, 'already_answered', `question ${qid} is settled (its task is archived)`);
    await registry.commit(drafts);
  };

  api.post('/questions/:qid/answer', admin, async (req, res) => {
    const { answers } = parseOr400(answerBody, req.body);
    const qid = param(req, 'qid');
    await asUser(qid, (ctx) => routing.answer(ctx, USER, qid, answers, null, services.questions.has(qid)));
    res.json({ ok: true });
  });

  api.post('/questions/:qid/decline', admin, async (req, res) => {
    const { reason } = parseOr400(declineBody, req.body);
    const qid = param(req, 'qid');
    await asUser(qid, (ctx) => routing.decline(ctx, qid, reason, services.questions.has(qid)));
    res.json({ ok: true });
  });

  api.get('/skills', admin, (_req, res) => {
    res.json({ skills: skills.loadAll().skills.map(({ name, description }) => ({ name, description })) });
  });

  api.get('/spawners', admin, (_req, res) => {
    res.json({ spawners: services.spawners.view() });
  });

  return api;
}

/**
 * Where a stream resumes: after `Last-Event-ID` when sent (a whole non-negative number, as
 * this stream's ids are), else after `?since=`. An id beyond the task's last durable event
 * was never sent by this server: 400, rather than a stream that waits for it in silence.
 */
function resumeCursor(lastEventId: string | undefined, since: number, head: number): number {
  if (lastEventId !== undefined && !/^\d{1,15}$/.test(lastEventId.trim())) {
    throw new ApiError(
      400,
      'invalid_input',
      'Last-Event-ID: must be a whole non-negative number (the seq of the last event received)',
      { field: 'Last-Event-ID' },
    );
  }
  const cursor = lastEventId !== undefined ? Number(lastEventId.trim()) : since;
  if (cursor > head) {
    const field = lastEventId !== undefined ? 'Last-Event-ID' : 'since';
    throw new ApiError(
      400,
      'invalid_input',
      `${field}: ${cursor} is beyond the last event of this task (seq ${head})`,
      { field, head },
    );
  }
  return cursor;
}

function param(req: Request, name: string): string {
  return String(req.params[name] ?? '');
}

function mcpUrl(req: Request): string {
  return `${req.protocol}://${req.get('host') ?? 'localhost'}/mcp`;
}
