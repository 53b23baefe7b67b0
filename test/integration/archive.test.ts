import { appendFileSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { beidou, buildCli } from '../support/cli.js';
import {
  connectAgent,
  createTask,
  FakeClock,
  removeHome,
  startTestServer,
  tempHome,
  type TestServer,
} from '../support/server.js';
import { STORE, storeEnv, withDatabase } from '../support/store.js';

/**
 * History leaves memory (docs/architecture.md, "History leaves memory"): an ended task is
 * unloaded after BEIDOU_ARCHIVE_AFTER_S by the server's clock (a fake one here, moved by
 * hand: no sleep), read back from the store when asked for, and a start reads only the
 * archive index for it. Store-agnostic: the JSONL files and stats.db, or PostgreSQL's
 * events and archived_tasks, are touched through the helpers below.
 */

const AFTER_S = 600;

/** A clock two hours behind: what it stamps is old enough for `beidou stats rebuild` (wall clock) to archive. */
function pastClock(): FakeClock {
  const clock = new FakeClock();
  clock.advance(-7200);
  return clock;
}

/** An ended task with some history: a message, a read of it, a question answered, then terminated by the admin. */
async function endedTask(ts: TestServer): Promise<{ taskId: string; rootId: string; token: string }> {
  const { task_id, root_agent_id, token } = await createTask(ts, { name: 'finished' });
  expect((await ts.api('POST', `/agents/${root_agent_id}/send`, { content: 'hello root' })).status).toBe(200);
  const root = await connectAgent(ts.url, token);
  try {
    const read = await root.call('read_inbox', { wait_s: 0 });
    expect(read.ok).toBe(true);
  } finally {
    await root.close();
  }
  expect((await ts.api('POST', `/tasks/${task_id}/terminate`, {})).status).toBe(200);
  return { taskId: task_id, rootId: root_agent_id, token };
}

/** Everything the API answers about a task, its events and its root. */
async function reads(ts: TestServer, taskId: string, rootId: string) {
  const list = (await ts.api('GET', '/tasks')).body.tasks.find((t: { task_id: string }) => t.task_id === taskId);
  return {
    list,
    detail: (await ts.api('GET', `/tasks/${taskId}`)).body,
    events: (await ts.api('GET', `/tasks/${taskId}/events`)).body,
    page: (await ts.api('GET', `/tasks/${taskId}/events?since=2&limit=2`)).body,
    agent: (await ts.api('GET', `/agents/${rootId}`)).body,
  };
}

/** The first `n` events of a task's SSE stream, then the stream is left. */
async function streamed(ts: TestServer, taskId: string, n: number): Promise<number[]> {
  const abort = new AbortController();
  const res = await fetch(`${ts.url}/api/tasks/${taskId}/events/stream`, {
    headers: { authorization: `Bearer ${ts.adminToken}` },
    signal: abort.signal,
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const seqs: number[] = [];
  let text = '';
  while (seqs.length < n) {
    const { value, done } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString('utf8');
    const blocks = text.split('\n\n');
    text = blocks.pop()!;
    for (const block of blocks) {
      const data = block.split('\n').find((l) => l.startsWith('data:'));
      if (data) seqs.push(JSON.parse(data.slice(5)).seq);
    }
  }
  abort.abort();
  return seqs;
}

/** Damages a stored event in the middle of a task's history, in place (a start that reads it quarantines the task). */
async function damageMiddle(home: string, taskId: string): Promise<void> {
  if (STORE === 'embedded') {
    const file = path.join(home, 'events', `${taskId}.jsonl`);
    const lines = readFileSync(file, 'utf8').split('\n');
    // Same length, no longer JSON: size and last line unchanged.
    lines[1] = '#'.repeat(lines[1]!.length);
    writeFileSync(file, lines.join('\n'));
    return;
  }
  await withDatabase(home, (c) =>
    c.query(`UPDATE events SET body = '{"not":"an event"}' WHERE task_id = $1 AND seq = 2`, [taskId]),
  );
}

/** One more event at the end of a task's stored history, behind the server's back. */
async function growHistory(home: string, taskId: string, seq: number, ts: number): Promise<void> {
  // Longer than the tail a start reads of a file: its last line's seq is found all the same.
  const line = JSON.stringify({ seq, ts, event: 'liveness_check', task_id: taskId, note: 'x'.repeat(20_000) });
  if (STORE === 'embedded') return appendFileSync(path.join(home, 'events', `${taskId}.jsonl`), `${line}\n`);
  await withDatabase(home, (c) =>
    c.query('INSERT INTO events (task_id, seq, ts, event, body) VALUES ($1, $2, $3, $4, $5)', [
      taskId,
      seq,
      ts,
      'liveness_check',
      line,
    ]),
  );
}

/** The archive index gone: stats.db deleted (embedded), the table emptied (PostgreSQL). */
async function dropIndex(home: string): Promise<void> {
  if (STORE === 'embedded') {
    for (const suffix of ['', '-wal', '-shm']) rmSync(path.join(home, 'stats.db') + suffix, { force: true });
    return;
  }
  await withDatabase(home, (c) => c.query('DELETE FROM archived_tasks'));
}

describe('history leaves memory', () => {
  let ts: TestServer | null = null;
  let home = '';
  beforeAll(() => buildCli(false));
  afterEach(async () => {
    await ts?.close();
    ts = null;
    removeHome(home);
  });

  const start = async (clock: FakeClock, env: Record<string, string> = {}) =>
    (ts = await startTestServer({
      home,
      clock,
      env: { BEIDOU_ARCHIVE_AFTER_S: String(AFTER_S), BEIDOU_WATCHDOG_S: '3600', ...env },
    }));

  it('unloads an ended task at the exact second, and answers every read of it as before', async () => {
    home = tempHome();
    const clock = new FakeClock();
    const server = await start(clock);
    const { taskId, rootId, token } = await endedTask(server);
    const live = await createTask(server, { name: 'still running' });
    const before = await reads(server, taskId, rootId);
    expect(before.detail.task.status).toBe('terminated');
    const show = () => beidou(['task', 'show', taskId, '--server', server.url, '--home', server.home]);
    const shownBefore = await show();
    expect(shownBefore.code).toBe(0);
    const refusedBefore = await server.api('GET', '/tasks', undefined, token);
    expect(refusedBefore.status).toBe(401);
    const { registry } = server.server.services;
    const eventCount = before.events.events.length;

    clock.advance(AFTER_S - 1);
    expect(await server.server.archiver.tick()).toEqual([]);
    expect(registry.state.tasks.has(taskId)).toBe(true);

    clock.advance(1);
    expect(await server.server.archiver.tick()).toEqual([taskId]);
    // Out of memory: the registry's maps and the log's copy.
    const task = before.detail;
    expect(registry.state.tasks.has(taskId)).toBe(false);
    for (const a of task.agents) expect(registry.state.agents.has(a.agent_id)).toBe(false);
    for (const q of task.questions) expect(registry.state.questions.has(q.qid)).toBe(false);
    expect(registry.log.read(taskId, 0, 1_000)).toEqual([]);
    expect(registry.log.durableSeq(taskId)).toBe(0);
    // The running task stays.
    expect(registry.state.tasks.has(live.task_id)).toBe(true);

    expect(await reads(server, taskId, rootId)).toEqual(before);
    expect(await show()).toEqual(shownBefore);
    expect(await streamed(server, taskId, eventCount)).toEqual(before.events.events.map((e: { seq: number }) => e.seq));
    const refused = await server.api('GET', '/tasks', undefined, token);
    expect(refused.status).toBe(401);
    expect(refused.body).toEqual(refusedBefore.body);
    expect((await server.api('POST', `/tasks/${taskId}/terminate`, {})).body.error).toBe('already_terminating');
    const send = await server.api('POST', `/agents/${rootId}/send`, { content: 'too late' });
    expect([send.status, send.body.error]).toEqual([409, 'recipient_terminated']);
    expect((await server.api('POST', `/agents/${rootId}/token`, {})).body.error).toBe('agent_terminated');
    // Nothing was appended to it by those refusals.
    expect((await server.api('GET', `/tasks/${taskId}/events`)).body.events.length).toBe(eventCount);
  });

  it('a restart replays the live tasks and reads only the index of the archived ones', async () => {
    home = tempHome();
    const clock = pastClock();
    let server = await start(clock);
    const ended = await endedTask(server);
    const live = await createTask(server, { name: 'still running' });
    const liveEvents = (await server.api('GET', `/tasks/${live.task_id}/events`)).body.events.length;
    clock.advance(AFTER_S);
    expect(await server.server.archiver.tick()).toEqual([ended.taskId]);
    const listed = (await server.api('GET', '/tasks')).body.tasks;
    const refused = await server.api('GET', '/tasks', undefined, ended.token);
    expect(refused.body.error).toBe('agent_terminated');
    await server.close();

    // A start that read the archived task's history would find this and quarantine it.
    await damageMiddle(home, ended.taskId);
    server = await start(pastClock());
    expect(server.server.startup).toEqual({ replayed_events: liveEvents, archived_tasks: 1, warm: null });
    // Its root's token is refused as before: its agents are found in the index's records, read at this first lookup.
    expect(await server.api('GET', '/tasks', undefined, ended.token)).toMatchObject({
      status: 401,
      body: refused.body,
    });
    expect((await server.api('GET', '/tasks')).body.tasks).toEqual(listed);
    expect(server.server.services.registry.quarantined.size).toBe(0);
  });

  it('does not trust an index entry whose history grew, and rewrites it', async () => {
    home = tempHome();
    const clock = pastClock();
    let server = await start(clock);
    const ended = await endedTask(server);
    const events = (await server.api('GET', `/tasks/${ended.taskId}/events`)).body.events;
    clock.advance(AFTER_S);
    expect(await server.server.archiver.tick()).toEqual([ended.taskId]);
    const sizeBefore = STORE === 'embedded' ? statSync(path.join(home, 'events', `${ended.taskId}.jsonl`)).size : 0;
    await server.close();

    await growHistory(home, ended.taskId, events.length + 1, clock.now());
    if (STORE === 'embedded')
      expect(statSync(path.join(home, 'events', `${ended.taskId}.jsonl`)).size).toBeGreaterThan(sizeBefore);
    const clock2 = pastClock();
    server = await start(clock2);
    expect(server.server.startup).toEqual({ replayed_events: events.length + 1, archived_tasks: 0, warm: null });
    const after = (await server.api('GET', `/tasks/${ended.taskId}/events`)).body.events;
    expect(after.map((e: { seq: number }) => e.seq)).toEqual([
      ...events.map((e: { seq: number }) => e.seq),
      events.length + 1,
    ]);

    // Archived again with its new mark: the next start trusts it.
    clock2.advance(2 * AFTER_S);
    expect(await server.server.archiver.tick()).toEqual([ended.taskId]);
    await server.close();
    server = await start(pastClock());
    expect(server.server.startup).toEqual({ replayed_events: 0, archived_tasks: 1, warm: null });
    expect((await server.api('GET', `/tasks/${ended.taskId}`)).body.task.event_count).toBe(events.length + 1);
  });

  it('without the index a start replays everything; beidou stats rebuild rebuilds the index from the logs', async () => {
    home = tempHome();
    const clock = pastClock();
    let server = await start(clock);
    const ended = await endedTask(server);
    const all = (await server.api('GET', `/tasks/${ended.taskId}/events`)).body.events.length;
    const detail = (await server.api('GET', `/tasks/${ended.taskId}`)).body;
    clock.advance(AFTER_S);
    expect(await server.server.archiver.tick()).toEqual([ended.taskId]);
    await server.close();

    await dropIndex(home);
    server = await start(pastClock());
    expect(server.server.startup).toEqual({ replayed_events: all, archived_tasks: 0, warm: null });
    await server.close();
    ts = null;

    await dropIndex(home);
    const run = await beidou(['stats', 'rebuild', '--home', home], await storeEnv(home));
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('rebuilt the archive index: 1 ended tasks');
    server = await start(pastClock());
    expect(server.server.startup).toEqual({ replayed_events: 0, archived_tasks: 1, warm: null });
    expect((await server.api('GET', `/tasks/${ended.taskId}`)).body).toEqual(detail);
  });

  it('keeps in memory an ended task whose agent a spawner has not yet let go of', async () => {
    home = tempHome();
    const clock = new FakeClock();
    const server = await start(clock);
    const { task_id, root_agent_id } = await createTask(server);
    const { registry } = server.server.services;
    // The root is a spawner's (no spawner runs here, so its ack is the test's to give).
    await registry.commit([
      {
        event: 'launch.assigned',
        task_id,
        agent_id: root_agent_id,
        spawner_id: 'sp_test',
        resume: false,
        session_id: null,
      },
    ]);
    expect((await server.api('POST', `/tasks/${task_id}/terminate`, {})).status).toBe(200);
    expect(registry.task(task_id)!.status).toBe('terminated');
    expect(registry.agent(root_agent_id)!.terminate_consumed).toBe(false);

    clock.advance(AFTER_S);
    expect(await server.server.archiver.tick()).toEqual([]);
    expect(registry.state.tasks.has(task_id)).toBe(true);

    // The spawner acknowledges the termination: now nothing live points at the task.
    await registry.commit([{ event: 'terminate.consumed', task_id, agent_id: root_agent_id, via: 'spawner' }]);
    expect(await server.server.archiver.tick()).toEqual([task_id]);
    expect(registry.state.agents.has(root_agent_id)).toBe(false);
  });
});
