import { execFileSync } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readSpoolFile, Spool } from '../../src/spawner/spool.js';
import { eventsNamed, waitUntil } from '../support/events.js';
import { spawnServer, spawnSpawner, type ServerProcess, type SpawnerProcess, processApi } from '../support/process.js';
import { removeHome, startTestServer, tempHome, type TestServer } from '../support/server.js';

type Ev = { seq: number; ts: number; event: string; [k: string]: any };

const freePort = () =>
  new Promise<number>((resolve) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });

/** Polls until `check` gives a value (a condition on files or another process's API; nothing to subscribe to). */
async function until<T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const text = (id: string) => ({ emit: { event: 'assistant_text', message_id: id, text: id, stop_reason: 'end_turn' } });

describe('the spawner spool', () => {
  const dirs: string[] = [];
  const tmp = (prefix: string) => {
    const d = mkdtempSync(path.join(os.tmpdir(), prefix));
    dirs.push(d);
    return d;
  };
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('ignores a torn last entry, and never numbers an entry twice across restarts and acknowledgements', async () => {
    const dir = tmp('beidou-spool-unit-');
    const opts = { maxBytes: 1 << 20, newInstance: () => 'box-1' };
    const a = await Spool.open(dir, opts);
    await Promise.all([a.append('/ack', { n: 1 }), a.append('/ack', { n: 2 }), a.append('/ack', { n: 3 })]);
    await a.close();
    // The process died halfway through writing a fourth entry.
    appendFileSync(path.join(dir, 'spool.jsonl'), '{"seq":4,"route":"/ack","bo');
    const b = await Spool.open(dir, opts);
    expect(b.instance).toBe('box-1');
    expect(b.backlog).toBe(3);
    await b.append('/ack', { n: 4 });
    const { entries, goodBytes, fileBytes } = readSpoolFile(path.join(dir, 'spool.jsonl'));
    expect(goodBytes).toBe(fileBytes); // the torn bytes were cut off, not glued onto
    expect(entries.map((e) => e.body)).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]);
    const seqs = entries.map((e) => e.seq);
    expect(seqs.slice(0, 3)).toEqual([1, 2, 3]);
    expect(seqs[3]).toBeGreaterThan(3);

    // Sent in order and acknowledged: the file empties, and a later entry still numbers past them all.
    const sent: number[] = [];
    const stop = new AbortController();
    const delivering = b.deliver(
      async (_route, _body, seq) => {
        sent.push(seq);
        if (sent.length === 4) stop.abort();
        return 'ok';
      },
      stop.signal,
      () => undefined,
    );
    await delivering;
    expect(sent).toEqual(seqs);
    await b.close();
    expect(readSpoolFile(path.join(dir, 'spool.jsonl')).entries).toEqual([]);
    const c = await Spool.open(dir, opts);
    await c.append('/ack', { n: 5 });
    expect(readSpoolFile(path.join(dir, 'spool.jsonl')).entries[0]!.seq).toBeGreaterThan(seqs[3]!);
    await c.close();
    // A second live spawner may not share the dir (here the lock names our parent, which is alive).
    writeFileSync(path.join(dir, 'lock.pid'), `${process.ppid}\n`);
    await expect(Spool.open(dir, opts)).rejects.toThrow(/in use by spawner pid/);
  });

  it('coalesces one agent’s events into one post, and keeps non-observing entries when full', async () => {
    const dir = tmp('beidou-spool-unit-');
    const spool = await Spool.open(dir, { maxBytes: 300, newInstance: () => 'box-2' });
    const ev = (i: number) => ({
      events: [{ event: 'assistant_text', message_id: `m${i}`, text: 'x'.repeat(50), stop_reason: null }],
    });
    for (let i = 0; i < 6; i++) await spool.append('/agents/a/events', ev(i), true);
    await spool.append('/ack', { type: 'terminate', agent_id: 'a' }, false);
    expect(spool.dropped).toBeGreaterThan(0); // past 300 bytes the observing events are dropped…
    const posts: Array<{ route: string; count: number }> = [];
    const stop = new AbortController();
    await spool.deliver(
      async (route, body) => {
        posts.push({ route, count: route.endsWith('/events') ? (body as { events: unknown[] }).events.length : 0 });
        if (route === '/ack') stop.abort();
        return 'ok';
      },
      stop.signal,
      () => undefined,
    );
    // …the kept ones go as one post, and the terminate ack is kept past the bound.
    expect(posts).toEqual([
      { route: '/agents/a/events', count: 6 - spool.dropped },
      { route: '/ack', count: 0 },
    ]);
    await spool.close();
  });
});

describe('a server outage', () => {
  let home = '';
  let proc: ServerProcess | undefined;
  let ts: TestServer | undefined;
  const spawners: SpawnerProcess[] = [];
  const dirs: string[] = [];
  beforeAll(() => {
    execFileSync('npx', ['tsc', '-b'], { cwd: path.resolve(import.meta.dirname, '../..'), stdio: 'inherit' });
  });
  afterEach(async () => {
    for (const s of spawners.splice(0)) {
      s.child.kill('SIGKILL');
      await s.exited;
    }
    proc?.child.kill('SIGKILL');
    await proc?.exited;
    proc = undefined;
    if (ts) await ts.close();
    ts = undefined;
    if (home) removeHome(home);
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('loses nothing and doubles nothing: the spool delivers what the agent did while the server was down, once, even replayed', async () => {
    home = tempHome();
    const port = await freePort();
    proc = await spawnServer(home, {}, port);
    const api = processApi(home, () => proc!);
    const work = mkdtempSync(path.join(os.tmpdir(), 'beidou-outage-'));
    dirs.push(work);
    // The agent waits on a file of its own folder, which the sandbox shows (not `work`: the spool and the workdir in it stay hidden).
    const signals = path.join(work, 'signals');
    mkdirSync(signals);
    const go = path.join(signals, 'go');
    const during = ['d1', 'd2', 'd3', 'd4', 'd5'];
    const scriptFile = path.join(work, 'script.json');
    writeFileSync(
      scriptFile,
      JSON.stringify({
        // The MCP call after the outage began fails: the agent exits with code 1.
        root: [text('b1'), text('b2'), { wait_file: go }, ...during.map(text), { call: 'list_peers', args: {} }],
        'root@resume': [text('after-resume')],
      }),
    );
    const token = (await api('POST', '/spawner-tokens', {})).token as string;
    const task = await api('POST', '/tasks', { task: 'outage' });
    const events = async (): Promise<Ev[]> =>
      (await api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).events as Ev[];
    const spoolDir = path.join(work, 'spool');
    const args = [
      '--spool-dir',
      spoolDir,
      '--workdir',
      path.join(work, 'agents'),
      '--restart-backoff',
      '0.2,0.5,1',
      '--sandbox-bind',
      `${signals}:ro`,
    ];
    spawners.push(spawnSpawner(proc.url, token, scriptFile, args));
    await until('the texts before the outage', async () =>
      (await events()).filter((e) => e.event === 'assistant_text').length === 2 ? true : undefined,
    );

    proc.child.kill('SIGKILL');
    await proc.exited;
    writeFileSync(go, '');
    // Everything the agent did meanwhile, and its exit, are on disk in the spool.
    const spoolFile = path.join(spoolDir, 'spool.jsonl');
    await until('the agent exit in the spool', () =>
      existsSync(spoolFile) && readFileSync(spoolFile, 'utf8').includes('ServerUnreachable') ? true : undefined,
    );
    expect(readFileSync(spoolFile, 'utf8')).toContain('"d5"');
    const snapshot = path.join(work, 'spool-snapshot');
    cpSync(spoolDir, snapshot, { recursive: true });

    proc = await spawnServer(home, {}, port);
    const after = await until('the resumed agent', async () => {
      const ev = await events();
      return ev.some((e) => e.event === 'assistant_text' && e.text === 'after-resume') ? ev : undefined;
    });
    const texts = after.filter((e) => e.event === 'assistant_text' && e.text !== 'script done').map((e) => e.text);
    expect(texts).toEqual(['b1', 'b2', ...during, 'after-resume']);
    expect(after.map((e) => e.seq)).toEqual(after.map((_, i) => i + 1));
    // The exit was the outage's, not the agent's: no strike, resumed with its session.
    expect(eventsNamed(after as any, 'agent_crashed')).toEqual([]);
    expect(eventsNamed(after as any, 'agent_error').map((e) => e.exception)).toEqual(['ServerUnreachable']);
    const starts = eventsNamed(after as any, 'agent_started');
    expect(starts.map((e) => e.resumed)).toEqual([false, true]);
    expect(starts[1]!.session_id).toBe(starts[0]!.session_id);
    expect(eventsNamed(after as any, 'spawner.spooled').length).toBeGreaterThan(0);

    // The spawner dies before it heard the acknowledgements: a new one replays the same spool.
    const first = spawners.pop()!;
    first.child.kill('SIGKILL');
    await first.exited;
    rmSync(spoolDir, { recursive: true, force: true });
    cpSync(snapshot, spoolDir, { recursive: true });
    const replaying = spawnSpawner(proc.url, token, scriptFile, args);
    spawners.push(replaying);
    await until('the replayed spool to be acknowledged', () =>
      readSpoolFile(spoolFile).entries.length === 0 ? true : undefined,
    );
    const final = await events();
    const replayedTexts = final.filter((e) => e.event === 'assistant_text').map((e) => e.text);
    expect(replayedTexts.filter((t) => during.includes(t))).toEqual(during);
    expect(eventsNamed(final as any, 'agent_error')).toHaveLength(1);
    expect(eventsNamed(final as any, 'agent_started').filter((e) => e.resumed)).toHaveLength(1);
    expect(final.map((e) => e.seq)).toEqual(final.map((_, i) => i + 1));
    expect(replaying.stderr()).not.toContain('refused');
  });

  it('an ask_user cut by a server restart (gateway_unavailable) is no crash: the agent resumes once, without a strike', async () => {
    home = tempHome();
    const port = await freePort();
    proc = await spawnServer(home, {}, port);
    const api = processApi(home, () => proc!);
    const work = mkdtempSync(path.join(os.tmpdir(), 'beidou-outage-'));
    dirs.push(work);
    const scriptFile = path.join(work, 'script.json');
    const question = {
      question: 'Which tone?',
      header: 'Tone',
      multiSelect: false,
      options: [
        { label: 'Formal', description: 'formal' },
        { label: 'Casual', description: 'casual' },
      ],
    };
    // The blocked ask_user ends with gateway_unavailable when the server stops: the agent exits with code 3.
    writeFileSync(
      scriptFile,
      JSON.stringify({
        root: [{ call: 'ask_user', args: { questions: [question] } }],
        'root@resume': [text('resumed')],
      }),
    );
    const token = (await api('POST', '/spawner-tokens', {})).token as string;
    const task = await api('POST', '/tasks', { task: 'ask during a restart' });
    const events = async (): Promise<Ev[]> =>
      (await api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).events as Ev[];
    spawners.push(
      spawnSpawner(proc.url, token, scriptFile, [
        '--spool-dir',
        path.join(work, 'spool'),
        '--workdir',
        path.join(work, 'agents'),
        '--restart-backoff',
        '0.2,0.5,1',
      ]),
    );
    await until('the question', async () =>
      (await events()).some((e) => e.event === 'question_asked') ? true : undefined,
    );

    proc.child.kill('SIGTERM');
    await proc.exited;
    proc = await spawnServer(home, {}, port);
    const after = await until('the resumed agent', async () => {
      const ev = await events();
      return ev.some((e) => e.event === 'assistant_text' && e.text === 'resumed') ? ev : undefined;
    });
    expect(eventsNamed(after as any, 'agent_crashed')).toEqual([]);
    expect(eventsNamed(after as any, 'agent_error').map((e) => [e.exception, e.msg])).toEqual([
      ['ServerUnreachable', 'exited with code 3 while the server was unreachable'],
    ]);
    expect(eventsNamed(after as any, 'agent_started').map((e) => e.resumed)).toEqual([false, true]);
    expect(after.map((e) => e.seq)).toEqual(after.map((_, i) => i + 1));
  });

  it('waits with backoff between restarts after real crashes: never three in 200 ms', async () => {
    ts = await startTestServer();
    const scriptFile = path.join(ts.home, 'script.json');
    writeFileSync(scriptFile, JSON.stringify({ root: [{ crash: 'boom' }] }));
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const task = (await ts.api('POST', '/tasks', { task: 'crashes' })).body as { task_id: string };
    spawners.push(
      spawnSpawner(ts.url, token, scriptFile, [
        '--workdir',
        path.join(ts.home, 'agents'),
        '--restart-backoff',
        '0.3,0.6',
      ]),
    );
    const events = await waitUntil(
      ts,
      task.task_id,
      (ev) => (eventsNamed(ev, 'agent_completed', (e) => e.stop_reason === 'crash_escalated').length ? ev : undefined),
      {
        what: 'the crash escalation',
        timeoutMs: 20_000,
      },
    );
    const crashes = eventsNamed(events, 'agent_crashed').map((e) => e.ts);
    const starts = eventsNamed(events, 'agent_started').map((e) => e.ts);
    expect(crashes).toHaveLength(3);
    expect(starts).toHaveLength(3);
    // Each restart comes at least its backoff step after the crash before it.
    expect(starts[1]! - crashes[0]!).toBeGreaterThanOrEqual(0.3 - 0.05);
    expect(starts[2]! - crashes[1]!).toBeGreaterThanOrEqual(0.6 - 0.05);
    expect(crashes[2]! - crashes[0]!).toBeGreaterThan(0.8);
  });

  it("keeps its spool file and the agents' new workspace folders the spawner user's alone (0600, 0700)", async () => {
    ts = await startTestServer();
    const tmp = (prefix: string) => {
      const d = mkdtempSync(path.join(os.tmpdir(), prefix));
      dirs.push(d);
      return d;
    };
    dirs.push(ts.home);
    const scriptFile = path.join(ts.home, 'script.json');
    writeFileSync(scriptFile, JSON.stringify({ root: [text('here')] }));
    // A spool file an older spawner left (created with the umask's mode), and one made anew.
    const spool = tmp('beidou-spool-modes-');
    writeFileSync(path.join(spool, 'spool.jsonl'), '', { mode: 0o644 });
    const fresh = tmp('beidou-spool-fresh-');
    await (await Spool.open(fresh, { maxBytes: 1 << 20, newInstance: () => 'box-2' })).close();
    expect(statSync(path.join(fresh, 'spool.jsonl')).mode & 0o777).toBe(0o600);
    const workdir = path.join(tmp('beidou-work-'), 'agents');
    const token = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const task = (await ts.api('POST', '/tasks', { task: 'private' })).body as {
      task_id: string;
      root_agent_id: string;
    };
    spawners.push(spawnSpawner(ts.url, token, scriptFile, ['--spool-dir', spool, '--workdir', workdir]));
    await waitUntil(ts, task.task_id, (ev) => (eventsNamed(ev, 'assistant_text').length > 0 ? ev : undefined), {
      what: 'the agent ran',
      timeoutMs: 20_000,
    });
    expect(statSync(path.join(spool, 'spool.jsonl')).mode & 0o777).toBe(0o600);
    for (const dir of [workdir, path.join(workdir, task.task_id), path.join(workdir, task.task_id, task.root_agent_id)])
      expect({ dir, mode: statSync(dir).mode & 0o777 }).toEqual({ dir, mode: 0o700 });
  });
});
