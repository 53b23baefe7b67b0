import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { createParser } from 'eventsource-parser';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { durableEvents, waitForEvent } from '../support/events.js';
import { connectAgent, createTask, removeHome, startTestServer, tempHome, type TestServer } from '../support/server.js';

/**
 * Writes are all or nothing, and a damaged log does not take every task down: a spawner
 * batch that cannot be stored leaves no trace, a commit cut at a line boundary replays as
 * if it never happened, and a task file that fails verification is quarantined while the
 * other tasks run. Embedded store only (vitest.config.ts): it corrupts `events/*.jsonl`; the
 * PostgreSQL store's quarantine is in test/postgres/store.test.ts.
 */

/** Log lines at warn and above, captured for the assertions. */
function capturingLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'warn' }, sink), lines };
}

const fileOf = (home: string, taskId: string) => path.join(home, 'events', `${taskId}.jsonl`);
const linesOf = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0);

describe('log integrity', { timeout: 60_000 }, () => {
  const servers: TestServer[] = [];
  const streams: AbortController[] = [];
  let home = '';
  afterEach(async () => {
    for (const s of streams.splice(0)) s.abort();
    for (const s of servers.splice(0)) await s.close();
    removeHome(home);
  });
  const start = async (logger?: ReturnType<typeof capturingLogger>['logger']) => {
    const ts = await startTestServer({ home, ...(logger ? { logger } : {}) });
    servers.push(ts);
    return ts;
  };
  const stop = async (ts: TestServer) => {
    await ts.close();
    servers.splice(servers.indexOf(ts), 1);
  };

  /** A hand-driven spawner with its command stream open; `post` sends a raw body. */
  async function spawner(ts: TestServer) {
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const headers = { authorization: `Bearer ${token}`, 'beidou-spawner-instance': 'box-1' };
    const controller = new AbortController();
    streams.push(controller);
    const res = await fetch(`${ts.url}/api/spawner/stream?max_agents=4`, { headers, signal: controller.signal });
    const queue: any[] = [];
    let wake: (() => void) | null = null;
    const parser = createParser({
      onEvent: (e) => {
        queue.push(JSON.parse(e.data));
        wake?.();
      },
    });
    void (async () => {
      const decoder = new TextDecoder();
      try {
        for await (const chunk of res.body!) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
      } catch {
        // aborted at the end of the test
      }
    })();
    const next = async (type: string): Promise<any> => {
      for (;;) {
        const i = queue.findIndex((c) => c.type === type);
        if (i >= 0) return queue.splice(i, 1)[0];
        await new Promise<void>((r) => (wake = r));
      }
    };
    const post = async (route: string, body: string) => {
      const r = await fetch(`${ts.url}/api/spawner${route}`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body,
      });
      return { status: r.status, body: (await r.json()) as any };
    };
    return { next, post };
  }

  it('refuses a spawner batch whose third event cannot be serialised with a 400, and writes none of it', async () => {
    home = tempHome();
    let ts = await start();
    const s = await spawner(ts);
    const task = (await ts.api('POST', '/tasks', { task: 'batch' })).body;
    await s.next('launch');
    expect(
      (await s.post(`/agents/${task.root_agent_id}/started`, JSON.stringify({ session_id: 'sess-1', resumed: false })))
        .status,
    ).toBe(200);
    await waitForEvent(ts, task.task_id, (e) => e.event === 'agent_started');
    const before = durableEvents(ts, task.task_id);

    // Parses fine (JSON.parse is iterative), but JSON.stringify recurses and throws RangeError.
    const deep = `${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}`;
    const text = (t: string) => `{"event":"assistant_text","message_id":"m1","text":"${t}","stop_reason":null}`;
    const batch = `{"events":[${text('one')},${text('two')},{"event":"tool_called","message_id":"m1","tool_use_id":"tu1","name":"Bash","input":${deep}}]}`;
    const refused = await s.post(`/agents/${task.root_agent_id}/events`, batch);
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ error: 'invalid_input', details: { field: 'events[2]' } });
    expect(refused.body.message).toMatch(/^events\[2\] \(tool_called\) cannot be stored/);

    // The next batch is numbered right after what was there: nothing of the refused one exists.
    expect((await s.post(`/agents/${task.root_agent_id}/events`, `{"events":[${text('three')}]}`)).status).toBe(200);
    const after = durableEvents(ts, task.task_id);
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.slice(before.length)).toEqual([
      expect.objectContaining({ seq: before.length + 1, event: 'assistant_text', text: 'three' }),
    ]);
    const detail = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    expect(linesOf(fileOf(home, task.task_id))).toHaveLength(after.length);

    // And a restart rebuilds exactly what memory held.
    for (const c of streams.splice(0)) c.abort();
    await stop(ts);
    ts = await start();
    const restarted = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    expect(restarted.task).toEqual(detail.task);
    expect(restarted.agents[0].status).toBe(detail.agents[0].status);
    expect(restarted.stats).toEqual(detail.stats);
  });

  it('drops a multi-event commit cut at a line boundary after its first line, and says so', async () => {
    home = tempHome();
    let ts = await start();
    const task = await createTask(ts);
    const root = await connectAgent(ts.url, task.token);
    expect(await root.call('signal_review', { detail: '[REVIEW REQUIRED] all done' })).toMatchObject({ ok: true });
    await root.close();
    const pending = (await ts.api('GET', '/questions/pending')).body as Array<{ qid: string; origin: string }>;
    const review = pending.find((q) => q.origin === 'root_review')!;
    const beforeDetail = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    const beforeSeq = durableEvents(ts, task.task_id).length;

    // Approve: the answer and its cascade (root terminated, task done) are one commit.
    expect(
      await ts.api('POST', `/questions/${review.qid}/answer`, { answers: [{ selected_labels: ['Approve'] }] }),
    ).toMatchObject({ status: 200 });
    const commit = durableEvents(ts, task.task_id).slice(beforeSeq);
    expect(commit.length).toBeGreaterThanOrEqual(3);
    expect((await ts.api('GET', `/tasks/${task.task_id}`)).body.task.status).toBe('done');
    await stop(ts);

    // A power loss that kept only the commit's first line.
    const file = fileOf(home, task.task_id);
    const lines = linesOf(file);
    expect(lines).toHaveLength(beforeSeq + commit.length);
    expect(JSON.parse(lines[beforeSeq]!)).toMatchObject({
      seq: beforeSeq + 1,
      commit: beforeSeq + 1,
      of: commit.length,
    });
    writeFileSync(file, `${lines.slice(0, beforeSeq + 1).join('\n')}\n`);

    const { logger, lines: logLines } = capturingLogger();
    ts = await start(logger);
    const after = (await ts.api('GET', `/tasks/${task.task_id}`)).body;
    expect(after).toEqual(beforeDetail);
    expect(after.task.status).toBe('running');
    expect(after.agents[0].status).toBe('review_pending');
    expect((await ts.api('GET', '/questions/pending')).body.map((q: { qid: string }) => q.qid)).toContain(review.qid);
    expect(linesOf(file)).toHaveLength(beforeSeq);
    const warning = logLines.find((l) => l.level === 40 && String(l.msg).includes('incomplete commit'));
    expect(warning).toMatchObject({ file, first_seq: beforeSeq + 1, last_seq: beforeSeq + 1, of: commit.length });
    expect(String(warning!.msg)).toContain(file);

    // The task goes on from there: the question can be answered again, and new lines follow.
    expect(
      await ts.api('POST', `/questions/${review.qid}/answer`, { answers: [{ selected_labels: ['Approve'] }] }),
    ).toMatchObject({ status: 200 });
    expect(durableEvents(ts, task.task_id).map((e) => e.seq)).toEqual(
      Array.from({ length: beforeSeq + commit.length }, (_, i) => i + 1),
    );
  });

  it('quarantines a task whose log fails verification and runs every other task', async () => {
    home = tempHome();
    let ts = await start();
    const corrupt = await createTask(ts, { task: 'bad json in the middle' });
    const doubled = await createTask(ts, { task: 'a seq written twice' });
    const healthy = await createTask(ts, { task: 'untouched' });
    for (const t of [corrupt, doubled, healthy]) {
      for (const n of [1, 2])
        expect((await ts.api('POST', `/agents/${t.root_agent_id}/send`, { content: `hello ${n}` })).status).toBe(200);
    }
    await stop(ts);

    const badFile = fileOf(home, corrupt.task_id);
    const bad = linesOf(badFile);
    bad[1] = '{"seq":2,"ts":1,"event":"send_mes';
    writeFileSync(badFile, `${bad.join('\n')}\n`);
    // Two writers on one home: the same seq twice.
    const twiceFile = fileOf(home, doubled.task_id);
    const twice = linesOf(twiceFile);
    writeFileSync(
      twiceFile,
      `${[...twice, twice.at(-1)!.replace(/"message_id":"[^"]+"/, '"message_id":"msg_other"')].join('\n')}\n`,
    );
    // A folder by a task file's name cannot be read as a log: that one task is quarantined.
    const folder = path.join(home, 'events', 'tsk_folder.jsonl');
    mkdirSync(folder);

    const { logger, lines: logLines } = capturingLogger();
    ts = await start(logger);
    const listed = (await ts.api('GET', '/tasks')).body.tasks as Array<Record<string, any>>;
    const byId = new Map(listed.map((t) => [t.task_id, t]));
    expect(byId.get(corrupt.task_id)).toMatchObject({
      status: 'quarantined',
      quarantine: { file: badFile, line: 2, reason: 'not valid JSON' },
    });
    expect(byId.get(doubled.task_id)).toMatchObject({
      status: 'quarantined',
      text: 'a seq written twice',
      quarantine: {
        file: twiceFile,
        line: twice.length + 1,
        reason: `seq ${twice.length}, expected ${twice.length + 1}`,
      },
    });
    expect(byId.get('tsk_folder')).toMatchObject({
      status: 'quarantined',
      quarantine: { file: folder, line: 0, reason: 'not a regular file' },
    });
    expect(byId.get(healthy.task_id)).toMatchObject({ status: 'running' });
    expect(byId.get(healthy.task_id)).not.toHaveProperty('quarantine');

    // The detail shows what the events before the fault made of it.
    const detail = (await ts.api('GET', `/tasks/${doubled.task_id}`)).body;
    expect(detail).toMatchObject({
      task: { status: 'quarantined' },
      quarantine: { file: twiceFile, line: twice.length + 1 },
    });
    expect(detail.agents.map((a: { agent_id: string }) => a.agent_id)).toEqual([doubled.root_agent_id]);
    expect(detail.agents[0].inbox_depth).toBe(2);
    expect(logLines.some((l) => l.level === 50 && l.task_id === corrupt.task_id && l.line === 2)).toBe(true);

    // No writes: its agents' tokens, and the admin's writes.
    for (const t of [corrupt, doubled]) {
      const res = await fetch(`${ts.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${t.token}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '0' } },
        }),
      });
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({ error: 'task_quarantined' });
    }
    expect(await ts.api('POST', `/tasks/${doubled.task_id}/terminate`, {})).toMatchObject({
      status: 409,
      body: { error: 'task_quarantined' },
    });
    expect(await ts.api('POST', `/agents/${doubled.root_agent_id}/send`, { content: 'x' })).toMatchObject({
      status: 409,
      body: { error: 'task_quarantined' },
    });
    expect(await ts.api('POST', `/agents/${doubled.root_agent_id}/token`, {})).toMatchObject({
      status: 409,
      body: { error: 'task_quarantined' },
    });
    expect(linesOf(twiceFile)).toHaveLength(twice.length + 1);

    // Every other task runs.
    expect((await ts.api('POST', `/agents/${healthy.root_agent_id}/send`, { content: 'still here' })).status).toBe(200);
    const agent = await connectAgent(ts.url, healthy.token);
    const inbox = await agent.call('read_inbox', {});
    expect(inbox.ok).toBe(true);
    await agent.close();
    expect((await ts.api('POST', '/tasks', { task: 'a new one', spawn: false })).status).toBe(201);
  });
});
