import type { Request, Response } from 'express';
import type { Registry } from '../../registry/registry.js';
import type { AdminStreams } from './admin-streams.js';
import { pendingQuestionsView, taskListView } from './views.js';

/**
 * `GET /api/tasks/stream` (admin token): the task list and the questions waiting for the
 * user, for the dashboard, so it never polls. Events: `tasks` `{tasks}` (the body of
 * `GET /api/tasks`) and `questions` `{questions}` (the array of `GET /api/questions/pending`),
 * both on connect, then each again whenever it changed. A busy team changes the list on
 * every event, so the feed looks at most every MIN_INTERVAL_MS.
 */

/** At most four looks a second: quick enough to feel live, cheap however busy the teams. */
const MIN_INTERVAL_MS = 250;

/** Both views as JSON text: compared as text, sent as text. */
export interface Overview {
  tasks: string;
  questions: string;
}

/**
 * What every open tasks stream follows: told of each durable batch (subscribed in
 * server.ts with the other observers), it renders the views once for all streams,
 * coalescing the batches of one interval into one look.
 */
export class TasksFeed {
  private readonly listeners = new Set<(overview: Overview) => void>();
  private timer: NodeJS.Timeout | null = null;
  private lastLook = Number.NEGATIVE_INFINITY;

  constructor(private readonly registry: Registry) {}

  /** The views now. */
  overview(): Overview {
    const { state, quarantined, archived } = this.registry;
    return {
      tasks: JSON.stringify({ tasks: taskListView(state, quarantined.values(), archived.values()) }),
      questions: JSON.stringify({ questions: pendingQuestionsView(state) }),
    };
  }

  onDurable(): void {
    if (this.listeners.size === 0 || this.timer) return;
    // performance.now(): an interval between looks, not a time of day (no Clock needed).
    const wait = Math.max(0, this.lastLook + MIN_INTERVAL_MS - performance.now());
    this.timer = setTimeout(() => this.look(), wait);
  }

  subscribe(listener: (overview: Overview) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private look(): void {
    this.timer = null;
    this.lastLook = performance.now();
    if (this.listeners.size === 0) return;
    const overview = this.overview();
    for (const listener of this.listeners) listener(overview);
  }
}

/** The views are JSON text already: sent as they are. */
const asText = (data: unknown) => (typeof data === 'string' ? data : JSON.stringify(data));

export function tasksStream(feed: TasksFeed, streams: AdminStreams) {
  return async (req: Request, res: Response): Promise<void> => {
    const stream = await streams.open(req, res, { serializer: asText });
    if (!stream) return;
    const sent: Overview = { tasks: '', questions: '' };
    const send = (overview: Overview) => {
      for (const name of ['tasks', 'questions'] as const) {
        if (overview[name] === sent[name]) continue;
        sent[name] = overview[name];
        if (!stream.push(overview[name], name)) return;
      }
    };
    stream.onEnd(feed.subscribe(send));
    send(feed.overview());
  };
}
