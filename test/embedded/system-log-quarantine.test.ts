import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SYSTEM_LOG } from '../../src/events/catalogue.js';
import { createTask, removeHome, startTestServer, tempHome, type TestServer } from '../support/server.js';

/**
 * A quarantined system log fails closed (docs/security.md, "Revocation"): the log of the
 * spawner tokens' revocations cannot be read, so which of them stand is not known, and none
 * is accepted (503 `system_log_quarantined`) nor minted nor revoked (409 `task_quarantined`)
 * until it is repaired; agents' tokens, in their own tasks' logs, work as before. The real
 * server on a home whose `events/beidou.jsonl` fails verification.
 */

describe('a quarantined system log', () => {
  let ts: TestServer | undefined;
  afterEach(async () => {
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
  });

  it('refuses every spawner token, mints and revokes none, and leaves agents alone', async () => {
    const home = tempHome();
    ts = await startTestServer({ home });
    const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const task = await createTask(ts);
    await ts.close();
    mkdirSync(path.join(home, 'events'), { recursive: true });
    writeFileSync(path.join(home, 'events', `${SYSTEM_LOG}.jsonl`), '{"seq":1,"ts":1,"event":"spawner_tokens.rev\n');
    ts = await startTestServer({ home });

    const headers = { authorization: `Bearer ${spawnerToken}`, 'beidou-spawner-instance': 'x' };
    const beat = await fetch(`${ts.url}/api/spawner/heartbeat`, { method: 'POST', headers });
    expect(beat.status).toBe(503);
    expect(beat.headers.get('www-authenticate')).toBeNull();
    const refusal = (await beat.json()) as { error: string; message: string };
    expect(refusal.error).toBe('system_log_quarantined');
    expect(refusal.message).toContain('beidou doctor --repair');
    expect((await fetch(`${ts.url}/api/spawner/stream?max_agents=1`, { headers })).status).toBe(503);
    for (const route of ['/spawner-tokens', '/spawner-tokens/revoke']) {
      const res = await ts.api('POST', route, {});
      expect({ route, status: res.status, error: res.body.error }).toEqual({
        route,
        status: 409,
        error: 'task_quarantined',
      });
    }
    // Agents' tokens are in their tasks' logs: unaffected.
    const agent = await fetch(`${ts.url}/api/hook/pre-tool-use`, {
      method: 'POST',
      headers: { authorization: `Bearer ${task.token}` },
    });
    expect(agent.status).toBe(400);
  });
});
