import { createParser } from 'eventsource-parser';
import { adminToken, api, CliError, serverUrl, type ClientOptions } from './client.js';

export interface EventsOptions extends ClientOptions {
  task: string;
  follow?: boolean;
  since?: string;
}

/** `beidou events --task T [--follow]`: one JSON line per event; `--follow` keeps streaming. */
export async function events(opts: EventsOptions): Promise<void> {
  let since = opts.since ? Number.parseInt(opts.since, 10) : 0;
  if (!Number.isInteger(since) || since < 0) throw new CliError('--since must be a non-negative integer', 2);
  const path = `/tasks/${encodeURIComponent(opts.task)}`;
  if (!opts.follow) {
    for (;;) {
      const page = await api<{ events: unknown[]; cursor: number }>(opts, 'GET', `${path}/events?since=${since}&limit=10000`);
      for (const e of page.events) process.stdout.write(JSON.stringify(e) + '\n');
      if (page.events.length === 0) return;
      since = page.cursor;
    }
  }
  const res = await fetch(`${serverUrl(opts)}/api${path}/events/stream?since=${since}`, {
    headers: { authorization: `Bearer ${adminToken(opts)}`, accept: 'text/event-stream' },
  }).catch((err: Error) => {
    throw new CliError(`cannot reach ${serverUrl(opts)} (${err.message})`);
  });
  if (!res.ok || !res.body) {
    const body = (await res.json().catch(() => ({}))) as { error?: string; message?: string };
    throw new CliError(`${res.status} ${body.error ?? 'error'}: ${body.message ?? ''}`);
  }
  const parser = createParser({ onEvent: (e) => process.stdout.write(e.data + '\n') });
  const decoder = new TextDecoder();
  for await (const chunk of res.body) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
}
