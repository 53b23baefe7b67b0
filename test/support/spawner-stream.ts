import { createParser } from 'eventsource-parser';
import type { TestServer } from './server.js';

/**
 * A hand-driven spawner: a spawner token and instance with its command stream open, the
 * commands it receives queued, and its posts. Tests play the spawner's side of the protocol
 * with it; `streams` collects the stream's abort controller for the test's cleanup. `token`: the
 * spawner token to use (default: one minted, unlimited); `ended` settles when the server ends the stream;
 * `received` is every command it got, in order, from the first (what `next` takes stays in it).
 */
export async function handSpawner(
  ts: TestServer,
  instance: string,
  streams: AbortController[],
  maxAgents = 4,
  opts: { token?: string } = {},
) {
  const token = opts.token ?? ((await ts.api('POST', '/spawner-tokens', {})).body.token as string);
  const headers = { authorization: `Bearer ${token}`, 'beidou-spawner-instance': instance };
  const controller = new AbortController();
  streams.push(controller);
  const res = await fetch(`${ts.url}/api/spawner/stream?max_agents=${maxAgents}&name=${instance}`, {
    headers,
    signal: controller.signal,
  });
  const queue: any[] = [];
  const received: any[] = [];
  let wake: (() => void) | null = null;
  const parser = createParser({
    onEvent: (e) => {
      received.push(JSON.parse(e.data));
      queue.push(JSON.parse(e.data));
      wake?.();
    },
  });
  const ended = (async () => {
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body!) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
    } catch {
      // aborted at the end of the test
    }
  })();
  /** The next command of `type` (any type when omitted), for `agentId` when given. */
  const next = async (type?: string, agentId?: string): Promise<any> => {
    for (;;) {
      const i = queue.findIndex((c) => (!type || c.type === type) && (!agentId || c.agent_id === agentId));
      if (i >= 0) return queue.splice(i, 1)[0];
      await new Promise<void>((r) => (wake = r));
    }
  };
  const post = async (route: string, body: unknown) => {
    const r = await fetch(`${ts.url}/api/spawner${route}`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as any };
  };
  return { status: res.status, next, post, headers, token, ended, received };
}
