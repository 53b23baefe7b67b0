import { spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../src/util/version.js';
import { durableEvents, eventsNamed, waitForEvent } from '../support/events.js';
import { CLI } from '../support/process.js';
import {
  agentToken,
  connectAgent,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
  type ToolOutcome,
} from '../support/server.js';

/**
 * The README's tour, pasted as a person would: its shell blocks marked `<!-- runnable -->`
 * run in order in one bash (`set -e`, so any failing command fails its block), with `beidou`
 * on PATH through a shim, against a server started on a scratch home, with HOME a scratch
 * folder too (a block reading `~/.beidou` finds nothing). Where the tour has Claude act, the
 * test is the root agent: once the task exists it asks which form to use, and once answered
 * it hands its work up for review. Every shell block must say whether it runs
 * (`<!-- runnable -->` or `<!-- not run: why -->` on the line before it).
 */

const README = path.join(PACKAGE_ROOT, 'README.md');
const CLAUDE = path.join(PACKAGE_ROOT, 'node_modules', '.bin', 'claude');
const SHELL_LANGS = new Set(['sh', 'bash', 'shell']);
/** A block still running after this never ends: it must be marked not run. */
const BLOCK_DEADLINE_MS = 20_000;

export interface ShellBlock {
  /** 1-based line of the opening fence. */
  line: number;
  marker: 'runnable' | 'not run' | null;
  code: string;
  /** The plain fenced block right after it, if any: what it prints. */
  sample: string | null;
}

/** The fenced shell blocks of a markdown text, with the marker comment on the line before each. */
export function shellBlocks(markdown: string): ShellBlock[] {
  const lines = markdown.split('\n');
  const blocks: ShellBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*([\w-]*)/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    let end = i + 1;
    while (end < lines.length && !lines[end]!.trimStart().startsWith(fence!)) end++;
    if (SHELL_LANGS.has(lang!)) {
      let prev = i - 1;
      while (prev >= 0 && lines[prev]!.trim() === '') prev--;
      const comment = prev >= 0 ? /^<!--\s*(runnable|not run:\s*\S.*?)\s*-->$/.exec(lines[prev]!.trim()) : null;
      blocks.push({
        line: i + 1,
        marker: comment ? (comment[1] === 'runnable' ? 'runnable' : 'not run') : null,
        code: body(lines, i, end, indent!),
        sample: sampleAfter(lines, end + 1),
      });
    }
    i = end;
  }
  return blocks;
}

function body(lines: string[], open: number, close: number, indent: string): string {
  return lines
    .slice(open + 1, close)
    .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l))
    .join('\n');
}

/** A fenced block without a language starting at `from` (blank lines skipped), or null. */
function sampleAfter(lines: string[], from: number): string | null {
  let i = from;
  while (i < lines.length && lines[i]!.trim() === '') i++;
  const open = /^(\s*)(`{3,})\s*$/.exec(lines[i] ?? '');
  if (!open) return null;
  let end = i + 1;
  while (end < lines.length && !lines[end]!.trimStart().startsWith(open[2]!)) end++;
  return body(lines, i, end, open[1]!);
}

/** What differs from run to run: ids, tokens, the port, event times. */
function masked(text: string): string {
  return text
    .replace(/\b(tsk|ag|q|tm|msg|plan)_[0-9a-f]{12}\b/g, '$1_ID')
    .replace(/eyJ[\w.-]*(?:…)?/g, 'TOKEN')
    .replace(/http:\/\/127\.0\.0\.1:\d+/g, 'http://127.0.0.1:PORT')
    .replace(/"ts":[\d.]+/g, '"ts":T');
}

/**
 * Whether a sample output is true of what the block printed: its non-blank lines appear in
 * order among the printed ones, ids and the like masked; a sample line ending in `...` or
 * `...}` stands for any line that starts with what comes before it. Null when it is; else
 * the first sample line not found.
 */
export function sampleMismatch(sample: string, printed: string): string | null {
  const actual = masked(printed).split('\n');
  let at = 0;
  for (const line of masked(sample)
    .split('\n')
    .filter((l) => l.trim() !== '')) {
    const cut = /^(.*?),?(?:\.\.\.|…)\}?$/.exec(line);
    const matches = (a: string) => (cut ? a.startsWith(cut[1]!) : a === line);
    while (at < actual.length && !matches(actual[at]!)) at++;
    if (at === actual.length) return line;
    at++;
  }
  return null;
}

interface BlockRun {
  block: ShellBlock;
  ok: boolean;
  stdout: string;
  stderr: string;
  /** Why it failed: the shell's exit, or the deadline. */
  failure?: string;
}

/** One bash, fed a block at a time, like a terminal someone pastes into. */
class Terminal {
  private readonly child: ChildProcess;
  private stdout = '';
  private stderr = '';
  private exit: string | null = null;
  private readonly changed = new Set<() => void>();
  private count = 0;

  constructor(cwd: string, env: NodeJS.ProcessEnv) {
    // Its own process group, so closing it ends whatever a block left running too.
    this.child = spawn('bash', ['--noprofile', '--norc'], {
      cwd,
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    const notify = () => {
      for (const f of [...this.changed]) f();
    };
    this.child.stdout!.on('data', (d: Buffer) => {
      this.stdout += d.toString();
      notify();
    });
    this.child.stderr!.on('data', (d: Buffer) => {
      this.stderr += d.toString();
      notify();
    });
    this.child.once('close', (code, signal) => {
      this.exit = `bash exited with ${signal ?? code}`;
      notify();
    });
    this.child.stdin!.on('error', () => undefined); // a shell that exited: its close says so
    this.child.stdin!.write('set -e -o pipefail\n');
  }

  /** Runs one block; resolves when its end marker is printed, or the shell exits (a failed command). */
  run(block: ShellBlock): Promise<BlockRun> {
    const done = `__readme_block_${++this.count}_done__`;
    const outFrom = this.stdout.length;
    const errFrom = this.stderr.length;
    // The braces make bash read the whole block before running it, with stdin not ours.
    this.child.stdin!.write(`{\n${block.code}\n} </dev/null\nprintf '\\n%s\\n' ${done}\n`);
    return new Promise((resolve) => {
      const finish = (failure?: string) => {
        clearTimeout(timer);
        this.changed.delete(check);
        const stdout = this.stdout.slice(outFrom).replace(`\n${done}\n`, '');
        const stderr = this.stderr.slice(errFrom);
        // A complaint that does not fail its command (`export X=$(cat missing)`) still fails the block.
        if (failure === undefined && stderr !== '') failure = 'it wrote to stderr';
        resolve({ block, ok: failure === undefined, stdout, stderr, ...(failure ? { failure } : {}) });
      };
      const check = () => {
        if (this.stdout.includes(`\n${done}\n`, outFrom)) finish();
        else if (this.exit) finish(this.exit);
      };
      const timer = setTimeout(() => finish(`still running after ${BLOCK_DEADLINE_MS} ms`), BLOCK_DEADLINE_MS);
      this.changed.add(check);
      check();
    });
  }

  close(): void {
    if (this.exit !== null || this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/**
 * The root agent, played by the test where the tour has Claude act: before each block it
 * does what it can do by then, and stops where it waits for the user.
 */
class ScriptedRoot {
  agent: TestAgent | null = null;
  taskId: string | null = null;
  asked: Promise<ToolOutcome> | null = null;
  answer: ToolOutcome | null = null;
  reviewed = false;

  constructor(private readonly ts: TestServer) {}

  async act(): Promise<void> {
    if (!this.taskId) {
      const { tasks } = (await this.ts.api('GET', '/tasks')).body as {
        tasks: Array<{ task_id: string; root_agent_id: string }>;
      };
      if (tasks.length === 0) return;
      const [task] = tasks;
      this.taskId = task!.task_id;
      this.agent = await connectAgent(this.ts.url, await agentToken(this.ts, task!.root_agent_id));
      this.asked = this.agent.call('ask_user', {
        questions: [
          {
            question: 'Which form should the poem take?',
            header: 'Form',
            multiSelect: false,
            options: [
              { label: 'Classic', description: '5-7-5' },
              { label: 'Free', description: 'any syllable count' },
            ],
          },
        ],
      });
      // A run that stops early closes the client under the waiting call: no answer then.
      this.asked.catch(() => undefined);
      await waitForEvent(this.ts, this.taskId, (e) => e.event === 'question_asked' && e.origin === 'ask_user', {
        what: "the root's question",
      });
      return;
    }
    // Answered (the log says so): its call returns, then the root hands its work up.
    if (!this.reviewed && eventsNamed(durableEvents(this.ts, this.taskId), 'question_answered').length > 0) {
      this.answer = await this.asked!;
      this.reviewed = true;
      const review = await this.agent!.call('signal_review', {
        detail: '[REVIEW REQUIRED] haiku.md written: a classic haiku that mentions the tide',
      });
      if (!review.ok) throw new Error(`signal_review: ${JSON.stringify(review.error)}`);
    }
  }

  async close(): Promise<void> {
    await this.agent?.close();
  }
}

/** Runs the runnable blocks of `markdown` in one terminal; stops at the first that fails. */
async function runTour(
  ts: TestServer,
  markdown: string,
  scratch: string,
): Promise<{ runs: BlockRun[]; root: ScriptedRoot }> {
  const shims = path.join(scratch, 'bin');
  const home = path.join(scratch, 'home');
  const cwd = path.join(scratch, 'cwd');
  for (const dir of [shims, home, cwd]) mkdirSync(dir, { recursive: true });
  const shim = path.join(shims, 'beidou');
  writeFileSync(shim, `#!/bin/sh\nexec "${process.execPath}" "${CLI}" "$@"\n`);
  chmodSync(shim, 0o755);
  // The pinned Claude Code, for `beidou attach` (it registers the server with `claude mcp add`).
  symlinkSync(CLAUDE, path.join(shims, 'claude'));
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('BEIDOU_')) env[k] = v;
  // As the tour says: a server elsewhere than the defaults is named by the same settings it was started with.
  Object.assign(env, {
    PATH: `${shims}${path.delimiter}${process.env.PATH}`,
    HOME: home,
    BEIDOU_SERVER: ts.url,
    BEIDOU_HOME: ts.home,
  });
  const terminal = new Terminal(cwd, env);
  const root = new ScriptedRoot(ts);
  const runs: BlockRun[] = [];
  try {
    for (const block of shellBlocks(markdown).filter((b) => b.marker === 'runnable')) {
      await root.act();
      const run = await terminal.run(block);
      runs.push(run);
      if (!run.ok) break;
    }
  } finally {
    terminal.close();
  }
  return { runs, root };
}

function describeFailure(run: BlockRun | undefined): string {
  if (!run) return 'no block ran';
  return `README.md line ${run.block.line}: ${run.failure}\n--- block\n${run.block.code}\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`;
}

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build first (npm test does)`);
});

describe('the README tour', () => {
  const readme = readFileSync(README, 'utf8');
  let ts: TestServer | undefined;
  let scratch: string | undefined;
  const roots: ScriptedRoot[] = [];
  afterEach(async () => {
    await Promise.allSettled(roots.map((r) => r.close()));
    roots.length = 0;
    if (ts) {
      await ts.close();
      removeHome(ts.home);
      ts = undefined;
    }
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  const tour = async (markdown: string) => {
    ts = await startTestServer();
    scratch = mkdtempSync(path.join(os.tmpdir(), 'beidou-readme-'));
    const result = await runTour(ts, markdown, scratch);
    roots.push(result.root);
    return result;
  };

  it('marks every shell block runnable or not run, and runs the tour', () => {
    const blocks = shellBlocks(readme);
    expect(
      blocks.filter((b) => b.marker === null).map((b) => `line ${b.line}`),
      'shell blocks without <!-- runnable --> or <!-- not run: why -->',
    ).toEqual([]);
    const runnable = blocks
      .filter((b) => b.marker === 'runnable')
      .map((b) => b.code)
      .join('\n');
    for (const step of ['beidou task start', 'beidou events', 'beidou questions', 'beidou answer'])
      expect(runnable).toContain(step);
  });

  it('finds a block without a marker, and reads an indented one', () => {
    const md = [
      '<!-- runnable -->',
      '```sh',
      'echo one',
      '```',
      '',
      'text',
      '',
      '```bash',
      'echo two',
      '```',
      '- item',
      '',
      '  <!-- not run: needs Docker -->',
      '  ```sh',
      '  docker ps',
      '  ```',
    ].join('\n');
    expect(shellBlocks(md)).toEqual([
      { line: 2, marker: 'runnable', code: 'echo one', sample: null },
      { line: 8, marker: null, code: 'echo two', sample: null },
      { line: 14, marker: 'not run', code: 'docker ps', sample: null },
    ]);
    const withSample = shellBlocks(
      ['<!-- runnable -->', '```sh', 'beidou questions', '```', '', '```', 'q_1  task', '```'].join('\n'),
    );
    expect(withSample[0]!.sample).toBe('q_1  task');
  });

  it('runs, pasted in order into one shell: task, events, the question answered, the review approved', async () => {
    const { runs, root } = await tour(readme);
    const failed = runs.find((r) => !r.ok);
    expect(failed, describeFailure(failed)).toBeUndefined();
    expect(runs).toHaveLength(shellBlocks(readme).filter((b) => b.marker === 'runnable').length);
    // Each output the README shows under a block is what that block printed.
    for (const run of runs.filter((r) => r.block.sample !== null)) {
      expect(
        sampleMismatch(run.block.sample!, run.stdout),
        `README.md line ${run.block.line}: a line of its sample output was not printed\n--- printed\n${run.stdout}`,
      ).toBeNull();
    }
    expect(runs.filter((r) => r.block.sample !== null).length).toBeGreaterThanOrEqual(3);
    // What the tour says happened did: the root got the answer typed in the tour, and Approve ended the task.
    expect(root.answer).toMatchObject({
      ok: true,
      value: { answers: [{ selected_labels: ['Classic'], text: 'mention the tide' }] },
    });
    expect((await ts!.api('GET', `/tasks/${root.taskId}`)).body.task).toMatchObject({ status: 'done' });
    expect(runs.at(-1)!.stdout).toContain('"event":"task_ended"');
    // `beidou attach` set up the folder for Claude Code (docs/claude-code.md says what it writes).
    expect(existsSync(path.join(scratch!, 'home', 'haiku', '.claude', 'settings.local.json'))).toBe(true);
    // The CLI found the server's home from BEIDOU_HOME alone: nothing looked in ~/.beidou.
    expect(existsSync(path.join(scratch!, 'home', '.beidou'))).toBe(false);
  }, 120_000);

  it('tells a sample output that is no longer true', () => {
    const printed =
      'q_254732824dc3  task tsk_993e1387d453  from ag_51ed44aac8cc  (ask_user, via user)\n  1. [Form] Which form?\n     - Classic: 5-7-5\n';
    expect(
      sampleMismatch(
        'q_89c2cabac2a2  task tsk_5c1e0b9a2f3d  from ag_91d4c0e7b2aa  (ask_user, via user)\n     - Classic: 5-7-5',
        printed,
      ),
    ).toBeNull();
    expect(sampleMismatch('     - Classic: 5-7-6', printed)).toBe('     - Classic: 5-7-6');
    // Order counts, and a line ending in ... stands for a longer one.
    expect(sampleMismatch('     - Classic: 5-7-5\n  1. [Form] Which form?', printed)).toBe('  1. [Form] Which form?');
    expect(
      sampleMismatch(
        '{"seq":1,"ts":1.5,"event":"task_created",...}',
        '{"seq":1,"ts":2.25,"event":"task_created","text":"x"}',
      ),
    ).toBeNull();
  });

  it('fails at a block with a typo, naming its line', async () => {
    const broken = readme.replace('beidou events --task $TASK\n', 'beidou evnts --task $TASK\n');
    expect(broken).not.toBe(readme);
    const { runs } = await tour(broken);
    const failed = runs.at(-1)!;
    expect(failed.ok).toBe(false);
    expect(failed.block.code).toContain('beidou evnts');
    expect(failed.stderr).toContain("unknown command 'evnts'");
    expect(describeFailure(failed)).toContain(`README.md line ${failed.block.line}: bash exited with 1`);
  }, 60_000);

  it("fails at a block that reads ~/.beidou when the server's home is elsewhere", async () => {
    // The old tour's line: `export` succeeds even when its `cat` does not, so only stderr tells.
    const broken = readme.replace(
      'beidou events --task $TASK\n',
      'export ADMIN=$(cat ~/.beidou/admin.token)\nbeidou events --task $TASK\n',
    );
    expect(broken).not.toBe(readme);
    const { runs } = await tour(broken);
    const failed = runs.at(-1)!;
    expect(failed.ok).toBe(false);
    expect(failed.failure).toBe('it wrote to stderr');
    expect(failed.stderr).toContain('.beidou/admin.token: No such file or directory');
  }, 60_000);
});
