import type { Namer } from '../../src/events/describe.js';
import { usd } from '../../src/util/text.js';
import type { Agent } from './types.js';

/** Small renderings shared by the components; money as the CLI prints it. */

export const money = (n: number): string => usd(n);

/** A Unix time in seconds: the time of day when today, else the date and time. */
export function when(ts: number | null): string {
  if (ts === null) return '-';
  const d = new Date(ts * 1000);
  const today = new Date();
  const time = clock(ts);
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${time}`;
}

export function clock(ts: number): string {
  return new Date(ts * 1000).toLocaleTimeString(undefined, {
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hourCycle: 'h23',
  });
}

/** Agents by their names; `user` and `beidou` (and an id not known yet) as they are. */
export function namerOf(agents: readonly Agent[]): Namer {
  const names = new Map(agents.map((a) => [a.agent_id, a.name]));
  return (id) => (id === null ? '-' : (names.get(id) ?? id));
}

/** How a task is called when it was started without a name: the start of its text. */
export function taskTitle(t: { name: string | null; text: string | null; task_id: string }): string {
  if (t.name) return t.name;
  const text = (t.text ?? '').replace(/\s+/g, ' ').trim();
  if (!text) return t.task_id;
  return text.length > 60 ? `${text.slice(0, 59)}…` : text;
}

export const human = (s: string): string => s.replace(/_/g, ' ');
