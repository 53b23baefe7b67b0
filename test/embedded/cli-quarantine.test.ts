import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { beidou, buildCli } from '../support/cli.js';
import { createTask, removeHome, startTestServer, type TestServer } from '../support/server.js';

/**
 * A quarantined task as the CLI shows it. Embedded store only (vitest.config.ts): it writes
 * a seq twice into the task's `events/{task_id}.jsonl`, as two writers on one home would;
 * the PostgreSQL store's key refuses that write (test/postgres/log.test.ts).
 */

beforeAll(() => buildCli(false), 120_000);

/** The cells of a table row: columns are two or more spaces apart. */
const cells = (line: string) => line.trim().split(/\s{2,}/);
/** The row of `stdout` whose first cell (after the tree's branches) is `first`. */
function row(stdout: string, first: string): string[] {
  const line = stdout.split('\n').find((l) => cells(l.replace(/^[\s│├└─]+/, ''))[0] === first);
  if (line === undefined) throw new Error(`no row ${first} in:\n${stdout}`);
  return cells(line.replace(/^[\s│├└─]+/, ''));
}

describe('a quarantined task from the CLI', { timeout: 60_000 }, () => {
  let ts: TestServer;
  afterAll(async () => {
    await ts?.close();
    if (ts) removeHome(ts.home);
  });

  it('task list and task show say it is quarantined and why; writes to it are refused (exit 1)', async () => {
    ts = await startTestServer();
    const home = ts.home;
    const task = await createTask(ts, { task: 'a seq written twice', name: 'doubled' });
    for (const n of [1, 2])
      expect((await ts.api('POST', `/agents/${task.root_agent_id}/send`, { content: `hello ${n}` })).status).toBe(200);
    await ts.close();
    // Two writers on one home: the same seq twice.
    const file = path.join(home, 'events', `${task.task_id}.jsonl`);
    const lines = readFileSync(file, 'utf8').split('\n').filter(Boolean);
    writeFileSync(
      file,
      `${[...lines, lines.at(-1)!.replace(/"message_id":"[^"]+"/, '"message_id":"msg_other"')].join('\n')}\n`,
    );
    ts = await startTestServer({ home });
    const cli = (...args: string[]) => beidou([...args, '--server', ts.url, '--home', home]);

    const reason = `${file} line ${lines.length + 1}: seq ${lines.length}, expected ${lines.length + 1}`;
    const note = `${task.task_id} is quarantined: ${reason} (read-only; beidou doctor --repair, with the server stopped, cuts it back to its last whole commit)`;
    const [list, show, json, agent, terminate, message] = await Promise.all([
      cli('task', 'list'),
      cli('task', 'show', task.task_id),
      cli('task', 'show', task.task_id, '--json'),
      cli('agent', 'show', 'root', '--task', task.task_id),
      cli('task', 'terminate', task.task_id),
      cli('message', 'root', 'hi', '--task', task.task_id),
    ]);
    expect(row(list.stdout, task.task_id).slice(0, 3)).toEqual([task.task_id, 'doubled', 'quarantined']);
    expect(list.stdout.trimEnd().split('\n').at(-1)).toBe(note);
    expect(show.code).toBe(0);
    expect(show.stdout.split('\n')[0]).toBe(`task ${task.task_id} "doubled": quarantined`);
    expect(show.stdout).toContain(`\n${note}\n`);
    expect(JSON.parse(json.stdout)).toEqual((await ts.api('GET', `/tasks/${task.task_id}`)).body);
    // What its events before the fault made of it stays readable.
    expect(agent.code).toBe(0);
    expect(agent.stdout).toContain(`  inbox      2 undelivered;`);
    expect(terminate.code).toBe(1);
    expect(terminate.stderr).toMatch(
      new RegExp(`^beidou: 409 task_quarantined: task ${task.task_id} is quarantined: `),
    );
    expect(message.code).toBe(1);
    expect(message.stderr).toMatch(/^beidou: 409 task_quarantined: /);
  });
});
