import { afterEach, describe, expect, it } from 'vitest';
import {
  connectAgent,
  createTask,
  FakeClock,
  removeHome,
  startTestServer,
  type TestServer,
} from '../support/server.js';
import { until } from '../../src/testkit/poll.js';

describe('MCP sessions', () => {
  let ts: TestServer;
  afterEach(async () => {
    await ts.close();
    removeHome(ts.home);
  });

  it('expires a Streamable HTTP session left idle with nothing open, and keeps one with an open stream', async () => {
    // The clock only moves when the test says so: however slow the machine, nothing
    // expires before both sessions exist.
    const clock = new FakeClock();
    ts = await startTestServer({ env: { BEIDOU_SESSION_IDLE_S: '1' }, clock });
    const task = await createTask(ts);
    const headers = {
      authorization: `Bearer ${task.token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    };
    // A bare client: initialize, and nothing left open.
    const init = await fetch(`${ts.url}/mcp`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bare', version: '0' } },
      }),
    });
    const sessionId = init.headers.get('mcp-session-id')!;
    await init.text();
    // The SDK client keeps a GET stream open: that session is in use and must stay.
    const sdk = await connectAgent(ts.url, task.token);
    expect(ts.server.mcpSessions()).toBe(2);
    clock.advance(5);
    await until('the idle session to expire', () => (ts.server.mcpSessions() === 1 ? true : undefined), 5_000);
    const stale = await fetch(`${ts.url}/mcp`, {
      method: 'POST',
      headers: { ...headers, 'mcp-session-id': sessionId },
      body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
    });
    expect(stale.status).toBe(404);
    expect((await sdk.call('list_peers')).ok).toBe(true);
    await sdk.close();
  });

  it("closes a terminated agent's sessions", async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const agent = await connectAgent(ts.url, task.token);
    expect(ts.server.mcpSessions()).toBe(1);
    await ts.api('POST', `/tasks/${task.task_id}/terminate`, {});
    await until('the session to close', () => (ts.server.mcpSessions() === 0 ? true : undefined), 5_000);
    await agent.close().catch(() => undefined);
  });
});
