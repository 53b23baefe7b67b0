import { readFileSync } from 'node:fs';
import path from 'node:path';
import {
  agentProcesses,
  freePort,
  killHard,
  startServerProcess,
  startSpawnerProcess,
  type AgentProcess,
  type ChildHandle,
} from './chaos-processes.js';
import type { FaultKind, FaultPlan, FaultRecord } from './chaos-faults.js';

/**
 * A team run through real processes — `beidou serve` on a fixed port, two `beidou spawner`s
 * with the command adapter sharing one workdir, scripted agents — while faults planned from
 * a seed kill them with SIGKILL: the server (restarted on the same home and port), a spawner
 * (the other, already connected, takes its agents over; a new one replaces it once the server
 * has noticed), or an agent process. The run plays the user: it answers the questions that
 * reach the gateway and approves the root's hand-off. It watches, through the admin API, that
 * no agent stays `running` without a process. `npm run demo -- --chaos` and
 * test/chaos/team.test.ts both drive it.
 */

export type Ev = { seq: number; ts: number; event: string; task_id: string } & Record<string, any>;
export interface Answer {
  selected_labels: string[];
  text: string | null;
}

export interface TeamRunOptions {
  home: string;
  scriptFile: string;
  task: string;
  faults: FaultPlan[];
  random: () => number;
  heartbeatS: number;
  deadlineMs: number;
  serverEnv?: Record<string, string>;
  agentEnv?: Record<string, string>;
  /** The user's answer to an agent's question that reached the gateway (null: leave it). */
  answer(question: Ev): Answer[] | null;
  onEvent?(e: Ev, sinceStartMs: number): void;
  onFault?(f: FaultRecord): void;
  onStart?(info: { url: string; taskId: string; rootAgentId: string }): void;
}

export interface TeamRunResult {
  taskId: string;
  rootAgentId: string;
  url: string;
  workdir: string;
  /** Wall time (ms) when the task was created: `atMs` and event `ts` are measured against it. */
  startedAt: number;
  durationMs: number;
  events: Ev[];
  faults: FaultRecord[];
  /** Agents the API showed `running` with no process behind them for longer than the limit. */
  stuck: string[];
  /** Agent processes still alive once the task had ended and every agent was terminated. */
  leftovers: AgentProcess[];
  /** Questions at the gateway the run did not answer (not an agent's, not the root's review). */
  unexpectedQuestions: Ev[];
  /** The agents as the admin API showed them last. */
  agents: Array<Record<string, any>>;
  /** Set when the task did not end before the deadline. */
  error: string | null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runTeam(opts: TeamRunOptions): Promise<TeamRunResult> {
  const env = { BEIDOU_SPAWNER_HEARTBEAT_S: String(opts.heartbeatS), ...opts.serverEnv };
  const port = await freePort();
  let server: ChildHandle = await startServerProcess(opts.home, port, env);
  const url = `http://127.0.0.1:${port}`;
  const adminToken = readFileSync(path.join(opts.home, 'admin.token'), 'utf8').trim();
  const api = async (method: string, route: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${url}/api${route}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(5_000),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  const workdir = path.join(opts.home, 'agents');
  const { token } = (await api('POST', '/spawner-tokens', {})).body as { token: string };
  const spawnerEnv = { ...opts.agentEnv };
  const spawners: ChildHandle[] = [];
  const startSpawner = () => {
    const s = startSpawnerProcess(url, token, opts.scriptFile, workdir, spawnerEnv);
    spawners.push(s);
    return s;
  };
  const connected = async (pids: number[]) => {
    const { body } = await api('GET', '/spawners');
    const names = new Set(
      (body.spawners as Array<{ name: string | null; connected: boolean }>)
        .filter((s) => s.connected)
        .map((s) => s.name),
    );
    return pids.every((pid) => [...names].some((n) => n?.endsWith(`:${pid}`)));
  };
  const first = [startSpawner(), startSpawner()];
  for (let i = 0; !(await connected(first.map((s) => s.pid))); i++) {
    if (i > 200) throw new Error('the spawners did not connect');
    await sleep(50);
  }

  const created = (await api('POST', '/tasks', { task: opts.task, name: 'chaos team' })).body as {
    task_id: string;
    root_agent_id: string;
  };
  const taskId = created.task_id;
  opts.onStart?.({ url, taskId, rootAgentId: created.root_agent_id });
  const startedAt = Date.now();
  const since = () => Date.now() - startedAt;
  const events: Ev[] = [];
  const faults: FaultRecord[] = [];
  const stuck: string[] = [];
  const unexpectedQuestions: Ev[] = [];
  const asked = new Map<string, Ev>();
  const toAnswer = new Map<string, Answer[]>();
  const names = new Map<string, string>([[created.root_agent_id, 'root']]);
  const spawned = new Set<string>([created.root_agent_id]);
  const consumed = new Set<string>();
  const missingSince = new Map<string, number>();
  const stuckLimitMs = 3 * opts.heartbeatS * 1000 + 2_000;
  let ended = false;
  let done = false;
  let stopped = false;
  /** Every planned fault injected (or the run stopped): until then the root's hand-off waits. */
  let faultsOver = opts.faults.length === 0;
  let agents: Array<Record<string, any>> = [];
  let serverDown = false;

  const take = (e: Ev) => {
    events.push(e);
    opts.onEvent?.(e, since());
    if (e.event === 'agent_spawned') {
      spawned.add(e.agent_id);
      names.set(e.agent_id, e.name);
    }
    if (e.event === 'terminate.consumed') consumed.add(e.agent_id);
    if (e.event === 'task_ended') ended = true;
    if (e.event === 'question_asked') asked.set(e.qid, e);
    const atGateway =
      (e.event === 'question_asked' && e.holder === null) ||
      (e.event === 'question_escalated' && e.new_holder === null);
    if (!atGateway) return;
    const q = asked.get(e.qid)!;
    if (q.origin === 'root_review') toAnswer.set(q.qid, [{ selected_labels: ['Approve'], text: null }]);
    else {
      const answers = q.origin === 'ask_user' ? opts.answer(q) : null;
      if (answers) toAnswer.set(q.qid, answers);
      else unexpectedQuestions.push(q);
    }
  };

  const poll = async () => {
    for (;;) {
      const { status, body } = await api('GET', `/tasks/${taskId}/events?since=${events.at(-1)?.seq ?? 0}&limit=1000`);
      if (status !== 200 || body.events.length === 0) break;
      for (const e of body.events as Ev[]) take(e);
    }
    for (const [qid, answers] of toAnswer) {
      // The root's hand-off is approved only once every fault has landed: a fast machine
      // would otherwise end the task before the last one (the task cannot end without it).
      if (!faultsOver && asked.get(qid)?.origin === 'root_review') continue;
      const { status } = await api('POST', `/questions/${qid}/answer`, { answers });
      if (status === 200 || status === 409) toAnswer.delete(qid);
    }
    const { body } = await api('GET', `/tasks/${taskId}`);
    agents = body.agents;
    const live = new Set(agentProcesses(workdir, taskId).map((p) => p.agentId));
    const now = Date.now();
    for (const a of body.agents as Array<{ agent_id: string; name: string; running: boolean }>) {
      if (!a.running || live.has(a.agent_id)) {
        missingSince.delete(a.agent_id);
        continue;
      }
      const from = missingSince.get(a.agent_id) ?? now;
      missingSince.set(a.agent_id, from);
      const note = `${a.name} (${a.agent_id}) shown running with no process since +${((from - startedAt) / 1000).toFixed(1)} s`;
      if (now - from > stuckLimitMs && !stuck.some((s) => s.startsWith(`${a.name} (`)))
        stuck.push(`${note}, past the ${stuckLimitMs} ms limit`);
    }
    done = ended && [...spawned].every((id) => consumed.has(id));
  };

  const inject = async (kind: FaultKind) => {
    const record: FaultRecord = { kind, atMs: since(), target: '', pid: 0 };
    if (kind === 'server' || kind === 'outage+agent') {
      serverDown = true;
      Object.assign(record, { target: 'server', pid: server.pid });
      opts.onFault?.(record);
      await killHard(server);
      if (kind === 'outage+agent') {
        await sleep(200 + opts.random() * 800);
        const live = agentProcesses(workdir, taskId);
        const victim = live[Math.floor(opts.random() * live.length)];
        if (victim) {
          process.kill(victim.pid, 'SIGKILL');
          Object.assign(record, {
            target: `server, and agent ${names.get(victim.agentId) ?? victim.agentId} (pid ${victim.pid}) while it was down`,
            agentId: victim.agentId,
          });
        }
      }
      await sleep(300 + opts.random() * 1200);
      server = await startServerProcess(opts.home, port, env);
      record.backAtMs = since();
      missingSince.clear(); // measured again from the restart: the outage is not the agents'
      serverDown = false;
    } else if (kind === 'spawner') {
      const live = spawners.filter((s) => s.child.exitCode === null && s.child.signalCode === null);
      const victim = live[Math.floor(opts.random() * live.length)]!;
      const view = await api('GET', '/spawners').catch(() => null);
      const spawnerId = (view?.body.spawners as Array<{ spawner_id: string; name: string | null }> | undefined)?.find(
        (s) => s.name?.endsWith(`:${victim.pid}`),
      )?.spawner_id;
      Object.assign(record, {
        target: `spawner ${spawnerId ?? '?'}`,
        pid: victim.pid,
        ...(spawnerId ? { spawnerId } : {}),
      });
      opts.onFault?.(record);
      await killHard(victim);
      // The survivor takes the agents over once the server notices; only then does a new one join.
      const deadline = Date.now() + stuckLimitMs + 3_000;
      while (Date.now() < deadline && !events.some((e) => e.event === 'spawner.lost' && e.spawner_id === spawnerId))
        await sleep(100);
      startSpawner();
    } else {
      const killed = new Set(faults.filter((f) => f.agentId).map((f) => f.agentId));
      let candidates: AgentProcess[] = [];
      for (let i = 0; i < 50 && candidates.length === 0 && !done; i++) {
        candidates = agentProcesses(workdir, taskId).filter((p) => !killed.has(p.agentId));
        if (candidates.length === 0) await sleep(100);
      }
      if (candidates.length === 0) return;
      const victim = candidates[Math.floor(opts.random() * candidates.length)]!;
      Object.assign(record, {
        target: `agent ${names.get(victim.agentId) ?? victim.agentId}`,
        pid: victim.pid,
        agentId: victim.agentId,
      });
      opts.onFault?.(record);
      process.kill(victim.pid, 'SIGKILL');
    }
    faults.push(record);
  };

  const chaos = (async () => {
    for (const plan of opts.faults) {
      const at = since() + plan.afterMs;
      while (!done && !stopped && since() < at) await sleep(20);
      if (done || stopped) return;
      await inject(plan.kind);
    }
  })().finally(() => (faultsOver = true));

  let error: string | null = null;
  while (!done) {
    if (since() > opts.deadlineMs) {
      error = `the task did not end within ${opts.deadlineMs} ms`;
      stopped = true;
      break;
    }
    if (!serverDown) await poll().catch(() => undefined);
    await sleep(100);
  }
  await chaos.catch((err: unknown) => (error ??= `fault injection failed: ${(err as Error).message}`));
  const durationMs = since();
  // Agents end once terminated (their input closes); give them a moment, then see who is left.
  let leftovers = agentProcesses(workdir, taskId);
  for (let i = 0; i < 50 && leftovers.length > 0; i++) {
    await sleep(100);
    leftovers = agentProcesses(workdir, taskId);
  }
  await poll().catch(() => undefined);
  for (const s of spawners) await killHard(s);
  for (const p of agentProcesses(workdir, taskId)) process.kill(p.pid, 'SIGKILL');
  server.child.kill('SIGTERM');
  await server.exited;
  return {
    taskId,
    rootAgentId: created.root_agent_id,
    url,
    workdir,
    startedAt,
    durationMs,
    events,
    faults,
    stuck,
    leftovers,
    unexpectedQuestions,
    agents,
    error,
  };
}
