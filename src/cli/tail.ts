import type { StoredEvent } from '../events/catalogue.js';
import { describeEvent } from '../events/describe.js';
import { api, CliError, followEvents, readEvents, sinceOption, type ClientOptions } from './client.js';
import { namer, type TaskDetailView } from './render.js';
import { clock } from './table.js';
import { printableLine } from '../util/text.js';

export interface TailOptions extends ClientOptions {
  lines?: string;
  since?: string;
  follow: boolean;
}

/**
 * `beidou tail TASK`: a task's events as sentences (`12:01:03 leader-1 → worker-2: message
 * (84 chars) "…"`): the last few, then each new one as it happens (`--no-follow` stops there).
 */
export async function tail(taskId: string, opts: TailOptions): Promise<void> {
  const count = opts.lines === undefined ? 10 : Number(opts.lines);
  if (!Number.isInteger(count) || count < 0) throw new CliError('--lines must be a non-negative integer', 2);
  const from = opts.since !== undefined ? sinceOption(opts.since) : null;
  const detail = await api<TaskDetailView>(opts, 'GET', `/tasks/${encodeURIComponent(taskId)}`);
  // Seqs run 1, 2, 3…: the last `count` events start after event_count - count.
  const since = from ?? Math.max(0, detail.task.event_count - count);
  const names = new Map(detail.agents.map((a) => [a.agent_id, a.name]));
  const name = namer(names);
  const print = (e: StoredEvent) => {
    // Agents spawned while we watch get their names from the event that made them.
    if (e.event === 'agent_spawned') names.set(e.agent_id, e.name);
    // An event's sentence quotes agents' words: one line, nothing a terminal would obey.
    process.stdout.write(`${clock(e.ts)} ${printableLine(describeEvent(e, name))}\n`);
  };
  if (opts.follow) await followEvents(opts, taskId, since, print);
  else await readEvents(opts, taskId, since, print);
}
