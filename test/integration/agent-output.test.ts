import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AGENT_STDERR_MAX_CHARS } from '../../src/events/catalogue.js';
import { STDERR_LINE_MAX_BYTES, STDERR_LINES } from '../../src/spawner/adapter.js';
import { createLogger } from '../../src/util/logger.js';
import { COMMAND_LINE_MAX_BYTES } from '../../src/spawner/line-reader.js';
import { eventsNamed, waitForEvent, waitUntil } from '../support/events.js';
import { CLI, SCRIPTED_AGENT, scriptedAgentArgs } from '../support/process.js';
import { removeHome, startTestServer, type TestServer } from '../support/server.js';

/**
 * What an agent prints cannot stall its spawner: a command agent printing a 1 MB line of
 * `eyJ…` (the worst case of the old token pattern, minutes of backtracking) then more
 * lines, through a real `beidou spawner` logging at info (so every line of the agent is
 * scrubbed and logged) and a real server dropping a spawner after three missed heartbeats.
 * The heartbeats are seen arriving in the server's own request log (trace). The gap they
 * leave is measured in `npm run bench` (section 10).
 */

const HEARTBEAT_S = 1;
const ONE_MB = 1_000_000;
/** A text the server takes (BEIDOU_MAX_CONTENT_CHARS is 200,000) on a line of more than 64 KiB. */
const LONG_TEXT = 'a long answer. '.repeat(12_000);

let ts: TestServer | undefined;
let spawner: ChildProcess | undefined;
afterEach(async () => {
  // SIGTERM: a spawner kills its agents' process groups on the way out.
  if (spawner && spawner.exitCode === null) {
    const gone = new Promise((r) => spawner!.once('exit', r));
    spawner.kill('SIGTERM');
    await gone;
  }
  spawner = undefined;
  if (ts) {
    await ts.close();
    removeHome(ts.home);
    ts = undefined;
  }
});

/**
 * A real `beidou spawner` for `server` logging JSON at info; its log lines parsed as they
 * come, and `logged(check)` resolves with the first that passes `check`.
 */
async function startSpawner(server: TestServer, args: string[], env: Record<string, string>) {
  const spawnerToken = (await server.api('POST', '/spawner-tokens', {})).body.token as string;
  const spool = path.join(server.home, 'spool');
  spawner = spawn(
    process.execPath,
    [
      CLI,
      'spawner',
      '--server',
      server.url,
      '--token',
      spawnerToken,
      '--spool-dir',
      spool,
      '--workdir',
      path.join(server.home, 'work'),
      ...args,
    ],
    {
      env: { ...process.env, BEIDOU_LOG_LEVEL: 'info', BEIDOU_LOG_FORMAT: 'json', ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  const logLines: any[] = [];
  const waiters = new Set<() => void>();
  let partial = '';
  spawner.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop() ?? '';
    for (const p of parts) if (p.startsWith('{')) logLines.push(JSON.parse(p));
    for (const wake of [...waiters]) wake();
  });
  const child = spawner;
  const logged = (check: (line: any) => boolean, what: string) =>
    new Promise<any>((resolve, reject) => {
      const look = () => {
        const found = logLines.find(check);
        if (!found) return;
        waiters.delete(look);
        resolve(found);
      };
      waiters.add(look);
      child.once('exit', (code) => reject(new Error(`the spawner exited (${code}) before logging ${what}`)));
      look();
    });
  return { logLines, logged };
}

describe('a 1 MB line from a command agent', () => {
  it('is cut with a note, its token-like text scrubbed, and the spawner keeps its heartbeat and its agent', async () => {
    // The server's request log, read as it is written: each heartbeat the spawner sends wakes the waiters.
    const heartbeats: number[] = [];
    const wakers = new Set<() => void>();
    const requestLog = {
      write(line: string) {
        const entry = JSON.parse(line);
        if (entry.msg === 'request' && entry.req?.url === '/api/spawner/heartbeat') {
          heartbeats.push(performance.now());
          for (const wake of [...wakers]) wake();
        }
      },
    };
    const heartbeatsAfter = (count: number) =>
      new Promise<void>((resolve) => {
        const target = heartbeats.length + count;
        const check = () => {
          if (heartbeats.length < target) return;
          wakers.delete(check);
          resolve();
        };
        wakers.add(check);
      });
    ts = await startTestServer({
      env: { BEIDOU_SPAWNER_HEARTBEAT_S: String(HEARTBEAT_S) },
      logger: createLogger('trace', requestLog),
    });
    const task = (await ts.api('POST', '/tasks', { task: 'print a lot' })).body as {
      task_id: string;
      root_agent_id: string;
    };
    const root = (await ts.api('GET', `/agents/${task.root_agent_id}`)).body as { name: string };
    // A real token of the agent's, quoted in an event line the server would refuse.
    const token = (await ts.api('POST', `/agents/${task.root_agent_id}/token`, {})).body.token as string;
    const hostile = 'eyJ'.repeat(ONE_MB / 3 + 1).slice(0, ONE_MB);
    const scriptFile = path.join(ts.home, 'script.json');
    writeFileSync(
      scriptFile,
      JSON.stringify({
        root: [
          { say: hostile },
          { emit: { event: 'no_such_event', note: `my token is ${token}` } },
          // An event line past the 64 KiB the log keeps of a line: read whole and posted.
          { emit: { event: 'assistant_text', message_id: 'long', text: LONG_TEXT, stop_reason: null } },
          {
            emit: {
              event: 'assistant_text',
              message_id: 'after-the-line',
              text: 'still here',
              stop_reason: 'end_turn',
            },
          },
        ],
      }),
    );

    const { logLines } = await startSpawner(
      ts,
      [
        '--adapter',
        'command',
        '--command',
        `"${process.execPath}" "${SCRIPTED_AGENT}"`,
        ...scriptedAgentArgs(scriptFile),
      ],
      { BEIDOU_SCRIPT: scriptFile },
    );

    const started = await waitForEvent(ts, task.task_id, (e) => e.event === 'agent_started', {
      what: 'the agent started',
    });
    // Whichever comes first: the line after the long one, or the server giving up on the spawner.
    const first = await waitForEvent(
      ts,
      task.task_id,
      (e) => e.event === 'spawner.lost' || (e.event === 'assistant_text' && e.message_id === 'after-the-line'),
      { what: 'the line after the long one', timeoutMs: 20_000 },
    );
    expect(first.event).toBe('assistant_text');
    const long = await waitForEvent(ts, task.task_id, (e) => e.event === 'assistant_text' && e.message_id === 'long');
    expect(long.text).toBe(LONG_TEXT);
    // More than three heartbeats later (the server drops a spawner after three missed), still its agent's.
    await heartbeatsAfter(4);
    const events = await waitUntil(ts, task.task_id, (ev) => ev);
    expect(eventsNamed(events, 'spawner.lost')).toEqual([]);
    expect(eventsNamed(events, 'agent_started')).toHaveLength(1);
    expect(eventsNamed(events, 'launch.assigned').map((e) => e.spawner_id)).toEqual([started.spawner_id]);
    const spawners = (await ts.api('GET', '/spawners')).body.spawners as Array<{
      spawner_id: string;
      agents: Array<{ agent_id: string; status: string }>;
    }>;
    expect(spawners.find((s) => s.spawner_id === started.spawner_id)?.agents).toEqual([
      expect.objectContaining({ agent_id: task.root_agent_id, status: 'active' }),
    ]);

    // The note: the line's real length, and what was logged of it (one note: the long event line was not logged).
    const said = `[${root.name}] ${hostile}`;
    expect(logLines.filter((l) => l.bytes !== undefined)).toHaveLength(1);
    const note = logLines.find((l) => l.bytes !== undefined);
    expect(note).toMatchObject({
      level: 40,
      agent: task.root_agent_id,
      bytes: Buffer.byteLength(said),
      kept: COMMAND_LINE_MAX_BYTES,
    });
    expect(note.msg).toContain(`printed a line of ${Buffer.byteLength(said)} bytes`);
    // The line itself, logged cut.
    const logged = logLines.find((l) => typeof l.msg === 'string' && l.msg.startsWith(`[${root.name}] eyJ`));
    expect(logged.msg).toBe(said.slice(0, COMMAND_LINE_MAX_BYTES));
    // The invalid event line is logged with its `line` field, the token cut out of it.
    const invalid = logLines.find((l) => typeof l.line === 'string' && l.line.includes('no_such_event'));
    expect(invalid.msg).toContain('printed an event the server would refuse');
    expect(invalid.line).toContain('my token is [redacted-token]');
    const everything = logLines.map((l) => JSON.stringify(l)).join('\n');
    expect(everything).not.toContain(token);
    expect(everything).not.toContain(token.split('.')[2]);
  });
});

describe("an agent's stderr and over-long lines", () => {
  it('posts a bounded stderr tail, cut lines marked and tokens cut out, with each failure event', async () => {
    ts = await startTestServer();
    // A command agent that quotes its own token on stderr among many lines, then a megabyte
    // without a newline, and dies; three times (the third escalates to the user).
    const agent = path.join(ts.home, 'noisy-agent.mjs');
    writeFileSync(
      agent,
      [
        "for (let i = 0; i < 300; i++) process.stderr.write('noise ' + i + '\\n');",
        `process.stderr.write('curl -H "Authorization: Bearer ' + process.env.BEIDOU_TOKEN + '" $BEIDOU_URL\\n');`,
        "process.stderr.write('x'.repeat(1_000_000), () => process.exit(1));",
      ].join('\n'),
    );
    const task = (await ts.api('POST', '/tasks', { task: 'crash loudly' })).body as { task_id: string };
    await startSpawner(
      ts,
      [
        '--adapter',
        'command',
        '--command',
        `"${process.execPath}" "${agent}"`,
        '--restart-backoff',
        '0.1,0.1,0.1',
        // The sandbox hides the temporary folder the agent is written to.
        '--sandbox-bind',
        `${agent}:ro`,
      ],
      {},
    );
    const events = await waitUntil(
      ts,
      task.task_id,
      (ev) => (ev.some((e) => e.event === 'root_crash_escalation') ? ev : undefined),
      { what: 'three crashes and the escalation', timeoutMs: 30_000 },
    );
    const tails = [
      ...eventsNamed(events, 'agent_error'),
      ...eventsNamed(events, 'agent_crashed'),
      ...eventsNamed(events, 'root_crash_escalation'),
    ].map((e) => e.stderr as string);
    expect(tails).toHaveLength(7);
    const cutNote = `${'x'.repeat(STDERR_LINE_MAX_BYTES)} [cut: a line of 1000000 bytes]`;
    for (const tail of tails) {
      const lines = tail.split('\n');
      expect(lines).toHaveLength(STDERR_LINES);
      expect(lines.at(-1)).toBe(cutNote);
      expect(lines.at(-2)).toBe('curl -H "Authorization: Bearer [redacted-token]" $BEIDOU_URL');
      expect(lines[0]).toBe(`noise ${300 - STDERR_LINES + 2}`);
      expect(tail.length).toBeLessThan(AGENT_STDERR_MAX_CHARS);
      expect(tail).not.toMatch(/eyJ[\w-]+\.[\w-]+\.[\w-]+/);
    }
  });

  it('says in the log when the claude adapter cuts a line past 4 MiB (then dropped: no longer JSON)', async () => {
    ts = await startTestServer();
    // Not Claude Code: a program in its place that prints one stream-json line of 5 MiB, then waits.
    const bin = path.join(ts.home, 'fake-claude');
    writeFileSync(
      bin,
      [
        `#!${process.execPath}`,
        "const text = 'y'.repeat(5 * 1024 * 1024);",
        "process.stdout.write(JSON.stringify({ type: 'assistant', message: { content: [{ type: 'text', text }] } }) + '\\n');",
        'process.stdin.resume();',
      ].join('\n'),
    );
    chmodSync(bin, 0o755);
    const task = (await ts.api('POST', '/tasks', { task: 'print a long line' })).body as { root_agent_id: string };
    const { logged } = await startSpawner(
      ts,
      ['--adapter', 'claude', '--claude-bin', bin, '--skip-preflight', '--sandbox-bind', `${bin}:ro`],
      {},
    );
    const note = await logged((l) => l.bytes !== undefined, 'the note of the cut line');
    expect(note).toMatchObject({ level: 40, agent: task.root_agent_id, kept: 4 * 1024 * 1024 });
    expect(note.bytes).toBeGreaterThan(5 * 1024 * 1024);
    expect(note.msg).toContain(`printed a line of ${note.bytes} bytes`);
  });
});
