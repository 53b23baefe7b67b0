import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { beforeAll, describe, expect, it } from 'vitest';
import { EVENT_FIELDS, type StoredEvent } from '../../src/events/catalogue.js';
import { agentProcesses } from '../../src/demo/chaos-processes.js';
import { Story } from '../../src/demo/story.js';
import { beidou, buildCli, childEnv, CliChild, ROOT } from '../support/cli.js';
import { until } from '../../src/testkit/poll.js';

/**
 * `npm run demo` as a person runs it (`node dist/demo/main.js`, a child process running the
 * real server, spawner and scripted agents): the story it prints, read line by line; with
 * `--keep`, the kept home served again by the command it prints; with `--slow`, the dashboard
 * it names while the agents are paced, and Ctrl-C leaving nothing behind.
 */

const DEMO = path.join(ROOT, 'dist', 'demo', 'main.js');

beforeAll(() => buildCli(true), 120_000);

/** The demo as a child; its stdout lines are collected and can be awaited. */
class DemoChild {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private waiters: Array<() => void> = [];
  private done = false;

  constructor(args: string[], env: Record<string, string> = {}) {
    this.proc = spawn(process.execPath, [DEMO, ...args], {
      cwd: ROOT,
      env: childEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    createInterface({ input: this.proc.stdout! }).on('line', (line) => {
      this.lines.push(line);
      this.notify();
    });
    this.proc.stderr!.setEncoding('utf8').on('data', (d: string) => (this.stderr += d));
    this.exited = new Promise((resolve) =>
      this.proc.on('close', (code, signal) => {
        this.done = true;
        this.notify();
        resolve({ code, signal });
      }),
    );
  }

  private notify() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  line(match: RegExp): Promise<RegExpExecArray> {
    return new Promise((resolve, reject) => {
      const check = () => {
        for (const l of this.lines) {
          const m = match.exec(l);
          if (m) return resolve(m);
        }
        if (this.done)
          return reject(
            new Error(`the demo ended without a line matching ${match}:\n${this.lines.join('\n')}\n${this.stderr}`),
          );
        this.waiters.push(check);
      };
      check();
    });
  }
}

const STORY_LINE = /^ *\+\d+\.\ds {2}(.*)$/;
/** The story: the lines after the task's header, each `+T.Ts  sentence`, up to the summary. */
function storyOf(lines: string[]): string[] {
  const from = lines.findIndex((l) => l.startsWith('task ')) + 1;
  const to = lines.indexOf('summary');
  return lines.slice(from, to).filter((l) => l.trim() !== '');
}
const sentences = (story: string[]) => story.map((l) => STORY_LINE.exec(l)?.[1] ?? `NOT A STORY LINE: ${l}`);

/** Event names as the log spells them (`task_created`, `launch.assigned`); `status` is also an English word. */
const EVENT_NAMES = Object.keys(EVENT_FIELDS).filter((n) => /[_.]/.test(n));
const RAW_ID = /\b(tsk|ag|q|tm|pl|sp|msg)_[0-9a-f]{6,}/;

describe('npm run demo', { timeout: 90_000 }, () => {
  it('tells the task as a story from its creation: the question and who answered it, the message, the reviews, the rework, the approvals, the end; then a summary and where to look', async () => {
    const demo = new DemoChild([]);
    const { code } = await demo.exited;
    expect(code, demo.stderr).toBe(0);
    const story = storyOf(demo.lines);
    const said = sentences(story);
    expect(said.filter((s) => s.startsWith('NOT A STORY LINE'))).toEqual([]);

    const root = /^user started the task with (root-[0-9a-f]{4}) as its root/.exec(said[0]!)?.[1];
    expect(said[0]).toBe(
      `user started the task with ${root} as its root (skill leader): "Write a short report on Polaris, the North Star."`,
    );
    expect(story[0]).toMatch(/^ {2}\+0\.0s {2}/);
    const name = (role: string) =>
      said.map((s) => new RegExp(`→ (${role}-[0-9a-f]{4}): spawned as ${role}`).exec(s)?.[1]).find(Boolean)!;
    const researcher = name('researcher');
    const writer = name('writer');
    expect([researcher, writer].every(Boolean), said.join('\n')).toBe(true);

    // The lines that tell the task, in the order they happened.
    const expected = [
      `${root} declared a plan of 2 tasks (1 ready): research, write`,
      `${root} → ${researcher}: spawned as researcher (skill worker, plan task research)`,
      `${researcher} hands its work in for review: "[REVIEW REQUIRED] facts.md has three facts about Polaris. Approve with terminat…"`,
      `${root} approved ${researcher}'s hand-off`,
      `${root} → ${writer}: spawned as writer (skill worker, plan task write)`,
      `${writer} → ${root}: question #1 [Tone] "Which tone should the report take?" (choose Formal or Casual)`,
      `${root} → ${writer}: answered question #1 "Tone: Formal" (the house style is formal)`,
      `${writer} hands its work in for review: "[REVIEW REQUIRED] report.md drafted (Tone: Formal)."`,
      `${root} → ${writer}: message (53 chars) "Good draft. Please add a one-line summary at the top."`,
      `${root} answered ${writer}'s hand-off with more work`,
      `${writer} hands its work in for review: "[REVIEW REQUIRED] report.md now opens with a summary line."`,
      `${root} approved ${writer}'s hand-off`,
      `beidou → user: question #2 [Root review] "The root agent ${root} reports its work ready for review:…" (choose Approve or Rework with text)`,
      'user (at the gateway) → beidou: answered question #2 "Root review: Approve"',
      'the task ended: done (root_approved)',
    ];
    let at = -1;
    for (const line of expected) {
      const found = said.indexOf(line, at + 1);
      expect(found, `"${line}" after line ${at} of:\n${said.join('\n')}`).toBeGreaterThan(at);
      at = found;
    }
    // Every agent stopped, each named in one line of terminations (consecutive ones share a
    // line; whether the writer's comes before the task's end or with the root's depends on
    // when its process exits); the story ends with the root's.
    const terminations = said
      .filter((l) => / (is|are) terminated$/.test(l))
      .map((l) => l.replace(/ (is|are) terminated$/, '').split(/, | and /));
    for (const who of [researcher, writer, root])
      expect(
        terminations.filter((names) => names.includes(who!)),
        who,
      ).toHaveLength(1);
    expect(said.at(-1)).toMatch(/ (is|are) terminated$/);
    expect(terminations.at(-1)).toContain(root!);

    // Names and sentences, not the log's ids and event names; nothing said twice in a row.
    for (const s of said) {
      expect(s, s).not.toMatch(RAW_ID);
      for (const n of EVENT_NAMES) expect(s.split(/[\s:()"]+/), s).not.toContain(n);
      expect(s).not.toMatch(/undefined|null|NaN/);
    }
    expect(said.filter((s, i) => s === said[i - 1] && !s.includes('hands its work in'))).toEqual([]);
    // Launches, deliveries and the scripted agents' turn markers are left out.
    expect(
      said.filter((s) => /launch queued|took |received |handing over|liveness check|step \d+ done|spooled/.test(s)),
    ).toEqual([]);

    const summary = demo.lines.slice(demo.lines.indexOf('summary') + 1, demo.lines.indexOf('next') - 1);
    expect(summary[0]).toMatch(/^ {2}task {7}done \(root approved\) after \d+\.\d s and \d+ events$/);
    expect(summary.slice(1)).toEqual([
      `  agents     3: ${root} (root), ${researcher} (researcher), ${writer} (writer)`,
      '  messages   1 sent with send_message; 4 hand-offs for review, 1 sent back for rework',
      '  questions  2: 1 answered by a leader, 1 by the user',
      '  cost       $0.0000, 0 tokens in, 0 out (scripted agents call no model)',
    ]);
    // The default run leaves no home behind and says how to keep or watch one.
    const home = /\(home (\S+)\)$/.exec(demo.lines.find((l) => l.startsWith('server '))!)![1]!;
    expect(existsSync(home)).toBe(false);
    expect(demo.lines.slice(demo.lines.indexOf('next'))).toContain(
      "  this run's home is deleted; keep it to browse afterwards:  npm run demo -- --keep",
    );
  });

  it('--keep: the story printed live is the whole log from seq 1, each event once; the printed serve command browses the kept home', async ({
    onTestFinished,
  }) => {
    const demo = new DemoChild(['--keep']);
    onTestFinished(() => void demo.proc.kill('SIGKILL'));
    expect((await demo.exited).code, demo.stderr).toBe(0);
    const home = (await demo.line(/^ {2}the home is kept: (\S+)$/))[1]!;
    onTestFinished(() => rmSync(home, { recursive: true, force: true }));
    const taskId = (await demo.line(/^task {6}(tsk_\w+) /))[1]!;
    const serve = (await demo.line(/^ {2}browse it: {3}(.+)$/))[1]!;
    expect(serve).toBe(`beidou serve --home ${home}`);
    expect((await demo.line(/^ {2}then open: {3}(\S+) /))[1]).toBe('http://127.0.0.1:7777/');

    // Told again from the durable log, start to end: the same lines, so none was missed or doubled.
    const events = readFileSync(path.join(home, 'events', `${taskId}.jsonl`), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as StoredEvent);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    const story = new Story();
    const retold = [...events.flatMap((e) => story.add(e)), ...story.end()];
    expect(storyOf(demo.lines)).toEqual(retold);

    // The printed command, as printed (a free port instead of 7777, which another test may hold).
    const server = new CliChild([...serve.split(' ').slice(1)], { BEIDOU_PORT: '0' });
    onTestFinished(async () => void (await server.stop('SIGKILL')));
    const url = /^beidou listening on (\S+)$/.exec(await server.waitForLine((_l, i) => i === 0))![1]!;
    expect((await fetch(`${url}/`)).status).toBe(200);
    const show = await beidou(['task', 'show', taskId, '--home', home, '--server', url]);
    expect(show.stdout.split('\n')[0]).toBe(`task ${taskId} "polaris report": done`);
    const tail = await beidou(['tail', taskId, '--since', '0', '--no-follow', '--home', home, '--server', url]);
    expect(tail.stdout.split('\n').filter(Boolean)).toHaveLength(events.length);
  });

  it('--slow: the dashboard and admin token first, agents one step per 1.5 s; Ctrl-C stops it and leaves nothing running or on disk', async ({
    onTestFinished,
  }) => {
    const demo = new DemoChild(['--slow']);
    onTestFinished(() => void demo.proc.kill('SIGKILL'));
    const [, url, token] = await demo.line(/^dashboard (http:\/\/\S+)\/ \(sign in with the admin token (\S+)\)$/);
    const home = (await demo.line(/\(home (\S+)\)$/))[1]!;
    await demo.line(/^task {6}tsk_/);
    const tasks = await fetch(`${url}/api/tasks`, { headers: { authorization: `Bearer ${token}` } });
    expect(tasks.status).toBe(200);
    const [task] = ((await tasks.json()) as { tasks: Array<{ task_id: string; name: string }> }).tasks;
    expect(task!.name).toBe('polaris report');
    expect((await fetch(`${url}/`)).status).toBe(200);

    // The root's first step waits 1.5 s, its second 1.5 s more.
    const plan = await demo.line(/^ *\+(\d+\.\d)s {2}root-\w+ declared a plan/);
    const spawned = await demo.line(/^ *\+(\d+\.\d)s {2}root-\w+ → researcher-\w+: spawned/);
    expect(Number(plan[1])).toBeGreaterThanOrEqual(1.5);
    expect(Number(spawned[1]) - Number(plan[1])).toBeGreaterThanOrEqual(1.4);

    expect(agentProcesses(path.join(home, 'agents'), task!.task_id).length).toBeGreaterThan(0);
    demo.proc.kill('SIGINT');
    expect((await demo.exited).code).toBe(130);
    expect(demo.lines.at(-1)).toBe('stopped: the demo was stopped before the task ended');
    // The address came before the story: the run can be watched from its first event.
    expect(demo.lines.findIndex((l) => l.startsWith('dashboard '))).toBeLessThan(
      demo.lines.findIndex((l) => STORY_LINE.test(l)),
    );
    expect(existsSync(home)).toBe(false);
    // The spawner ends its agents as it stops.
    await until('the agents to end', () =>
      agentProcesses(path.join(home, 'agents'), task!.task_id).length === 0 ? true : undefined,
    );
  });
});
