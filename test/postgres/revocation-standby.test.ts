import { afterEach, describe, expect, it } from 'vitest';
import { until } from '../../src/testkit/poll.js';
import { createTask, removeHome, startTestServer, tempHome, type TestServer } from '../support/server.js';
import { freshDatabase, replicaSecrets } from '../support/store.js';

/**
 * Revocations are events (docs/security.md, "Revocation"): a warm standby follows them like
 * any other, so once it takes over it refuses what the active had revoked (an agent's tokens,
 * every spawner token minted before the revocation) and accepts what was minted after. Two
 * in-process servers on one fresh database; the active hands over by a clean stop.
 */

const servers: TestServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    await s.close().catch(() => undefined);
    removeHome(s.home);
  }
});

async function replica(db: string): Promise<TestServer> {
  const ts = await startTestServer({
    home: tempHome(),
    env: { BEIDOU_DATABASE_URL: db, ...replicaSecrets(`revoke:${db}`), BEIDOU_WATCHDOG_S: '3600' },
  });
  servers.push(ts);
  return ts;
}

/** The status of a bodiless POST with `token` (401 with its code; a token that passes gets to the body check, 400). */
async function statusOf(ts: TestServer, route: string, token: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${ts.url}${route}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, ...headers },
  });
  const body = (await res.json()) as { error?: string };
  return res.status === 401 ? `401 ${body.error}` : String(res.status);
}

describe('revocation on a standby', () => {
  it('a standby that takes over refuses the tokens the active revoked and accepts those minted after', async () => {
    const { url: db } = await freshDatabase();
    const active = await replica(db);
    const standby = await replica(db);
    expect([active.server.role(), standby.server.role()]).toEqual(['active', 'standby']);

    const task = await createTask(active);
    const oldSpawner = (await active.api('POST', '/spawner-tokens', {})).body.token as string;
    const newAgent = (await active.api('POST', `/agents/${task.root_agent_id}/token`, { revoke_previous: true })).body
      .token as string;
    expect((await active.api('POST', '/spawner-tokens/revoke', {})).status).toBe(200);
    const newSpawner = (await active.api('POST', '/spawner-tokens', {})).body.token as string;

    await active.close();
    servers.splice(servers.indexOf(active), 1);
    removeHome(active.home);
    await until('the standby active', () => (standby.server.role() === 'active' ? true : undefined), 15_000);

    const beat = (token: string) =>
      statusOf(standby, '/api/spawner/heartbeat', token, { 'beidou-spawner-instance': 'x' });
    expect(await statusOf(standby, '/api/hook/pre-tool-use', task.token)).toBe('401 token_revoked');
    expect(await statusOf(standby, '/api/hook/pre-tool-use', newAgent)).toBe('400');
    expect(await beat(oldSpawner)).toBe('401 token_revoked');
    expect(await beat(newSpawner)).toBe('200');
  });
});
