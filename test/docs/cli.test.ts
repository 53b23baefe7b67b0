import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  boundCommand,
  checkedExamples,
  matchSample,
  type Bindings,
  type DocCommand,
  type DocExample,
} from '../support/doc-examples.js';
import { buildCli, MAIN, ROOT } from '../support/cli.js';
import { until } from '../../src/testkit/poll.js';
import { handSpawner } from '../support/spawner-stream.js';
import {
  agentToken,
  connectAgent,
  createTask,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';

// Embedded store only (vitest.config.ts): the page's examples rebuild stats.db from a home's events/*.jsonl.

/**
 * docs/cli.md's examples, run. Every example block marked `<!-- checked -->` runs in order,
 * as a person pastes it into bash (`beidou` on PATH, HOME a scratch folder whose
 * `~/.beidou` is the home of a real server, BEIDOU_SERVER naming it), and what each command
 * prints (stdout and stderr, as a terminal shows them) and its exit code must be what the
 * page shows (test/support/doc-examples.ts says how samples match). Where the page shows
 * agents at work, the test plays them: a scene named by the marker runs first. Every command
 * of the CLI must have a checked example, so a page that drifts from the CLI fails here.
 */

const DOC = path.join(ROOT, 'docs', 'cli.md');
const CLAUDE = path.join(ROOT, 'node_modules', '.bin', 'claude');
/** A command that runs until stopped gets this long to print its sample. */
const LONG_RUNNING_MS = 15_000;

beforeAll(() => buildCli(true), 120_000);

/** Every command `beidou --help` lists; a group (`task`, `agent`, `stats`: no options, no arguments) as its subcommands. */
function commandsOfCli(prefix: string[] = []): string[] {
  const help = execFileSync(process.execPath, [MAIN, ...prefix, '--help'], { encoding: 'utf8' });
  const listed = [...help.slice(help.indexOf('\nCommands:\n')).matchAll(/^ {2}([\w-]+)( \S)?/gm)].filter(
    (m) => m[1] !== 'help',
  );
  return listed.flatMap(([, name, usage]) =>
    usage ? [[...prefix, name].join(' ')] : commandsOfCli([...prefix, name!]),
  );
}

interface Printed {
  lines: string[];
  exit: number | null;
}

/** What the page calls /home/you is the scratch HOME; the checkout is where the page's `$PWD` is. */
class Terminal {
  constructor(
    readonly home: string,
    readonly env: NodeJS.ProcessEnv,
  ) {}

  private shown(text: string): string[] {
    const lines = text.split(this.home).join('/home/you').split('\n');
    if (lines.at(-1) === '') lines.pop();
    return lines;
  }

  /** Runs the commands of one block in one bash (so `cd` and variables carry), each one's output apart. */
  async block(commands: string[]): Promise<Printed[]> {
    const script = commands.map((c, i) => `{\n${c}\n} 2>&1; printf '\\n__done_${i}_%d__\\n' $?`).join('\n');
    const out = await new Promise<string>((resolve) => {
      const child = spawn('bash', ['--noprofile', '--norc', '-c', script], {
        cwd: this.home,
        env: this.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let text = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (text += d));
      child.stderr.setEncoding('utf8').on('data', (d: string) => (text += d));
      child.on('close', () => resolve(text));
    });
    const results: Printed[] = [];
    let rest = out;
    for (let i = 0; i < commands.length; i++) {
      const m = new RegExp(`\\n__done_${i}_(\\d+)__\\n`).exec(rest);
      if (!m) {
        results.push({ lines: this.shown(rest), exit: null });
        break;
      }
      results.push({ lines: this.shown(rest.slice(0, m.index)), exit: Number(m[1]) });
      rest = rest.slice(m.index + m[0].length);
    }
    return results;
  }

  /** Starts a command that runs until stopped; resolves once `done(lines)` holds, then stops it. */
  async untilPrinted(
    command: string,
    done: (lines: string[]) => Promise<boolean>,
  ): Promise<Printed & { failure: string | null }> {
    const child = spawn('bash', ['--noprofile', '--norc', '-c', `{\n${command}\n} 2>&1`], {
      cwd: this.home,
      env: this.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let text = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (text += d));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    let ended = false;
    void exited.then(() => (ended = true));
    const deadline = Date.now() + LONG_RUNNING_MS;
    let printed = false;
    while (Date.now() < deadline && !ended && !printed) {
      printed = await done(this.shown(text));
      if (!printed) await new Promise((r) => setTimeout(r, 50));
    }
    // It printed what the page shows (or never will): stopped with SIGTERM, its whole process group.
    const exitedEarly = ended && !printed;
    if (!ended) process.kill(-child.pid!, 'SIGTERM');
    const exit = await exited;
    const failure = printed
      ? null
      : exitedEarly
        ? `it exited (${exit}) before printing what the page shows`
        : `it did not print what the page shows within ${LONG_RUNNING_MS} ms`;
    return { lines: this.shown(text), exit, failure };
  }
}

/** The agents and spawner the page shows at work, played by the test. */
class Cast {
  readonly agents: TestAgent[] = [];
  readonly streams: AbortController[] = [];
  readonly waiting: Array<Promise<unknown>> = [];

  constructor(private readonly ts: TestServer) {}

  /** The newest task's root asks the question `beidou questions` shows. */
  async aQuestionWaiting(): Promise<void> {
    const { tasks } = (await this.ts.api('GET', '/tasks')).body as { tasks: Array<{ root_agent_id: string }> };
    const root = await connectAgent(this.ts.url, await agentToken(this.ts, tasks[0]!.root_agent_id));
    this.agents.push(root);
    this.ask(root, {
      context: 'We start coding tomorrow.',
      questions: [
        {
          question: 'Which language should the service use?',
          header: 'Language',
          multiSelect: false,
          options: [
            { label: 'TypeScript', description: 'Node 20, strict' },
            { label: 'Go', description: 'one static binary' },
          ],
        },
      ],
    });
    await until('the question', async () =>
      (await this.ts.api('GET', '/questions/pending')).body.length === 1 ? true : undefined,
    );
  }

  /**
   * The team of "Operating a team from the CLI": a root (run by a person, on the MCP
   * client) with a plan of three tasks, two writers a spawner named cli-box runs (one at work,
   * one whose Claude Code is not logged in), and a question of the root waiting for the user.
   */
  async aTeamAtWork(): Promise<void> {
    const spawner = await handSpawner(this.ts, 'cli-box', this.streams);
    await spawner.next('hello');
    const task = await createTask(this.ts, { task: 'Write the operator guide', name: 'guide' });
    const root = await connectAgent(this.ts.url, task.token);
    this.agents.push(root);
    const plan = await root.call('declare_plan', {
      tasks: [
        { id: 'intro', role: 'writer', skill: 'worker', task: 'write the intro' },
        { id: 'outro', role: 'writer', skill: 'worker', task: 'write the outro' },
        { id: 'edit', role: 'editor', skill: 'worker', task: 'edit both', depends_on: ['intro', 'outro'] },
      ],
    });
    if (!plan.ok) throw new Error(JSON.stringify(plan.error));
    const writers: string[] = [];
    for (const id of ['intro', 'outro']) {
      const spawned = await root.call('spawn_agent', { task_id: id });
      if (!spawned.ok) throw new Error(JSON.stringify(spawned.error));
      const launch = await spawner.next('launch', spawned.value.agent_id);
      writers.push(launch.agent_id);
      await spawner.post(`/agents/${launch.agent_id}/started`, { session_id: `s-${id}`, resumed: false });
    }
    const [intro, outro] = writers as [string, string];
    await spawner.post(`/agents/${intro}/events`, {
      events: [
        {
          event: 'turn.usage',
          message_id: 'm1',
          model: 'claude-test',
          stop_reason: 'tool_use',
          input_tokens: 1200,
          output_tokens: 300,
        },
        { event: 'tool_called', message_id: 'm1', tool_use_id: 't1', name: 'Write', input: {} },
        {
          event: 'run.cost',
          total_cost_usd: 0.0123,
          duration_ms: 10,
          duration_api_ms: 5,
          num_turns: 1,
          usage: {},
          model_usage: {},
        },
      ],
    });
    await spawner.post(`/agents/${outro}/events`, {
      events: [
        {
          event: 'agent_error',
          exception: 'NotLoggedIn',
          msg: 'Claude Code is not logged in ("Not logged in · Please run /login")',
          stderr: 'starting\nNot logged in · Please run /login',
          reason: 'not_logged_in',
        },
      ],
    });
    const beat = await spawner.post('/heartbeat', {
      agents: [
        { agent_id: intro, pid: 48211, session_id: 's-intro' },
        { agent_id: outro, pid: 48230, session_id: 's-outro' },
      ],
    });
    if (beat.status !== 200) throw new Error(`heartbeat: ${beat.status}`);
    this.ask(root, {
      questions: [
        {
          question: 'Which tone?',
          header: 'Tone',
          multiSelect: false,
          options: [
            { label: 'Formal', description: '' },
            { label: 'Casual', description: '' },
          ],
        },
      ],
    });
    await until('the root question', async () =>
      ((await this.ts.api('GET', '/questions/pending')).body as Array<{ task_id: string }>).find(
        (q) => q.task_id === task.task_id,
      ),
    );
  }

  private ask(agent: TestAgent, args: Record<string, unknown>): void {
    // Answered or declined by the page's commands; a run cut short closes the client under it.
    this.waiting.push(agent.call('ask_user', args).catch(() => undefined));
  }

  async close(): Promise<void> {
    for (const s of this.streams) s.abort();
    await Promise.allSettled(this.agents.map((a) => a.close()));
  }
}

/** When a command that runs until stopped has done what the page shows: its sample printed, and for a spawner, the server lists it. */
function settled(ts: TestServer, command: DocCommand, bindings: Bindings) {
  const spawnerName = / beidou spawner .*--name (\S+)/.exec(` ${command.text}`)?.[1];
  return async (lines: string[]) => {
    if (matchSample(command.expected, lines.slice(0, command.expected.length), new Map(bindings)) !== null)
      return false;
    if (!spawnerName) return true;
    const { spawners } = (await ts.api('GET', '/spawners')).body as {
      spawners: Array<{ name: string | null; connected: boolean }>;
    };
    return spawners.some((s) => s.name === spawnerName && s.connected);
  };
}

interface Outcome {
  command: DocCommand;
  ran: string;
  printed: string[];
  exit: number | null;
  mismatch: string | null;
}

describe('docs/cli.md', () => {
  const doc = readFileSync(DOC, 'utf8');
  const examples = checkedExamples(doc);
  let scratch: string;
  let ts: TestServer;
  let cast: Cast;

  beforeAll(async () => {
    scratch = mkdtempSync(path.join(os.tmpdir(), 'beidou-docs-'));
    const home = path.join(scratch, 'home');
    const bin = path.join(scratch, 'bin');
    mkdirSync(home);
    mkdirSync(bin);
    writeFileSync(path.join(bin, 'beidou'), `#!/bin/sh\nexec "${process.execPath}" "${MAIN}" "$@"\n`);
    chmodSync(path.join(bin, 'beidou'), 0o755);
    symlinkSync(CLAUDE, path.join(bin, 'claude'));
    // Nothing times out while the page runs: the tables it shows stay what they are.
    ts = await startTestServer({
      home: path.join(home, '.beidou'),
      env: { BEIDOU_SPAWNER_HEARTBEAT_S: '600', BEIDOU_IDLE_NUDGE_S: '3600', BEIDOU_REVIEW_PING_S: '3600' },
    });
    cast = new Cast(ts);
  });

  afterAll(async () => {
    await cast?.close();
    await ts?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('has a checked example for every command of the CLI', () => {
    const commands = commandsOfCli();
    expect(commands).toEqual(
      expect.arrayContaining(['serve', 'task start', 'task list', 'agent show', 'stats rebuild', 'relay', 'doctor']),
    );
    const run = examples.flatMap((e) => e.commands.map((c) => c.text));
    const missing = commands.filter((c) => !run.some((t) => new RegExp(`(^|[\\s|;&(])beidou ${c}( |$)`, 'm').test(t)));
    expect(missing, 'commands without a <!-- checked --> example in docs/cli.md').toEqual([]);
  });

  it('prints what each checked example shows, run in order against a real server and team', async () => {
    const home = path.join(scratch, 'home');
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('BEIDOU_')) env[k] = v;
    Object.assign(env, {
      HOME: home,
      PATH: `${path.join(scratch, 'bin')}${path.delimiter}${process.env.PATH}`,
      BEIDOU_SERVER: ts.url,
      BEIDOU_LOG_LEVEL: 'warn',
    });
    const terminal = new Terminal(home, env);
    const bindings: Bindings = new Map();
    const outcomes: Outcome[] = [];
    const scenes: Record<string, () => Promise<void>> = {
      'a question waiting': () => cast.aQuestionWaiting(),
      'a team at work': () => cast.aTeamAtWork(),
    };

    const run = async (example: DocExample) => {
      if (example.scene) {
        const scene = scenes[example.scene];
        if (!scene) throw new Error(`docs/cli.md line ${example.line}: no scene "${example.scene}" in this test`);
        await scene();
      }
      const texts = example.commands.map((c) => boundCommand(c.text, bindings).split('/home/you').join(home));
      if (example.runsUntilStopped) {
        const [command] = example.commands as [DocCommand];
        const printed = await terminal.untilPrinted(texts[0]!, settled(ts, command, bindings));
        const head = printed.lines.slice(0, command.expected.length);
        outcomes.push({
          command,
          ran: texts[0]!,
          printed: printed.lines,
          exit: printed.exit,
          mismatch: printed.failure ?? matchSample(command.expected, head, bindings),
        });
        return;
      }
      const printed = await terminal.block(texts);
      example.commands.forEach((command, i) => {
        const p = printed[i] ?? { lines: [], exit: null };
        const mismatch =
          p.exit === null
            ? 'the block stopped before it'
            : p.exit !== command.exit
              ? `exit ${p.exit}, the page says ${command.exit}`
              : matchSample(command.expected, p.lines, bindings);
        outcomes.push({ command, ran: texts[i]!, printed: p.lines, exit: p.exit, mismatch });
      });
    };
    for (const example of examples) {
      await run(example);
      const failed = outcomes.find((o) => o.mismatch !== null);
      if (failed) {
        expect.fail(
          `docs/cli.md line ${failed.command.line}: ${failed.command.text}\n${failed.mismatch}\n--- ran\n${failed.ran}\n--- printed (exit ${failed.exit})\n${failed.printed.join('\n')}\n--- the page shows\n${failed.command.expected.join('\n')}`,
        );
      }
    }
    expect(outcomes.length).toBeGreaterThanOrEqual(30);
  }, 240_000);
});

describe('checked examples (the mechanism)', () => {
  it("reads commands, their # output, a sample block after, (exit N), and the marker's scene", () => {
    const md = [
      '<!-- checked: scene a team at work -->',
      '```sh',
      'beidou task list',
      '# no tasks yet',
      'beidou nope',
      '# beidou: unknown       (exit 1)',
      'beidou task show tsk_0123456789ab',
      '```',
      '',
      '```',
      'task tsk_0123456789ab: running',
      '```',
    ].join('\n');
    expect(checkedExamples(md)).toEqual([
      {
        line: 1,
        scene: 'a team at work',
        runsUntilStopped: false,
        commands: [
          { line: 3, text: 'beidou task list', expected: ['no tasks yet'], exit: 0 },
          { line: 5, text: 'beidou nope', expected: ['beidou: unknown'], exit: 1 },
          { line: 7, text: 'beidou task show tsk_0123456789ab', expected: ['task tsk_0123456789ab: running'], exit: 0 },
        ],
      },
    ]);
  });

  it('binds ids and names on first sight and holds them to it; masks tokens, ports and times; ... stands for anything', () => {
    const b: Bindings = new Map();
    expect(
      matchSample(
        ['sent to root-4d2f (ag_ce30ef584d2f) at 09:12:45'],
        ['sent to root-77aa (ag_000000c077aa) at 21:03:07'],
        b,
      ),
    ).toBeNull();
    expect(b.get('ag_ce30ef584d2f')).toBe('ag_000000c077aa');
    expect(b.get('root-4d2f')).toBe('root-77aa');
    expect(boundCommand('beidou agent show root-4d2f --task tsk_x', b)).toBe(
      'beidou agent show root-77aa --task tsk_x',
    );
    expect(() => boundCommand('beidou agent show ag_5bdfea3fa011', b)).toThrow(
      /ag_5bdfea3fa011 is used before any output/,
    );
    // Once bound, another id is another agent.
    expect(matchSample(['ag_ce30ef584d2f'], ['ag_111111111111'], b)).toMatch(/printed instead/);
    expect(matchSample(['ag_5bdfea3fa011'], ['ag_000000c077aa'], b)).toMatch(/already stands for/);
    expect(
      matchSample(
        ['token: eyJhbGciOi...', 'url http://127.0.0.1:7777/mcp', '...', 'end'],
        ['token: eyJx.y.z', 'url http://127.0.0.1:41000/mcp', 'a', 'b', 'end'],
        b,
      ),
    ).toBeNull();
    expect(matchSample(['{"seq":1,...}'], ['{"seq":2,"x":1}'], b)).toMatch(/sample line/);
    expect(matchSample(['one', 'two'], ['one'], b)).toMatch(/"two": nothing printed/);
    expect(matchSample(['one'], ['one', 'two'], b)).not.toBeNull();
  });
});
