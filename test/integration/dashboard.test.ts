import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createParser } from 'eventsource-parser';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CONTENT_SECURITY_POLICY } from '../../src/server/http/dashboard.js';
import { PACKAGE_ROOT } from '../../src/util/version.js';
import { until, within } from '../../src/testkit/poll.js';
import {
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';

/**
 * The dashboard as the server serves it (docs/api.md, "GET /"): the page `npm run build`
 * writes into dist/web/, its hashed assets, the favicon, the policy that keeps scripts to
 * the server's own files, and a clear 503 when the page was never built; and the live
 * stream the page follows, `GET /api/tasks/stream`. What the page does in a browser is
 * test/dashboard-e2e (real Chromium).
 */

const WEB = path.join(PACKAGE_ROOT, 'dist', 'web');
const WAIT_MS = 10_000;

describe('the dashboard page', () => {
  let ts: TestServer;
  afterEach(async () => {
    await ts.close();
    removeHome(ts.home);
  });
  beforeAll(() => {
    if (!existsSync(path.join(WEB, 'index.html')))
      throw new Error('dist/web/index.html is missing: run `npm run build` (npm test does) before this file');
  });

  it('serves the built page at / and /dashboard without a token, never cached, under a self-only policy', async () => {
    ts = await startTestServer();
    for (const route of ['/', '/dashboard']) {
      const res = await fetch(`${ts.url}${route}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      expect(res.headers.get('cache-control')).toBe('no-cache');
      expect(res.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      const html = await res.text();
      expect(html).toBe(readFileSync(path.join(WEB, 'index.html'), 'utf8'));
      expect(html).toContain('<title>Beidou</title>');
      // No CJK glyph the page's fonts may lack, and no script but the page's own files.
      expect(html).not.toMatch(/[\u3000-\u9fff]/);
      for (const tag of html.match(/<script\b[^>]*>/g) ?? []) expect(tag).toMatch(/\ssrc="\/assets\//);
    }
    const policy = CONTENT_SECURITY_POLICY;
    expect(policy).toMatch(/(^|; )script-src 'self'(;|$)/);
    expect(policy).toMatch(/(^|; )default-src 'self'(;|$)/);
    expect(policy).not.toMatch(/unsafe-inline|unsafe-eval|https?:/);
  });

  it('serves the hashed assets the page names with their types, cached for good, and 404s one that is not there', async () => {
    ts = await startTestServer();
    const html = await (await fetch(`${ts.url}/`)).text();
    const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    const types = { '.js': /^(text|application)\/javascript/, '.css': /^text\/css/ };
    for (const ext of ['.js', '.css'] as const)
      expect(
        assets.some((a) => a.endsWith(ext)),
        `the page names a ${ext} asset`,
      ).toBe(true);
    for (const asset of assets) {
      expect(path.basename(asset)).toMatch(/-[A-Za-z0-9_-]{6,}\.(js|css)$/); // a content hash in the name
      const res = await fetch(`${ts.url}${asset}`);
      expect([asset, res.status]).toEqual([asset, 200]);
      const ext = path.extname(asset) as keyof typeof types;
      expect(res.headers.get('content-type')).toMatch(types[ext]);
      expect(res.headers.get('cache-control')).toMatch(/max-age=31536000/);
      expect(res.headers.get('cache-control')).toMatch(/immutable/);
      expect(await res.text()).toBe(readFileSync(path.join(WEB, asset), 'utf8'));
    }
    const missing = await fetch(`${ts.url}/assets/index-nothere.js`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ error: 'not_found' });
  });

  it('serves the favicon as SVG at /favicon.ico and /favicon.svg', async () => {
    ts = await startTestServer();
    for (const route of ['/favicon.ico', '/favicon.svg']) {
      const res = await fetch(`${ts.url}${route}`);
      expect([route, res.status]).toEqual([route, 200]);
      expect(res.headers.get('content-type')).toMatch(/^image\/svg\+xml/);
      expect(await res.text()).toMatch(/^<svg [^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    }
  });

  it('answers 503 saying to run npm run build when the page was not built: a page for a browser, JSON for a script', async () => {
    const empty = mkdtempSync(path.join(os.tmpdir(), 'beidou-web-'));
    try {
      ts = await startTestServer({ webRoot: empty });
      const page = await fetch(`${ts.url}/`, { headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' } });
      expect(page.status).toBe(503);
      expect(page.headers.get('content-type')).toMatch(/^text\/html/);
      expect(await page.text()).toContain('<code>npm run build</code>');
      for (const route of ['/dashboard', '/favicon.ico']) {
        const res = await fetch(`${ts.url}${route}`, { headers: { accept: 'application/json' } });
        expect([route, res.status]).toEqual([route, 503]);
        expect(await res.json()).toEqual({
          error: 'dashboard_not_built',
          message: expect.stringContaining('run `npm run build`'),
        });
      }
      // The API does not depend on the page.
      expect((await ts.api('GET', '/tasks')).status).toBe(200);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe('GET /api/skills (the new-task form)', () => {
  let ts: TestServer;
  afterEach(async () => {
    await ts.close();
    removeHome(ts.home);
  });

  it('lists the skills a task can start with, by name with their descriptions; admin token only', async () => {
    ts = await startTestServer();
    const res = await ts.api('GET', '/skills');
    expect(res.status).toBe(200);
    const names = res.body.skills.map((s: { name: string }) => s.name);
    expect(names).toEqual(expect.arrayContaining(['leader', 'worker']));
    for (const skill of res.body.skills)
      expect(skill).toEqual({ name: expect.any(String), description: expect.stringMatching(/\S/) });
    expect((await ts.api('GET', '/skills', undefined, '')).status).toBe(401);
  });
});

interface SseEvent {
  event: string;
  data: any;
}

/** `GET /api/tasks/stream`, read with a plain SSE parser: every event kept in order. */
async function openTasksStream(ts: TestServer, token = ts.adminToken) {
  const controller = new AbortController();
  const res = await fetch(`${ts.url}/api/tasks/stream`, {
    headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' },
    signal: controller.signal,
  });
  const events: SseEvent[] = [];
  let wake: () => void = () => {};
  const parser = createParser({
    onEvent: (e) => {
      events.push({ event: e.event ?? 'message', data: JSON.parse(e.data) });
      wake();
    },
  });
  const ended = (async () => {
    if (!res.ok || !res.body) return 'refused' as const;
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
      return 'ended by the server' as const;
    } catch {
      return 'aborted' as const;
    } finally {
      wake();
    }
  })();
  let taken = 0;
  /** The next event named `name` that `matches`, after those already taken. */
  const next = (name: string, matches: (data: any) => boolean = () => true): Promise<any> =>
    within(
      new Promise<any>((resolve, reject) => {
        const look = () => {
          while (taken < events.length) {
            const e = events[taken++]!;
            if (e.event === name && matches(e.data)) {
              wake = () => {}; // a later event is the next caller's to take
              return resolve(e.data);
            }
          }
          void ended.then(
            (how) =>
              how !== 'refused' &&
              taken >= events.length &&
              reject(new Error(`stream ${how} before a matching ${name}`)),
          );
        };
        wake = look;
        look();
      }),
      WAIT_MS,
      `a ${name} event`,
    );
  return { res, events, next, ended, close: () => controller.abort() };
}

describe('GET /api/tasks/stream', () => {
  let ts: TestServer;
  const agents: TestAgent[] = [];
  const streams: Array<() => void> = [];
  afterEach(async () => {
    for (const close of streams.splice(0)) close();
    await Promise.all(agents.splice(0).map((a) => a.close().catch(() => {})));
    await ts.close();
    removeHome(ts.home);
  });

  it('refuses a request without the admin token (401), an agent token included', async () => {
    ts = await startTestServer();
    const task = await createTask(ts);
    const none = await fetch(`${ts.url}/api/tasks/stream`);
    expect(none.status).toBe(401);
    expect(await none.json()).toMatchObject({ error: 'missing_token' });
    for (const [token, code] of [
      ['nope', 'invalid_token'],
      [task.token, 'wrong_token_kind'],
    ] as const) {
      const res = await fetch(`${ts.url}/api/tasks/stream`, { headers: { authorization: `Bearer ${token}` } });
      expect([code, res.status]).toEqual([code, 401]);
      expect(await res.json()).toMatchObject({ error: code });
    }
    expect(ts.server.adminStreams()).toBe(0);
  });

  it('sends tasks and questions on connect, shaped as GET /api/tasks and GET /api/questions/pending, and again after a new task, a question and its answer', async () => {
    ts = await startTestServer();
    const first = await createTask(ts, { name: 'first', task: 'the first task' });
    const stream = await openTasksStream(ts);
    streams.push(stream.close);
    expect(stream.res.status).toBe(200);
    expect(stream.res.headers.get('content-type')).toMatch(/^text\/event-stream/);

    const tasks = await stream.next('tasks');
    expect(tasks).toEqual((await ts.api('GET', '/tasks')).body);
    expect(tasks.tasks.map((t: { task_id: string }) => t.task_id)).toEqual([first.task_id]);
    expect(tasks.tasks[0]).toMatchObject({ name: 'first', agents: { total: 1, live: 1 }, cost_usd: 0 });
    expect(await stream.next('questions')).toEqual({ questions: [] });

    // A new task: the list again, newest first, exactly as GET /api/tasks says.
    const second = await createTask(ts, { name: 'second', task: 'the second task' });
    const withSecond = await stream.next('tasks', (d) =>
      d.tasks.some((t: { task_id: string }) => t.task_id === second.task_id),
    );
    expect(withSecond.tasks.map((t: { task_id: string }) => t.task_id)).toEqual([second.task_id, first.task_id]);

    // The second task's root asks the user: the question, with the asker's and the task's names.
    const root = await connectAgent(ts.url, second.token);
    agents.push(root);
    const asking = root.call('ask_user', {
      questions: [
        {
          question: 'Which colour?',
          header: 'Colour',
          multiSelect: false,
          options: [
            { label: 'Blue', description: 'calm' },
            { label: 'Red', description: 'loud' },
          ],
        },
      ],
    });
    const asked = await stream.next('questions', (d) => d.questions.length === 1);
    const pending = (await ts.api('GET', '/questions/pending')).body;
    expect(asked).toEqual({ questions: pending });
    const rootName = (await ts.api('GET', `/agents/${second.root_agent_id}`)).body.name as string;
    expect(asked.questions[0]).toMatchObject({
      task_id: second.task_id,
      task_name: 'second',
      asker_agent_id: second.root_agent_id,
      asker_name: rootName,
      subject_name: null,
    });

    // Answered from the page: the list empties, and the asker has its answer.
    expect(
      (
        await ts.api('POST', `/questions/${asked.questions[0].qid}/answer`, {
          answers: [{ selected_labels: ['Blue'] }],
        })
      ).status,
    ).toBe(200);
    expect(await stream.next('questions', (d) => d.questions.length === 0)).toEqual({ questions: [] });
    expect((await asking).ok).toBe(true);

    // Nothing is sent twice for nothing: every questions event differs from the one before it.
    const sent = stream.events.filter((e) => e.event === 'questions').map((e) => JSON.stringify(e.data));
    sent.forEach((s, i) => {
      if (i > 0) expect(s).not.toBe(sent[i - 1]);
    });
  });

  it('counts against BEIDOU_MAX_ADMIN_STREAMS with the event streams (429 past it), and frees its place when the client goes', async () => {
    ts = await startTestServer({ env: { BEIDOU_MAX_ADMIN_STREAMS: '2' } });
    const task = await createTask(ts);
    const one = await openTasksStream(ts);
    streams.push(one.close);
    await one.next('tasks');
    const controller = new AbortController();
    streams.push(() => controller.abort());
    const events = await fetch(`${ts.url}/api/tasks/${task.task_id}/events/stream`, {
      headers: { authorization: `Bearer ${ts.adminToken}` },
      signal: controller.signal,
    });
    expect(events.status).toBe(200);
    await until('two admin streams open', () => (ts.server.adminStreams() === 2 ? true : undefined));

    const refused = await fetch(`${ts.url}/api/tasks/stream`, {
      headers: { authorization: `Bearer ${ts.adminToken}` },
    });
    expect(refused.status).toBe(429);
    expect(await refused.json()).toEqual({
      error: 'limit_exceeded',
      message: expect.stringContaining('2 admin streams'),
      details: { limit: 'admin_streams', max: 2, setting: 'BEIDOU_MAX_ADMIN_STREAMS' },
    });

    one.close();
    expect(await one.ended).toBe('aborted');
    await until('its place freed', () => (ts.server.adminStreams() === 1 ? true : undefined));
    const again = await openTasksStream(ts);
    streams.push(again.close);
    expect(again.res.status).toBe(200);
    expect((await again.next('tasks')).tasks).toHaveLength(1);
  });

  it('ends cleanly when the server stops, and a closed stream stops receiving', async () => {
    ts = await startTestServer();
    const stream = await openTasksStream(ts);
    streams.push(stream.close);
    await stream.next('tasks');
    await stream.next('questions');
    const before = stream.events.length;
    await ts.close();
    expect(await within(stream.ended, WAIT_MS, 'the stream ends with the server')).toBe('ended by the server');
    expect(stream.events).toHaveLength(before);
    expect(ts.server.adminStreams()).toBe(0);
  });

  it('answers HEAD with the stream type and holds no place', async () => {
    ts = await startTestServer({ env: { BEIDOU_MAX_ADMIN_STREAMS: '1' } });
    const head = await fetch(`${ts.url}/api/tasks/stream`, {
      method: 'HEAD',
      headers: { authorization: `Bearer ${ts.adminToken}` },
    });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(ts.server.adminStreams()).toBe(0);
    const stream = await openTasksStream(ts);
    streams.push(stream.close);
    expect(stream.res.status).toBe(200);
  });
});
