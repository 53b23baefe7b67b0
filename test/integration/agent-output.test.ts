import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/util/logger.js';
import { COMMAND_LINE_MAX_BYTES } from '../../src/spawner/line-reader.js';
import { eventsNamed, waitForEvent, waitUntil } from '../support/events.js';
import { CLI, SCRIPTED_AGENT } from '../support/process.js';
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

describe('a 1 MB line from a command agent', () => {
  let ts: TestServer | undefined;
  let spawner: ChildProcess | undefined;
  afterEach(async () => {
    if (spawner && spawner.exitCode === null) {
      const gone = new Promise((r) => spawner!.once('exit', r));
      spawner.kill('SIGKILL');
      await gone;
    }
    spawner = undefined;
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
  });

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

    const spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token as string;
    const spool = mkdtempSync(path.join(os.tmpdir(), 'beidou-spool-'));
    spawner = spawn(
      process.execPath,
      [
        CLI,
        'spawner',
        '--server',
        ts.url,
        '--token',
        spawnerToken,
        '--adapter',
        'command',
        '--command',
        `"${process.execPath}" "${SCRIPTED_AGENT}"`,
        '--spool-dir',
        spool,
        '--workdir',
        path.join(ts.home, 'agents'),
      ],
      {
        env: { ...process.env, BEIDOU_SCRIPT: scriptFile, BEIDOU_LOG_LEVEL: 'info', BEIDOU_LOG_FORMAT: 'json' },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    const logLines: any[] = [];
    let partial = '';
    spawner.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      const parts = (partial + chunk).split('\n');
      partial = parts.pop() ?? '';
      for (const p of parts) if (p.startsWith('{')) logLines.push(JSON.parse(p));
    });

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

    // The note: the line's real length, and what was read of it.
    const said = `[${root.name}] ${hostile}`;
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
