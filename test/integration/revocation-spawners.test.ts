import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SYSTEM_LOG } from '../../src/events/catalogue.js';
import { until, within } from '../../src/testkit/poll.js';
import { durableEvents, waitForEvent } from '../support/events.js';
import { spawnSpawner, type SpawnerProcess } from '../support/process.js';
import { createTask, FakeClock, removeHome, startTestServer, type TestServer } from '../support/server.js';
import { handSpawner } from '../support/spawner-stream.js';

/**
 * Spawner tokens and revocation (docs/security.md, "Revocation"): the instances of one token
 * share BEIDOU_MAX_AGENTS_PER_SPAWNER, and `beidou spawner` stops on a `limit_exceeded`;
 * revoking every spawner token revokes the agent tokens their spawners were handed; a limited
 * spawner's heartbeat learns nothing of other tasks; a clock stepped back lets no revoked token
 * through; the system log's revocations can be read. The real server, real spawners from dist.
 */

const WAIT_MS = 10_000;

/** 400 with the token's code, or what got past authentication (the body's 400 `invalid_input`). */
async function standing(ts: TestServer, token: string): Promise<string> {
  const res = await fetch(`${ts.url}/api/hook/pre-tool-use`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
  });
  const body = (await res.json()) as { error: string };
  return res.status === 401 ? `401 ${body.error}` : String(res.status);
}

describe('spawner tokens and revocation', () => {
  let ts: TestServer | undefined;
  const streams: AbortController[] = [];
  const spawners: SpawnerProcess[] = [];
  afterEach(async () => {
    for (const s of spawners.splice(0)) {
      s.child.kill('SIGKILL');
      await s.exited;
    }
    for (const c of streams.splice(0)) c.abort();
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
  });

  it('the instances of one token share BEIDOU_MAX_AGENTS_PER_SPAWNER, asked for and held', async () => {
    ts = await startTestServer({ env: { BEIDOU_MAX_AGENTS_PER_SPAWNER: '2' } });
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const open = (instance: string, max: number) => handSpawner(ts!, instance, streams, max, { token });
    const first = await open('one', 2);
    expect(first.status).toBe(200);
    // Another instance of the same token asking for any more is refused, naming what the others ask for.
    const over = await fetch(`${ts.url}/api/spawner/stream?max_agents=1`, {
      headers: { authorization: `Bearer ${token}`, 'beidou-spawner-instance': 'two' },
    });
    expect(over.status).toBe(400);
    expect(await over.json()).toMatchObject({
      error: 'limit_exceeded',
      details: { limit: 'agents_per_spawner', max: 2, other_instances: 2, field: 'max_agents' },
    });
    // The same instance reconnecting replaces its own stream: not counted twice.
    const again = await open('one', 2);
    expect(again.status).toBe(200);
    await again.next('hello');

    // Its two agents held, its stream dropped (the agents stay its own until it misses its beats):
    // a new instance may connect, but the token holds its bound already, so it gets no launch.
    const tasks = [];
    for (let i = 0; i < 3; i++) tasks.push((await ts.api('POST', '/tasks', { task: `t${i}` })).body);
    await again.next('launch');
    await again.next('launch');
    streams.splice(streams.length - 1, 1)[0]!.abort();
    await until('the dropped stream to be gone', async () => {
      const { spawners: listed } = (await ts!.api('GET', '/spawners')).body;
      return listed.some((s: { name: string | null; connected: boolean }) => s.connected) ? undefined : true;
    });
    const third = await open('three', 2);
    expect(third.status).toBe(200);
    await third.next('hello');
    // A spawner of another token takes the one left: the scheduler had it to give, and gave it there.
    const other = await handSpawner(ts, 'other', streams, 1);
    const launch = await other.next('launch');
    const left = tasks.find((t) => t.root_agent_id === launch.agent_id);
    expect(left).toBeDefined();
    expect(third.received.map((c) => c.type)).toEqual(['hello']);
  });

  it('beidou spawner stops with a clear message when the server refuses its --max-agents', async () => {
    ts = await startTestServer({ env: { BEIDOU_MAX_AGENTS_PER_SPAWNER: '2' } });
    const scriptFile = path.join(ts.home, 'script.json');
    writeFileSync(scriptFile, JSON.stringify({}));
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const spawner = spawnSpawner(ts.url, token, scriptFile, [
      '--max-agents',
      '3',
      '--workdir',
      path.join(ts.home, 'w'),
    ]);
    spawners.push(spawner);
    expect(await within(spawner.exited, WAIT_MS, 'the spawner to stop')).toBe(1);
    expect(spawner.stderr()).toContain('refused --max-agents 3 (400 limit_exceeded');
    expect(spawner.stderr()).toContain('BEIDOU_MAX_AGENTS_PER_SPAWNER');
  });

  it('revoke-spawners revokes the agent tokens their spawners were handed; a new spawner gets fresh ones', async () => {
    ts = await startTestServer();
    const held = await handSpawner(ts, 'box', streams);
    await held.next('hello');
    const task = (await ts.api('POST', '/tasks', { task: 'held' })).body;
    const launch = await held.next('launch', task.root_agent_id);
    expect(await standing(ts, launch.token)).toBe('400');

    const revoked = await ts.api('POST', '/spawner-tokens/revoke', {});
    expect(await standing(ts, launch.token)).toBe('401 token_revoked');
    expect(revoked.body).toMatchObject({ ok: true, gen: 1, streams_closed: 1, agents_revoked: 1 });
    const events = durableEvents(ts, task.task_id).filter((e) => e.event === 'agent.tokens_revoked');
    expect(events).toEqual([
      expect.objectContaining({ agent_id: task.root_agent_id, spawner_id: expect.stringMatching(/\.box$/) }),
    ]);
    await within(held.ended, WAIT_MS, 'the revoked stream to end');

    const next = await handSpawner(ts, 'new', streams);
    const relaunch = await next.next('launch', task.root_agent_id);
    expect(await standing(ts, relaunch.token)).toBe('400');
  });

  it("a limited spawner's heartbeat learns nothing of other tasks' agents: unknown_agent, as for none", async () => {
    ts = await startTestServer();
    const a = await createTask(ts);
    const b = await createTask(ts);
    const limited = (await ts.api('POST', '/spawner-tokens', { task_ids: [a.task_id] })).body.token as string;
    const hand = await handSpawner(ts, 'hand-a', streams, 4, { token: limited });
    await hand.next('hello');
    const ghost = 'ag_000000000000';
    const beat = await hand.post('/heartbeat', {
      agents: [b.root_agent_id, ghost, a.root_agent_id].map((agent_id, i) => ({
        agent_id,
        pid: 100 + i,
        session_id: null,
      })),
    });
    expect(beat.status).toBe(200);
    const stops = [await hand.next('stop'), await hand.next('stop'), await hand.next('stop')];
    expect(Object.fromEntries(stops.map((s) => [s.agent_id, s.reason]))).toEqual({
      [b.root_agent_id]: 'unknown_agent',
      [ghost]: 'unknown_agent',
      // Of its own task, only not its own: the answer any spawner gets.
      [a.root_agent_id]: 'reassigned',
    });
  });

  it('a clock stepped back lets no revoked token through, and mints none dated in its future', async () => {
    const clock = new FakeClock();
    ts = await startTestServer({ clock });
    const task = await createTask(ts);
    const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const beat = (token: string) =>
      fetch(`${ts!.url}/api/spawner/heartbeat`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'beidou-spawner-instance': 'x' },
      }).then((r) => r.status);
    expect([await standing(ts, task.token), await beat(spawnerToken)]).toEqual(['400', 200]);
    // NTP steps the clock back ten minutes; then both revocations.
    clock.advance(-600);
    await ts.api('POST', `/agents/${task.root_agent_id}/revoke-tokens`, {});
    await ts.api('POST', '/spawner-tokens/revoke', {});
    expect([await standing(ts, task.token), await beat(spawnerToken)]).toEqual(['401 token_revoked', 401]);
    const fresh = (await ts.api('POST', `/agents/${task.root_agent_id}/token`, {})).body.token as string;
    const freshSpawner = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    expect([await standing(ts, fresh), await beat(freshSpawner)]).toEqual(['400', 200]);
    const iat = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).iat as number;
    expect(iat(fresh)).toBeLessThanOrEqual(clock.now());
    expect(iat(freshSpawner)).toBeLessThanOrEqual(clock.now());
  });

  it('the system log (the revocations of spawner tokens) is readable by the admin like a task log', async () => {
    ts = await startTestServer();
    expect((await ts.api('GET', `/tasks/${SYSTEM_LOG}/events`)).body).toEqual({ events: [], cursor: 0 });
    await ts.api('POST', '/spawner-tokens/revoke', {});
    const read = await ts.api('GET', `/tasks/${SYSTEM_LOG}/events`);
    expect(read.status).toBe(200);
    expect(read.body.events).toEqual([
      expect.objectContaining({
        seq: 1,
        event: 'spawner_tokens.revoked',
        task_id: SYSTEM_LOG,
        before: expect.any(Number),
      }),
    ]);
    // Still no task of that name.
    expect((await ts.api('GET', `/tasks/${SYSTEM_LOG}`)).status).toBe(404);
    await waitForEvent(ts, SYSTEM_LOG, (e) => e.event === 'spawner_tokens.revoked');
  });
});
