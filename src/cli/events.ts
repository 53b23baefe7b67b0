import { followEvents, readEvents, sinceOption, type ClientOptions } from './client.js';

export interface EventsOptions extends ClientOptions {
  task: string;
  follow?: boolean;
  since?: string;
}

/** `beidou events --task T [--follow]`: one JSON line per event; `--follow` keeps streaming. */
export async function events(opts: EventsOptions): Promise<void> {
  const since = sinceOption(opts.since);
  const print = (e: unknown) => process.stdout.write(`${JSON.stringify(e)}\n`);
  if (opts.follow) await followEvents(opts, opts.task, since, print);
  else await readEvents(opts, opts.task, since, print);
}
