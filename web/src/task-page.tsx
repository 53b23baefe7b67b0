import { useEffect, useRef, useState } from 'preact/hooks';
import { AgentStats } from './agent-stats.js';
import { openStream, request } from './api.js';
import { Composer } from './composer.js';
import { EventStream } from './event-stream.js';
import { human, money, namerOf, taskTitle, when } from './format.js';
import { PlanGraph } from './plan-graph.js';
import { confirmAction, setStream, toast } from './store.js';
import { TeamTree } from './team-tree.js';
import type { StoredEvent, TaskDetail, TaskItem } from './types.js';

/** Events kept in the page at most (the oldest go first); the server keeps them all. */
const KEPT_EVENTS = 20_000;
/** A busy task sends many events a second: its state is read again at most this often. */
const REFRESH_MS = 250;

/**
 * One task: its state (GET /api/tasks/:id), read again whenever its events say it changed
 * or the task list shows more events than the page has seen, so the list and this page
 * agree; and its event stream, resumed with Last-Event-ID after a drop.
 */
export function TaskPage({ taskId, summary }: { taskId: string; summary: TaskItem | undefined }) {
  const [detail, setDetail] = useState<TaskDetail | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [events, setEvents] = useState<StoredEvent[]>([]);
  const [streamNote, setStreamNote] = useState<string | null>(null);
  const refresh = useRefresh(taskId, setDetail, setError);

  useEffect(() => {
    let lastSeq = 0;
    let pending: StoredEvent[] = [];
    let flush: ReturnType<typeof setTimeout> | null = null;
    refresh();
    const close = openStream(`/tasks/${encodeURIComponent(taskId)}/events/stream`, {
      resume: true,
      onEvent: (name, data) => {
        if (name !== 'message') return;
        const e = JSON.parse(data) as StoredEvent;
        if (e.seq <= lastSeq) return;
        lastSeq = e.seq;
        pending.push(e);
        // Batches of a burst become one render.
        flush ??= setTimeout(() => {
          const batch = pending;
          pending = [];
          flush = null;
          setEvents((all) => {
            const next = all.concat(batch);
            return next.length > KEPT_EVENTS ? next.slice(-KEPT_EVENTS) : next;
          });
          refresh();
        }, 40);
      },
      onState: (connected) => {
        setStream('events', connected);
        setStreamNote(connected ? null : 'reconnecting…');
      },
      onFatal: (err) => {
        // Not a connection that may come back: it no longer counts for the live indicator.
        setStream('events', null);
        setStreamNote(
          err.code === 'task_quarantined' ? 'the events of a quarantined task are not served' : err.message,
        );
      },
    });
    return () => {
      close();
      if (flush) clearTimeout(flush);
      setStream('events', null);
    };
  }, [taskId]);

  // The task list is live too: when it has seen more of this task, read it again.
  useEffect(() => {
    if (summary && detail && summary.event_count !== detail.task.event_count) refresh();
  }, [summary?.event_count, summary?.status, detail?.task.event_count]);

  if (!detail) {
    return (
      <article class="task-page" data-testid="task-page" data-task-id={taskId}>
        <p class={error ? 'error' : 'muted'}>{error ?? 'Loading the task…'}</p>
      </article>
    );
  }

  const { task, agents, teams, plans, stats } = detail;
  const quarantine = 'quarantine' in detail ? detail.quarantine : null;
  const name = namerOf(agents);
  const root = agents.find((a) => a.agent_id === task.root_agent_id);
  const running = task.status === 'running';

  const terminate = async () => {
    if (
      !(await confirmAction(
        `Terminate "${taskTitle(task)}"? Its root and every agent under it are stopped.`,
        'Terminate',
      ))
    )
      return;
    try {
      await request('POST', `/tasks/${encodeURIComponent(task.task_id)}/terminate`, {});
      toast(`Terminating ${taskTitle(task)}`);
      refresh();
    } catch (err) {
      toast(`Not terminated: ${(err as Error).message}`, 'error');
    }
  };

  return (
    <article class="task-page" data-testid="task-page" data-task-id={taskId}>
      <header class="task-head">
        <div class="title-line">
          <h1 data-testid="task-title">{taskTitle(task)}</h1>
          <span class={`pill big s-${task.status}`} data-testid="task-status">
            {human(task.status)}
          </span>
          {running && (
            <button type="button" class="danger push-right" data-testid="task-terminate" onClick={terminate}>
              Terminate task
            </button>
          )}
        </div>
        <div class="task-facts muted">
          <span>{task.task_id}</span>
          {root && <span>root {root.name}</span>}
          {task.skill && <span>skill {task.skill}</span>}
          <span>started {when(task.created_at)}</span>
          {task.ended_at !== null && (
            <span>
              ended {when(task.ended_at)}
              {task.end_reason ? ` (${human(task.end_reason)})` : ''}
            </span>
          )}
        </div>
      </header>
      {quarantine && (
        <div class="banner bad" role="alert" data-testid="quarantine-banner">
          <b>Quarantined:</b>{' '}
          <code>
            {quarantine.file}:{quarantine.line}: {quarantine.reason}
          </code>
          <span class="muted">
            {' '}
            The task is read-only; <code>beidou doctor --repair</code>, with the server stopped, cuts its log back to
            its last whole commit.
          </span>
        </div>
      )}
      {error && <p class="error">{error}</p>}
      {task.text && (
        <p class="task-text" data-testid="task-text">
          {task.text}
        </p>
      )}
      <dl class="tiles" data-testid="task-stats">
        <div>
          <dt>Agents</dt>
          <dd data-stat="agents">
            {stats.agents} <small data-stat="live_agents">{stats.live_agents} live</small>
          </dd>
        </div>
        <div>
          <dt>Events</dt>
          <dd data-stat="events">{stats.events}</dd>
        </div>
        <div>
          <dt>Messages</dt>
          <dd data-stat="messages">
            {stats.messages} <small>{stats.undelivered} waiting</small>
          </dd>
        </div>
        <div>
          <dt>Tokens in / out</dt>
          <dd data-stat="tokens">
            {stats.input_tokens} <small>/ {stats.output_tokens}</small>
          </dd>
        </div>
        <div>
          <dt>Cost</dt>
          <dd data-stat="cost">{money(stats.cost_usd)}</dd>
        </div>
      </dl>

      <div class="grid2">
        <section class="panel" aria-labelledby="team-title">
          <div class="panel-head">
            <h2 id="team-title">Team</h2>
            <span class="muted">{teams.length === 1 ? '1 team' : `${teams.length} teams`}</span>
          </div>
          <TeamTree agents={agents} teams={teams} />
        </section>
        <section class="panel" aria-labelledby="plan-title">
          <div class="panel-head">
            <h2 id="plan-title">Plans</h2>
            <Legend />
          </div>
          {plans.length === 0 ? (
            <p class="muted">No plan declared yet.</p>
          ) : (
            plans.map((p) => <PlanGraph key={p.plan_id} plan={p} name={name} />)
          )}
        </section>
      </div>

      {running && !quarantine && (
        <section class="panel" aria-labelledby="composer-title">
          <div class="panel-head">
            <h2 id="composer-title">Message an agent</h2>
          </div>
          <Composer agents={agents} rootId={task.root_agent_id} />
        </section>
      )}

      <section class="panel" aria-labelledby="events-title">
        <div class="panel-head">
          <h2 id="events-title">Events</h2>
        </div>
        <EventStream events={events} agents={agents} name={name} state={streamNote} />
      </section>

      <section class="panel" aria-labelledby="stats-title">
        <div class="panel-head">
          <h2 id="stats-title">Agents</h2>
        </div>
        <AgentStats agents={agents} />
      </section>
    </article>
  );
}

function Legend() {
  return (
    // biome-ignore lint/a11y/useAriaPropsSupportedByRole: a span's aria-label is not announced (TODO: role="group"); each key's visible text names its state, so only the group's name is lost
    <span class="legend" aria-label="plan task states">
      {['blocked', 'ready', 'in_flight', 'done', 'failed'].map((s) => (
        <span key={s} class={`key p-${s}`}>
          {human(s)}
        </span>
      ))}
    </span>
  );
}

/** A refresh that coalesces: one request at a time, at most every REFRESH_MS, the last call always honoured. */
function useRefresh(
  taskId: string,
  setDetail: (d: TaskDetail) => void,
  setError: (e: string | null) => void,
): () => void {
  const state = useRef({
    inFlight: false,
    again: false,
    loaded: false,
    timer: null as ReturnType<typeof setTimeout> | null,
    alive: true,
  });
  useEffect(() => {
    const s = state.current;
    s.alive = true;
    return () => {
      s.alive = false;
      if (s.timer) clearTimeout(s.timer);
    };
  }, [taskId]);
  const load = async () => {
    const s = state.current;
    if (s.inFlight) {
      s.again = true;
      return;
    }
    s.inFlight = true;
    try {
      const d = await request<TaskDetail>('GET', `/tasks/${encodeURIComponent(taskId)}`);
      if (s.alive) {
        s.loaded = true;
        setDetail(d);
        setError(null);
      }
    } catch (err) {
      if (s.alive) setError((err as Error).message);
    } finally {
      s.inFlight = false;
      if (s.again && s.alive) {
        s.again = false;
        schedule();
      }
    }
  };
  const schedule = () => {
    const s = state.current;
    if (s.timer) return;
    s.timer = setTimeout(
      () => {
        s.timer = null;
        void load();
      },
      s.loaded ? REFRESH_MS : 0,
    );
  };
  return schedule;
}
