import { readFileSync } from 'node:fs';
import { createParser } from 'eventsource-parser';
import { afterEach, describe, expect, it } from 'vitest';
import { homePaths, loadConfig } from '../../src/config.js';
import { startServer, type BeidouServer } from '../../src/server/server.js';
import { TokenService } from '../../src/identity/tokens.js';
import { systemClock } from '../../src/util/clock.js';
import { createLogger } from '../../src/util/logger.js';
import { connectAgent, removeHome, tempHome, type TestAgent } from '../support/server.js';

/**
 * No token, secret or admin token ever reaches a log line, at any level.
 */

/** A log destination kept in memory (the server's own logger, pointed here instead of stderr). */
function memoryLog() {
  const lines: string[] = [];
  return { lines, stream: { write: (line: string) => void lines.push(line) } };
}

describe('no secret in the log: the logger redacts credentials', () => {
  it('replaces authorization headers and token, admin token and secret fields wherever they sit', () => {
    const log = memoryLog();
    const logger = createLogger('trace', log.stream);
    logger.trace(
      {
        req: {
          method: 'POST',
          headers: { authorization: 'Bearer HEADER-SECRET-1', cookie: 'c=COOKIE-SECRET-2', host: 'localhost' },
        },
        headers: { authorization: 'Bearer HEADER-SECRET-3' },
        token: 'TOKEN-SECRET-4',
        adminToken: 'ADMIN-SECRET-5',
        secret: 'SIGNING-SECRET-6',
        launch: { token: 'LAUNCH-SECRET-7', agent_id: 'ag_x' },
        body: { reply: { token: 'NESTED-SECRET-8' } },
      },
      'request',
    );
    const text = log.lines.join('');
    expect(log.lines).toHaveLength(1);
    for (let i = 1; i <= 8; i++) expect(text).not.toMatch(new RegExp(`SECRET-${i}`));
    const line = JSON.parse(log.lines[0]!);
    expect(line).toMatchObject({
      req: { method: 'POST', headers: { authorization: '[redacted]', host: 'localhost' } },
      launch: { token: '[redacted]', agent_id: 'ag_x' },
    });
  });
});

describe('no secret in the log: a message text quoting a token', () => {
  it('has the token cut out (an agent printing its own curl line, logged by its spawner)', async () => {
    const log = memoryLog();
    const logger = createLogger('info', log.stream);
    const tokens = new TokenService('s'.repeat(32), 3600, systemClock);
    const jwt = await tokens.mintAgent('ag_x', 'tsk_x');
    logger.info({ agent_id: 'ag_x' }, `agent output: curl -H 'Authorization: Bearer ${jwt}' http://localhost/mcp`);
    logger.warn(`could not post: token ${jwt} refused`);
    const text = log.lines.join('');
    expect(log.lines).toHaveLength(2);
    expect(text).not.toContain(jwt);
    expect(text).not.toContain(jwt.split('.')[2]);
    expect(JSON.parse(log.lines[0]!).msg).toBe(
      "agent output: curl -H 'Authorization: Bearer [redacted-token]' http://localhost/mcp",
    );
  });
});

describe('no secret in the log: a whole task at trace level leaves no token in the log', () => {
  let server: BeidouServer | null = null;
  let home = '';
  const agents: TestAgent[] = [];
  const streams: AbortController[] = [];
  afterEach(async () => {
    for (const s of streams.splice(0)) s.abort();
    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    await server?.close();
    server = null;
    removeHome(home);
  });

  it('mints agent, spawner and launch tokens, uses them on every surface, and finds none of them (nor the admin token or secret) in the log', async () => {
    home = tempHome();
    const log = memoryLog();
    server = await startServer(loadConfig({ port: '0', home }, {}), { logger: createLogger('trace', log.stream) });
    const url = server.url;
    const minted: Record<string, string> = { admin: server.adminToken };
    const api = async (method: string, route: string, body?: unknown, token = server!.adminToken) => {
      const res = await fetch(`${url}/api${route}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: (await res.json()) as any };
    };

    // A hand-driven spawner: its token, its command stream (launch commands carry agent tokens).
    minted.spawner = (await api('POST', '/spawner-tokens', {})).body.token;
    const spawnerHeaders = { authorization: `Bearer ${minted.spawner}`, 'beidou-spawner-instance': 'box' };
    const controller = new AbortController();
    streams.push(controller);
    const stream = await fetch(`${url}/api/spawner/stream?max_agents=4`, {
      headers: spawnerHeaders,
      signal: controller.signal,
    });
    expect(stream.status).toBe(200);
    const launches: any[] = [];
    let wake: (() => void) | null = null;
    const parser = createParser({
      onEvent: (e) => {
        const command = JSON.parse(e.data);
        if (command.type === 'launch') launches.push(command);
        wake?.();
      },
    });
    void (async () => {
      const decoder = new TextDecoder();
      try {
        for await (const chunk of stream.body!) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
      } catch {
        // aborted at the end
      }
    })();
    const launchOf = async (agentId: string) => {
      for (;;) {
        const found = launches.find((l) => l.agent_id === agentId);
        if (found) return found;
        await new Promise<void>((r) => (wake = r));
      }
    };

    const created = (await api('POST', '/tasks', { task: 'a small task' })).body;
    minted.root = created.token;
    minted.rootLaunch = (await launchOf(created.root_agent_id)).token;
    minted.rootAgain = (await api('POST', `/agents/${created.root_agent_id}/token`, {})).body.token;
    expect(
      (
        await fetch(`${url}/api/spawner/agents/${created.root_agent_id}/started`, {
          method: 'POST',
          headers: { ...spawnerHeaders, 'content-type': 'application/json' },
          body: JSON.stringify({ session_id: 'sess-1', resumed: false }),
        })
      ).status,
    ).toBe(200);

    const root = await connectAgent(url, minted.rootLaunch);
    agents.push(root);
    const team = await root.call('create_team', {
      name: 'crew',
      task: 'help',
      roles: [{ role: 'worker', skill: 'worker', description: 'helps' }],
    });
    if (!team.ok) throw new Error(`create_team: ${JSON.stringify(team.error)}`);
    const childId = team.value.members[0].agent_id as string;
    minted.child = (await launchOf(childId)).token;
    const child = await connectAgent(url, minted.child);
    agents.push(child);
    expect((await child.call('send_message', { to: created.root_agent_id, content: 'done' })).ok).toBe(true);
    expect((await api('POST', '/hook/post-tool-use', {}, minted.root)).status).toBe(200);
    // Refusals log their requests too.
    expect((await api('GET', '/tasks', undefined, minted.child)).status).toBe(401);
    expect((await api('GET', '/tasks', undefined, `${minted.child}x`)).status).toBe(401);

    const secret = readFileSync(homePaths(home).secret, 'utf8').trim();
    await Promise.allSettled(agents.splice(0).map((a) => a.close()));
    for (const s of streams.splice(0)) s.abort();
    await server.close();
    server = null;

    const text = log.lines.join('');
    // The log is a real trace: every request is in it, its authorization header redacted.
    const requests = log.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
    expect(requests.length).toBeGreaterThan(10);
    expect(requests.every((r) => r.req.headers.authorization === '[redacted]')).toBe(true);
    for (const [name, token] of Object.entries({ ...minted, secret })) {
      expect(token.length, name).toBeGreaterThan(16);
      expect(text.includes(token), `${name} token in the log`).toBe(false);
      // A JWT's signature alone is as good as the token.
      const signature = token.split('.')[2];
      if (signature) expect(text.includes(signature), `${name} token signature in the log`).toBe(false);
    }
  });
});
