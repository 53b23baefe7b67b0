import type { StoredEvent } from '../../src/events/catalogue.js';
import type { TestServer } from './server.js';

/**
 * Waiting on events without sleeping: the in-process log's `subscribe` wakes the waiter on
 * each durable batch, and the check runs over every durable event of the task so far (read
 * back from the log, so nothing that landed before the subscription is missed). A deadline
 * turns "never happened" into a failure that lists what did happen.
 */

export type AnyEvent = StoredEvent & Record<string, any>;

/** Every durable event of a task, in seq order. */
export function durableEvents(ts: TestServer, taskId: string): AnyEvent[] {
  const log = ts.server.services.registry.log;
  const out: AnyEvent[] = [];
  let since = 0;
  const floor = log.readFloor(taskId);
  if (floor > 0)
    throw new Error(
      `task ${taskId} has events older than the log keeps in memory (from seq ${floor + 1}): raise BEIDOU_LIVE_EVENTS_IN_MEMORY / BEIDOU_LIVE_EVENT_BYTES_IN_MEMORY for this test`,
    );
  for (;;) {
    const batch = log.read(taskId, since, 10_000) as AnyEvent[];
    if (batch.length === 0) return out;
    out.push(...batch);
    since = batch[batch.length - 1]!.seq;
  }
}

/**
 * Resolves with the first non-undefined value of `check(events)`, re-evaluated after every
 * durable batch of the task; rejects after `timeoutMs`.
 */
export function waitUntil<T>(
  ts: TestServer,
  taskId: string,
  check: (events: AnyEvent[]) => T | undefined,
  opts: { timeoutMs?: number; what?: string } = {},
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let unsubscribe: () => void = () => undefined;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      unsubscribe();
      fn();
    };
    const evaluate = () => {
      if (settled) return;
      let value: T | undefined;
      try {
        value = check(durableEvents(ts, taskId));
      } catch (err) {
        finish(() => reject(err));
        return;
      }
      if (value !== undefined) finish(() => resolve(value as T));
    };
    const timer = setTimeout(() => {
      const seen = durableEvents(ts, taskId)
        .map((e) => `${e.seq}:${e.event}`)
        .join(' ');
      finish(() =>
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${opts.what ?? 'an event'}; events: ${seen}`)),
      );
    }, timeoutMs);
    unsubscribe = ts.server.services.registry.log.subscribe(taskId, () => evaluate());
    evaluate();
  });
}

/** The first event matching `match`, waiting for it if need be. */
export function waitForEvent(
  ts: TestServer,
  taskId: string,
  match: (e: AnyEvent) => boolean,
  opts: { timeoutMs?: number; what?: string } = {},
): Promise<AnyEvent> {
  return waitUntil(ts, taskId, (events) => events.find(match), opts);
}

/** Events of the task named `name` (optionally filtered further). */
export function eventsNamed(
  events: readonly AnyEvent[],
  name: string,
  where: (e: AnyEvent) => boolean = () => true,
): AnyEvent[] {
  return events.filter((e) => e.event === name && where(e));
}

/** Every event of a task through the admin API (paging with `since`), as an outside client sees them. */
export async function apiEvents(ts: TestServer, taskId: string): Promise<AnyEvent[]> {
  const out: AnyEvent[] = [];
  let since = 0;
  for (;;) {
    const { status, body } = await ts.api('GET', `/tasks/${taskId}/events?since=${since}`);
    if (status !== 200) throw new Error(`events: ${status} ${JSON.stringify(body)}`);
    const events = body.events as AnyEvent[];
    if (events.length === 0) return out;
    out.push(...events);
    since = body.cursor as number;
  }
}
