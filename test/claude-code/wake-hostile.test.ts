import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { liveSessions } from '../../src/cli/wake/claude-sessions.js';
import { WakeState } from '../../src/cli/wake/wake-state.js';
import { CLAUDE, settleClaudeHome } from '../../src/testkit/claude-tmux.js';
import { lastUserText } from '../../src/testkit/fake-anthropic.js';
import { until } from '../../src/testkit/poll.js';
import { pidAlive } from '../../src/util/process.js';
import { CLI } from '../support/process.js';
import {
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';
import { STEP_MS, WakeRig } from '../support/wake-rig.js';

/**
 * A hostile review of the wake path (docs/claude-code.md), without Claude Code itself: the
 * relay and the wake hooks as the real processes Claude Code starts (`beidou relay`,
 * `hook-main.js session-start | rewake`), against the real server, with a stand-in for the
 * one external program they talk to: a process that binds a Unix socket where Claude Code's
 * messaging socket would be and reports each line written into it, and the
 * `~/.claude/sessions/<pid>.json` file Claude Code writes for it. test/claude-code/wake.test.ts runs the
 * real Claude Code; this file goes after what it cannot easily reach: races, dead and reused
 * processes, unreachable servers, rewritten token files, garbage files, hostile projects.
 */

const HOOK_MAIN = path.join(path.dirname(CLI), 'hook-main.js');
const WAIT_MS = 15_000;

/** What the stand-in reports: that it listens, or one connection's whole text. */
type StandInLine = { listening: string | null } | { received: string };

/** One doorbell as written into the socket: its lines, parsed. */
interface Rung {
  at: number;
  lines: Array<Record<string, any>>;
  user: { message: { content: string }; session_id: string; from: string; priority: string; msg_id: string };
}

/**
 * The stand-in for a Claude Code process: alive until killed, listening on `socket` (if
 * any) the way Claude Code does, in a 0700 folder; SIGKILL leaves its socket file behind,
 * as Claude Code's would be.
 */
const STAND_IN = `
const net = require('node:net');
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const sock = process.argv[1];
if (sock) {
  net.createServer((c) => {
    let text = '';
    c.setEncoding('utf8');
    c.on('data', (d) => (text += d));
    c.on('end', () => { say({ received: text }); c.end(); });
  }).listen(sock, () => say({ listening: sock }));
} else say({ listening: null });
setInterval(() => {}, 1 << 30);
`;

class StandIn {
  readonly rings: Rung[] = [];
  private readonly waiters: Array<() => void> = [];

  private constructor(
    readonly child: ChildProcess,
    readonly socket: string | null,
  ) {}

  static async start(socket: string | null): Promise<StandIn> {
    const child = spawn(process.execPath, ['-e', STAND_IN, ...(socket ? [socket] : [])], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const s = new StandIn(child, socket);
    const lines = createInterface({ input: child.stdout! });
    const listening = new Promise<void>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`the stand-in exited with ${code} before listening`)));
      lines.on('line', (line) => {
        const msg = JSON.parse(line) as StandInLine;
        if ('listening' in msg) return resolve();
        const parsed = msg.received
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Record<string, any>);
        s.rings.push({ at: Date.now(), lines: parsed, user: parsed.find((l) => l.type === 'user') as Rung['user'] });
        for (const w of s.waiters.splice(0)) w();
      });
    });
    await listening;
    return s;
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Resolves with the first doorbell (from index `from` on) that `match` accepts. */
  ring(match: (r: Rung) => boolean, what: string, from = 0, timeoutMs = WAIT_MS): Promise<Rung> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `timed out waiting for ${what}; rung: ${JSON.stringify(this.rings.map((r) => r.user?.message.content))}`,
            ),
          ),
        timeoutMs,
      );
      const check = () => {
        const hit = this.rings.slice(from).find(match);
        if (hit) {
          clearTimeout(timer);
          return resolve(hit);
        }
        this.waiters.push(check);
      };
      check();
    });
  }

  async kill(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, 'exit');
    this.child.kill(signal);
    await exited;
  }
}

/** Every `beidou relay` process whose `--socket` is this path (detached ones too: the hooks start them). */
function relaysFor(socket: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let args: string[];
    try {
      args = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    const i = args.indexOf('--socket');
    if (args.includes('relay') && i >= 0 && args[i + 1] === socket) pids.push(Number(name));
  }
  return pids;
}

const exitOf = (child: ChildProcess): Promise<number | null> =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve(child.exitCode)
    : once(child, 'exit').then(([code]) => code as number | null);

function withDeadline<T>(p: Promise<T>, what: string, ms = WAIT_MS): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<never>(
      (_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)),
    ),
  ]).finally(() => clearTimeout(timer));
}

/**
 * A TCP hop between a relay and the server that can go silent: its open connections stop
 * carrying bytes either way without closing (what a sleeping laptop or a changed network
 * leaves); new connections still get through.
 */
async function silenceableProxy(target: URL): Promise<{ url: string; silence(): void; close(): Promise<void> }> {
  const pairs: Array<[net.Socket, net.Socket]> = [];
  const silenced: net.Socket[] = [];
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const [a, z] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      a.pipe(z);
      a.on('error', () => z.destroy());
    }
    pairs.push([client, upstream]);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    silence: () => {
      for (const [client, upstream] of pairs.splice(0)) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
        silenced.push(client, upstream);
      }
    },
    close: async () => {
      for (const sock of [...silenced.splice(0), ...pairs.splice(0).flat()]) sock.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
/** Every file under `dir` (symlinks not followed). */
function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...filesUnder(p));
    else if (e.isFile()) out.push(p);
  }
  return out;
}

describe('the wake path under hostile conditions', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  interface Bench {
    ts: TestServer;
    /** A throwaway HOME: Claude Code's sessions folder is `<dir>/home/.claude/sessions`. */
    dir: string;
    home: string;
    project: string;
    /** The Beidou home of the hooks and relays (the server's). */
    beidouHome: string;
    state: WakeState;
    task: { task_id: string; root_agent_id: string; token: string };
    tokenFile: string;
    /** The agent's MCP client: connected, so the relay does not hold a doorbell for its reconnection. */
    agent: TestAgent;
    sessionId: string;
    /** A messaging socket path in a 0700 folder, as Claude Code makes. */
    socketPath(name?: string): string;
    standIn(socket: string | null): Promise<StandIn>;
    /** Writes `<home>/.claude/sessions/<pid>.json` as Claude Code 2.1.332 does (atomically: the relay reads it as it changes). */
    session(s: StandIn, fields?: Record<string, unknown>): void;
    env(extra?: Record<string, string | undefined>): Record<string, string>;
    /** `hook-main.js EVENT` as the hook command `beidou attach` writes; the child and its exit. */
    hook(
      event: string,
      env: Record<string, string>,
      opts?: { home?: string; stdin?: Record<string, unknown> },
    ): { child: ChildProcess; stderr: () => string; exited: Promise<number | null> };
    /** `beidou relay` started directly, its log on a pipe. */
    relay(s: StandIn, extra?: string[]): { child: ChildProcess; log: () => string; exited: Promise<number | null> };
    send(content: string, to?: string): Promise<string>;
    /** Takes the agent's mail through its own read_inbox. */
    readInbox(): Promise<Array<{ message_id: string; content: string }>>;
    restart(): Promise<void>;
  }

  async function bench(opts: { serverDown?: boolean } = {}): Promise<Bench> {
    let ts = await startTestServer();
    const dir = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'beidou-hostile-')));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const home = path.join(dir, 'home');
    const project = path.join(dir, 'project');
    mkdirSync(path.join(home, '.claude', 'sessions'), { recursive: true });
    mkdirSync(project);
    mkdirSync(path.join(dir, 'sock'), { mode: 0o700 });
    const task = await createTask(ts);
    const tokenFile = path.join(ts.home, 'agents', `${task.root_agent_id}.token`);
    mkdirSync(path.dirname(tokenFile), { recursive: true, mode: 0o700 });
    writeFileSync(tokenFile, `${task.token}\n`, { mode: 0o600 });
    const port = Number(new URL(ts.url).port);
    const serverHome = ts.home;
    const restart = async () => {
      await ts.close();
      ts = await startTestServer({ home: serverHome, port });
    };
    cleanups.push(async () => {
      await ts.close();
      removeHome(serverHome);
    });
    let agent: TestAgent | null = null;
    if (!opts.serverDown) {
      agent = await connectAgent(ts.url, task.token);
      cleanups.push(() => agent!.close().catch(() => undefined));
    }
    const sessionId = `sess-${path.basename(dir)}`;
    const b: Bench = {
      get ts() {
        return ts;
      },
      dir,
      home,
      project,
      beidouHome: serverHome,
      state: new WakeState(serverHome),
      task,
      tokenFile,
      get agent() {
        return agent!;
      },
      sessionId,
      socketPath: (name = 'claude.sock') => path.join(dir, 'sock', name),
      standIn: async (socket) => {
        const s = await StandIn.start(socket);
        cleanups.push(() => s.kill('SIGKILL'));
        return s;
      },
      session: (s, fields = {}) => {
        const file = path.join(home, '.claude', 'sessions', `${s.pid}.json`);
        const body = {
          pid: s.pid,
          sessionId,
          cwd: project,
          version: '2.1.332',
          peerProtocol: 1,
          status: 'idle',
          ...(s.socket ? { messagingSocketPath: s.socket } : {}),
          ...fields,
        };
        writeFileSync(`${file}.tmp`, JSON.stringify(body));
        renameSync(`${file}.tmp`, file);
      },
      env: (extra = {}) => {
        const e: Record<string, string> = {};
        for (const [k, v] of Object.entries(process.env))
          if (v !== undefined && !/^(ANTHROPIC_|CLAUDE|BEIDOU_)/.test(k)) e[k] = v;
        for (const [k, v] of Object.entries({ HOME: home, ...extra })) if (v !== undefined) e[k] = v;
        return e;
      },
      hook: (event, env, o = {}) => {
        const child = spawn(
          process.execPath,
          [HOOK_MAIN, event, '--server', ts.url, '--token-file', tokenFile, '--home', o.home ?? serverHome],
          { env, stdio: ['pipe', 'ignore', 'pipe'] },
        );
        let stderr = '';
        child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
        child.stdin!.end(
          JSON.stringify({
            session_id: env.CLAUDE_CODE_SESSION_ID ?? sessionId,
            hook_event_name: event === 'rewake' ? 'Stop' : 'SessionStart',
            ...o.stdin,
          }),
        );
        cleanups.push(() => void child.kill('SIGKILL'));
        return { child, stderr: () => stderr, exited: exitOf(child) };
      },
      relay: (s, extra = []) => {
        const args = [
          CLI,
          'relay',
          '--socket',
          s.socket!,
          '--session-id',
          sessionId,
          '--server',
          ts.url,
          '--home',
          serverHome,
          '--token-file',
          tokenFile,
          '--claude-pid',
          String(s.pid),
          '--agent',
          task.root_agent_id,
          ...extra,
        ];
        const child = spawn(process.execPath, args, { env: b.env(), stdio: ['ignore', 'ignore', 'pipe'] });
        let log = '';
        child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
        cleanups.push(() => void child.kill('SIGKILL'));
        return { child, log: () => log, exited: exitOf(child) };
      },
      send: async (content, to = task.root_agent_id) => {
        const res = await ts.api('POST', `/agents/${to}/send`, { content });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        return res.body.message_id as string;
      },
      readInbox: async () => {
        const r = await agent!.call('read_inbox', {});
        expect(r.ok, JSON.stringify(r)).toBe(true);
        return (r as { value: { messages: Array<{ message_id: string; content: string }> } }).value.messages;
      },
      restart,
    };
    return b;
  }

  /** Kills, at the end, every relay a hook started for this socket (they are detached). */
  function reapRelays(socket: string): void {
    cleanups.push(() => {
      for (const pid of relaysFor(socket)) process.kill(pid, 'SIGKILL');
    });
  }

  const following = (log: () => string) =>
    until('the relay to follow the inbox', () => (log().includes('following the inbox') ? true : undefined), WAIT_MS);
  const logFile = (b: Bench, key: string | number) => path.join(b.state.dir, `relay-${key}.log`);
  const readLog = (file: string) => () => (existsSync(file) ? readFileSync(file, 'utf8') : '');

  describe('what the relay rings, and what it leaves on disk', () => {
    it('the doorbell carries no content and takes nothing from the inbox; the token is in its 0600 file and nowhere else', async () => {
      const b = await bench();
      // Set up by `beidou attach`, and the SessionStart hook run exactly as the settings say.
      settleClaudeHome(b.home, { projects: [b.project] });
      rmSync(path.dirname(b.tokenFile), { recursive: true }); // attach makes the token's folder
      const attached = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const c = spawn(
          process.execPath,
          [
            CLI,
            'attach',
            '--agent',
            b.task.root_agent_id,
            '--server',
            b.ts.url,
            '--home',
            b.beidouHome,
            '--claude-bin',
            CLAUDE,
          ],
          { cwd: b.project, env: b.env(), stdio: ['ignore', 'ignore', 'pipe'] },
        );
        let stderr = '';
        c.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
        c.once('exit', (code) => resolve({ code, stderr }));
      });
      expect(attached.code, attached.stderr).toBe(0);
      // The token attach minted for this folder.
      const token = readFileSync(b.tokenFile, 'utf8').trim();
      expect(token).not.toBe(b.task.token);
      const settings = JSON.parse(readFileSync(path.join(b.project, '.claude', 'settings.local.json'), 'utf8'));
      const command: string = settings.hooks.SessionStart[0].hooks[0].command;

      const s = await b.standIn(b.socketPath());
      b.session(s);
      reapRelays(s.socket!);
      const env = b.env({
        CLAUDE_CODE_MESSAGING_SOCKET: s.socket!,
        CLAUDE_CODE_MESSAGING_TOKEN: 'cc-messaging-token',
        CLAUDE_CODE_SESSION_ID: b.sessionId,
        CLAUDE_PID: String(s.pid),
      });
      const hook = spawn('/bin/sh', ['-c', command], { cwd: b.project, env, stdio: ['pipe', 'ignore', 'pipe'] });
      hook.stdin!.end(
        JSON.stringify({
          session_id: b.sessionId,
          hook_event_name: 'SessionStart',
          source: 'startup',
          permission_mode: 'default',
        }),
      );
      expect(await exitOf(hook)).toBe(0);
      await following(readLog(logFile(b, s.pid)));
      const [relayPid] = relaysFor(s.socket!);
      expect(relayPid).toBeDefined();

      const ids: string[] = [];
      for (let i = 1; i <= 3; i++) ids.push(await b.send(`SECRET-CONTENT-${i} do not ring me`));
      await s.ring((r) => r.user.message.content.includes(`ref ${ids[2]}`), 'the doorbell for the third message');
      for (const r of s.rings) {
        // The session's own messaging token first, then one user turn for this session: names and a count, no content.
        expect(r.lines.map((l) => l.type)).toEqual(['auth', 'user']);
        expect(r.lines[0]).toEqual({ type: 'auth', token: 'cc-messaging-token' });
        expect(r.user).toMatchObject({ session_id: b.sessionId, from: 'beidou:user', priority: 'next' });
        expect(r.user.message.content).toMatch(
          /^<cross-session-message from="beidou:user" from-name="user" from-mode="prompting">\n\[Beidou\] \d new messages? from user: call mcp__beidou__read_inbox/,
        );
        expect(JSON.stringify(r.lines)).not.toContain('SECRET-CONTENT');
        expect(JSON.stringify(r.lines)).not.toContain(token);
      }
      // Every message still waits for the agent's own read_inbox, once.
      expect((await b.readInbox()).map((m) => m.content)).toEqual(
        [1, 2, 3].map((i) => `SECRET-CONTENT-${i} do not ring me`),
      );
      expect(await b.readInbox()).toEqual([]);

      // The token: in its 0600 file, in a 0700 folder, and in no other file, command line or environment.
      expect(statSync(b.tokenFile).mode & 0o777).toBe(0o600);
      expect(statSync(path.dirname(b.tokenFile)).mode & 0o777).toBe(0o700);
      const holders = [b.home, b.project, b.beidouHome, path.join(b.dir, 'sock')]
        .flatMap(filesUnder)
        .filter((f) => readFileSync(f).includes(token));
      expect(holders).toEqual([b.tokenFile]);
      expect(readFileSync(`/proc/${relayPid}/cmdline`, 'utf8')).not.toContain(token);
      expect(readFileSync(`/proc/${relayPid}/environ`, 'utf8')).not.toContain(token);
      // The wake folder: 0700, its files 0600.
      expect(statSync(b.state.dir).mode & 0o777).toBe(0o700);
      const wakeFiles = readdirSync(b.state.dir);
      expect(wakeFiles.length).toBeGreaterThan(0);
      for (const f of wakeFiles) expect(statSync(path.join(b.state.dir, f)).mode & 0o777, f).toBe(0o600);
    }, 60_000);

    it('a burst of 100 messages to an idle session: a doorbell every 2 s at most, no two alike, the last counting all 100', async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      const relay = b.relay(s);
      await following(relay.log);
      const ids: string[] = [];
      for (let i = 0; i < 100; i++) ids.push(await b.send(`burst ${i}`));
      const last = await s.ring(
        (r) => r.user.message.content.includes(`ref ${ids[99]}`),
        'the doorbell for the 100th message',
      );
      expect(last.user.message.content).toContain('[Beidou] 100 new messages from user');
      const rungBefore = s.rings.length;
      // Claude Code takes about 30 at once, then one per 2 s; it drops a body it saw in the last 30 s from the same sender.
      for (let i = 1; i < s.rings.length; i++)
        expect(s.rings[i]!.at - s.rings[i - 1]!.at).toBeGreaterThanOrEqual(1_900);
      const bodies = s.rings.map((r) => r.user.message.content);
      expect(new Set(bodies).size).toBe(bodies.length);
      expect(new Set(s.rings.map((r) => r.user.msg_id)).size).toBe(s.rings.length);
      // Nothing more for this mail: the next doorbell is for the next message.
      expect(await b.readInbox()).toHaveLength(100);
      const next = await b.send('after the burst');
      const after = await s.ring(
        (r) => r.user.message.content.includes(`ref ${next}`),
        'the doorbell for the next message',
        rungBefore,
      );
      expect(s.rings.indexOf(after)).toBe(rungBefore);
      expect(after.user.message.content).toContain('[Beidou] 1 new message from user');
    }, 60_000);
  });

  describe('one relay per socket', () => {
    it('three SessionStart hooks at once (startup, resume, compact racing): one relay stays, one doorbell per message', async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      reapRelays(s.socket!);
      const env = b.env({
        CLAUDE_CODE_MESSAGING_SOCKET: s.socket!,
        CLAUDE_CODE_SESSION_ID: b.sessionId,
        CLAUDE_PID: String(s.pid),
      });
      const hooks = ['startup', 'resume', 'compact'].map((source) =>
        b.hook('session-start', env, { stdin: { source } }),
      );
      expect(await Promise.all(hooks.map((h) => h.exited))).toEqual([0, 0, 0]);
      // Every relay a hook spawned exists by now; the losers stand down.
      const [relay] = await until(
        'one relay for the socket',
        () => (relaysFor(s.socket!).length === 1 ? relaysFor(s.socket!) : undefined),
        WAIT_MS,
      );
      expect(b.state.relayOf(s.socket!)).toBe(relay);
      await following(readLog(logFile(b, s.pid)));
      // A Stop hook finds it alive and starts none.
      expect(await b.hook('rewake', env).exited).toBe(0);
      expect(relaysFor(s.socket!)).toEqual([relay]);

      const first = await b.send('one');
      await s.ring((r) => r.user.message.content.includes(`ref ${first}`), 'the first doorbell');
      await b.readInbox();
      const second = await b.send('two');
      await s.ring((r) => r.user.message.content.includes(`ref ${second}`), 'the second doorbell');
      expect(s.rings.map((r) => r.user.message.content.match(/ref (\S+)\)/)![1])).toEqual([first, second]);
    }, 60_000);

    it("two relays after a lock race (the loser's lock taken from under it): the one whose lock was taken stands down", async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      const a = b.relay(s);
      await following(a.log);
      // What a racing start does when it misjudges a live relay's lock as a dead one's: removes it and takes its own.
      const lock = readdirSync(b.state.dir).find((f) => /^relay-[0-9a-f]+\.pid$/.test(f))!;
      rmSync(path.join(b.state.dir, lock));
      const second = b.relay(s);
      await following(second.log);
      expect(b.state.relayOf(s.socket!)).toBe(second.child.pid);

      expect(await withDeadline(a.exited, 'the relay whose lock was taken to stand down')).toBe(0);
      expect(a.log()).toMatch(/exiting: another relay .*serves/);
      expect(pidAlive(second.child.pid!)).toBe(true);
      expect(b.state.relayOf(s.socket!)).toBe(second.child.pid);
      // The one that stays is the one `beidou attach --check` names.
      await until(
        'the session record to name the relay that stays',
        () => (b.state.sessionWake(`pid:${s.pid}`)?.pid === second.child.pid ? true : undefined),
        WAIT_MS,
      );
      const id = await b.send('after the race');
      await s.ring((r) => r.user.message.content.includes(`ref ${id}`), 'the doorbell');
      await b.readInbox();
      const id2 = await b.send('and again');
      await s.ring((r) => r.user.message.content.includes(`ref ${id2}`), 'the second doorbell');
      expect(s.rings).toHaveLength(2);
    }, 60_000);
  });

  describe('a relay ends with its session', () => {
    it('the socket deleted while the process lives: the relay exits and leaves nothing in the wake folder', async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      const relay = b.relay(s);
      await following(relay.log);
      rmSync(s.socket!);
      expect(await withDeadline(relay.exited, 'the relay to exit')).toBe(0);
      expect(relay.log()).toMatch(/exiting: the session ended/);
      expect(readdirSync(b.state.dir)).toEqual([]);
    }, 30_000);

    it('the session SIGKILLed (its socket file left behind) and its pid in use again: the relay exits at the next message, which stays in the inbox', async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      // Another live process where the session's was: the pid check cannot tell.
      const reused = await b.standIn(null);
      const relay = b.relay(s, ['--claude-pid', String(reused.pid)]);
      await following(relay.log);
      await s.kill('SIGKILL');
      expect(existsSync(s.socket!)).toBe(true);
      expect(pidAlive(relay.child.pid!)).toBe(true);
      await b.send('for a session that is gone');
      expect(await withDeadline(relay.exited, 'the relay to exit at the refused doorbell')).toBe(0);
      expect(relay.log()).toMatch(/exiting: the session ended \(its socket refuses\)/);
      expect((await b.readInbox()).map((m) => m.content)).toEqual(['for a session that is gone']);
      expect(b.state.relayOf(s.socket!)).toBeNull();
    }, 30_000);
  });

  describe('the server and the token file', () => {
    it('the server unreachable at session start: the hook returns at once; the relay connects when the server comes up', async () => {
      const b = await bench({ serverDown: true });
      const url = b.ts.url;
      await b.ts.close();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      reapRelays(s.socket!);
      const env = b.env({
        CLAUDE_CODE_MESSAGING_SOCKET: s.socket!,
        CLAUDE_CODE_SESSION_ID: b.sessionId,
        CLAUDE_PID: String(s.pid),
      });
      const child = spawn(
        process.execPath,
        [HOOK_MAIN, 'session-start', '--server', url, '--token-file', b.tokenFile, '--home', b.beidouHome],
        { env, stdio: ['pipe', 'ignore', 'pipe'] },
      );
      child.stdin!.end(JSON.stringify({ session_id: b.sessionId }));
      expect(await withDeadline(exitOf(child), 'the hook to return', 5_000)).toBe(0);
      const log = readLog(logFile(b, s.pid));
      await until(
        'the relay to find the server down',
        () => (/inbox stream: fetch failed/.test(log()) ? true : undefined),
        WAIT_MS,
      );

      const ts = await startTestServer({ home: b.beidouHome, port: Number(new URL(url).port) });
      cleanups.push(() => ts.close());
      const agent = await connectAgent(ts.url, b.task.token);
      cleanups.push(() => agent.close());
      const res = await ts.api('POST', `/agents/${b.task.root_agent_id}/send`, { content: 'the server is up' });
      expect(res.status).toBe(200);
      await s.ring(
        (r) => r.user.message.content.includes(`ref ${res.body.message_id}`),
        'the doorbell once the server is up',
      );
    }, 60_000);

    it('the connection goes silent without closing (half-open after the machine slept or the network changed): the relay reconnects and rings', async () => {
      const b = await bench();
      const proxy = await silenceableProxy(new URL(b.ts.url));
      cleanups.push(() => proxy.close());
      const s = await b.standIn(b.socketPath());
      b.session(s);
      const relay = b.relay(s, ['--server', proxy.url]);
      await following(relay.log);
      proxy.silence();
      const id = await b.send('sent while the connection was dead');
      await s.ring(
        (r) => r.user.message.content.includes(`ref ${id}`),
        'the doorbell after the relay noticed the silence',
        0,
        60_000,
      );
      expect(relay.log()).toMatch(/inbox stream: nothing from the server in 40 s/);
    }, 90_000);

    it("the token file rewritten while the relay runs: read again at the next connection (another agent's token: that agent's mail; garbage: the relay stops)", async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      const relay = b.relay(s);
      await following(relay.log);

      // Re-attached with the same --token-file to another agent (the root of another task).
      const other = await createTask(b.ts);
      writeFileSync(`${b.tokenFile}.new`, `${other.token}\n`, { mode: 0o600 });
      renameSync(`${b.tokenFile}.new`, b.tokenFile);
      await b.restart();
      const otherClient = await connectAgent(b.ts.url, other.token);
      cleanups.push(() => otherClient.close());
      const forOther = await b.send('for the other agent', other.root_agent_id);
      await s.ring(
        (r) => r.user.message.content.includes(`ref ${forOther}`),
        'the doorbell for the agent the token file now names',
      );

      // Garbage in the file: refused at the next connection, and the relay says so and stops.
      writeFileSync(b.tokenFile, 'not.a.token\n');
      await b.restart();
      expect(await withDeadline(relay.exited, 'the relay to stop on a refused token')).toBe(0);
      expect(relay.log()).toMatch(/exiting: the server refused the token: invalid_token: /);
      expect(b.state.relayOf(s.socket!)).toBeNull();
    }, 60_000);

    it('the token file deleted (beidou attach --remove) while the relay runs: across a server restart it says which file is missing, and still ends with its session', async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      const relay = b.relay(s);
      await following(relay.log);
      rmSync(b.tokenFile);
      await b.restart();
      await until(
        'the relay to name the missing token file',
        () =>
          relay.log().includes(`inbox stream: ENOENT: no such file or directory, open '${b.tokenFile}'`)
            ? true
            : undefined,
        WAIT_MS,
      );
      expect(pidAlive(relay.child.pid!)).toBe(true);
      await s.kill();
      expect(await withDeadline(relay.exited, 'the relay to end with its session')).toBe(0);
    }, 60_000);
  });

  describe('the hooks, with a crafted environment and sessions folder', () => {
    it('garbage in ~/.claude/sessions (truncated, hostile, not JSON, odd pids): no crash; the relay rings the socket Claude Code named', async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      reapRelays(s.socket!);
      const sessions = path.join(b.home, '.claude', 'sessions');
      // The session's own file truncated mid-write; others claiming its id, busy, with odd pids.
      writeFileSync(
        path.join(sessions, `${s.pid}.json`),
        `{"pid":${s.pid},"sessionId":"${b.sessionId}","status":"idle","messagingSo`,
      );
      const hostile = (name: string, body: unknown) =>
        writeFileSync(path.join(sessions, name), typeof body === 'string' ? body : JSON.stringify(body));
      // A live pid (init) in a file naming this session: stale, or garbage; it is not this process.
      hostile('1.json', { pid: 1, sessionId: b.sessionId, version: '2.1.332', status: 'busy' });
      hostile('0.json', { pid: 0, sessionId: b.sessionId, status: 'busy' });
      hostile('2.json', { pid: -1, sessionId: b.sessionId, status: 'busy' });
      hostile('3.json', { pid: 1.5, sessionId: b.sessionId });
      hostile('4.json', { pid: 1e300, sessionId: b.sessionId });
      hostile('5.json', 'null');
      hostile('6.json', '[1,2]');
      hostile('7.json', '\u0000\u00ff garbage');
      mkdirSync(path.join(sessions, '8.json'));
      const env = b.env({
        CLAUDE_CODE_MESSAGING_SOCKET: s.socket!,
        CLAUDE_CODE_SESSION_ID: b.sessionId,
        CLAUDE_PID: String(s.pid),
      });
      const start = b.hook('session-start', env);
      expect(await start.exited, start.stderr()).toBe(0);
      await following(readLog(logFile(b, s.pid)));
      const id = await b.send('through the garbage');
      const rung = await s.ring((r) => r.user.message.content.includes(`ref ${id}`), 'the doorbell');
      expect(rung.user.session_id).toBe(b.sessionId);
      // Without a socket, the rewake hook cannot read its session's file: it does not wait (on another process), and says why.
      const rewake = b.hook('rewake', b.env({ CLAUDE_CODE_SESSION_ID: b.sessionId, CLAUDE_PID: String(s.pid) }));
      expect(await withDeadline(rewake.exited, 'the rewake hook to return')).toBe(0);
      expect(rewake.stderr()).toMatch(/not waiting for mail: this session is not in Claude Code's sessions folder/);
    }, 60_000);

    it('BEIDOU_HOME not writable: the hooks exit 1 (never 2, which would wake the model) naming the folder, and start no relay', async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      b.session(s);
      reapRelays(s.socket!);
      writeFileSync(path.join(b.dir, 'a-file'), '');
      const blocked = path.join(b.dir, 'a-file', 'home');
      const env = b.env({
        CLAUDE_CODE_MESSAGING_SOCKET: s.socket!,
        CLAUDE_CODE_SESSION_ID: b.sessionId,
        CLAUDE_PID: String(s.pid),
      });
      const start = b.hook('session-start', env, { home: blocked, stdin: { permission_mode: 'default' } });
      expect(await start.exited).toBe(1);
      expect(start.stderr()).toMatch(/^beidou hook: ENOTDIR: not a directory, mkdir '.*a-file\/home\/wake'\n$/);
      expect(relaysFor(s.socket!)).toEqual([]);

      const bare = await b.standIn(null);
      b.session(bare);
      const rewake = b.hook('rewake', b.env({ CLAUDE_CODE_SESSION_ID: b.sessionId, CLAUDE_PID: String(bare.pid) }), {
        home: blocked,
      });
      expect(await withDeadline(rewake.exited, 'the rewake hook to fail')).toBe(1);
      expect(rewake.stderr()).toMatch(/ENOTDIR.*a-file\/home\/wake/);
    }, 30_000);

    it("a session id from the environment cannot put the relay's log outside the wake folder, nor delete a file there when the session ends", async () => {
      const b = await bench();
      const s = await b.standIn(b.socketPath());
      reapRelays(s.socket!);
      // No CLAUDE_PID and no session file: the relay's log is named after the session id.
      const victim = path.join(b.dir, 'victim.log');
      writeFileSync(victim, 'keep me\n');
      const hostileId = '/../../../victim';
      const env = b.env({ CLAUDE_CODE_MESSAGING_SOCKET: s.socket!, CLAUDE_CODE_SESSION_ID: hostileId });
      const start = b.hook('session-start', env);
      expect(await start.exited, start.stderr()).toBe(0);
      const [relay] = await until(
        'the relay',
        () => (relaysFor(s.socket!).length === 1 ? relaysFor(s.socket!) : undefined),
        WAIT_MS,
      );
      await until(
        'the relay to record itself',
        () => (b.state.sessionWake(`sid:${hostileId}`)?.pid === relay ? true : undefined),
        WAIT_MS,
      );
      expect(readFileSync(victim, 'utf8')).toBe('keep me\n');
      // Its log is in the wake folder.
      const logs = readdirSync(b.state.dir).filter((f) => f.endsWith('.log'));
      expect(logs).toHaveLength(1);
      // The session ends: its relay cleans up only inside the wake folder.
      rmSync(s.socket!);
      await until('the relay to exit', () => (pidAlive(relay!) ? undefined : true), WAIT_MS);
      expect(existsSync(victim)).toBe(true);
      expect(readFileSync(victim, 'utf8')).toBe('keep me\n');
    }, 30_000);
  });

  describe('the rewake waiter (no messaging socket)', () => {
    /** A session without a socket (CLAUDE_CODE_HARBOR_KITE=0), its hooks' environment. */
    async function socketless(b: Bench) {
      const s = await b.standIn(null);
      b.session(s);
      return { s, env: b.env({ CLAUDE_CODE_SESSION_ID: b.sessionId, CLAUDE_PID: String(s.pid) }) };
    }
    const waiting = (b: Bench, s: StandIn, pid: number) =>
      until(
        `waiter ${pid} to be recorded`,
        () => (b.state.sessionWake(`pid:${s.pid}`)?.pid === pid ? true : undefined),
        WAIT_MS,
      );

    it('a newer waiter stands the older down; one exit 2 per message, only once the session is idle; the mail stays in the inbox', async () => {
      const b = await bench();
      const { s, env } = await socketless(b);
      const first = b.hook('session-start', env);
      await waiting(b, s, first.child.pid!);
      const second = b.hook('rewake', env);
      expect(await withDeadline(first.exited, 'the older waiter to stand down')).toBe(0);
      await waiting(b, s, second.child.pid!);

      // Busy: the hooks hand mail over at the turn's end; the waiter waits.
      b.session(s, { status: 'busy' });
      const id = await b.send('wake me when idle');
      const third = b.hook('rewake', env);
      expect(await withDeadline(second.exited, 'the second waiter to stand down')).toBe(0);
      await waiting(b, s, third.child.pid!);
      expect(pidAlive(third.child.pid!)).toBe(true);
      b.session(s, { status: 'idle' });
      expect(await withDeadline(third.exited, 'the waiter to wake the session')).toBe(2);
      expect(third.stderr()).toBe(
        `[Beidou] 1 new message from user: call mcp__beidou__read_inbox to read it (ref ${id})\n`,
      );
      expect((await b.readInbox()).map((m) => m.message_id)).toEqual([id]);
    }, 60_000);

    it('/clear (a new session id in the same Claude Code process): the waiter of the old id stands down; one wake for one message', async () => {
      const b = await bench();
      const { s, env } = await socketless(b);
      const before = b.hook('session-start', env);
      await waiting(b, s, before.child.pid!);
      // Claude Code clears: the same process and session file, a new id, and SessionStart again.
      const cleared = `${b.sessionId}-cleared`;
      b.session(s, { sessionId: cleared });
      const after = b.hook(
        'session-start',
        { ...env, CLAUDE_CODE_SESSION_ID: cleared },
        { stdin: { session_id: cleared, source: 'clear' } },
      );
      await waiting(b, s, after.child.pid!);
      expect(await withDeadline(before.exited, "the old id's waiter to stand down")).toBe(0);
      await b.send('one message');
      expect(await withDeadline(after.exited, 'the wake')).toBe(2);
    }, 60_000);

    it("the session's process gone: the waiter ends without waking anything", async () => {
      const b = await bench();
      const { s, env } = await socketless(b);
      const w = b.hook('session-start', env);
      await waiting(b, s, w.child.pid!);
      await s.kill('SIGKILL');
      expect(await withDeadline(w.exited, 'the waiter to end')).toBe(0);
      expect(w.stderr()).toBe('');
    }, 30_000);
  });

  describe('beidou attach in a hostile folder', () => {
    function beidou(b: Bench, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
      return new Promise((resolve) => {
        const c = spawn(process.execPath, [CLI, ...args], {
          cwd: b.project,
          env: b.env(),
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let stdout = '';
        let stderr = '';
        c.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
        c.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
        c.once('exit', (code) => resolve({ code, stdout, stderr }));
      });
    }

    it('--remove deletes no file that is not a token, whatever a committed settings.local.json names', async () => {
      const b = await bench();
      const precious = path.join(b.dir, 'precious.txt');
      writeFileSync(precious, "the user's own file\n");
      // A cloned project's settings, shaped like ours, naming someone else's file as the token file.
      mkdirSync(path.join(b.project, '.claude'));
      const planted = {
        hooks: {
          Stop: [
            {
              hooks: [
                {
                  type: 'command',
                  command: `'node' '/x/hook-main.js' stop --server 'http://x' --token-file '${precious}' --home '/x'`,
                },
              ],
            },
          ],
        },
      };
      writeFileSync(path.join(b.project, '.claude', 'settings.local.json'), JSON.stringify(planted));
      const r = await beidou(b, ['attach', '--remove', '--home', b.beidouHome, '--claude-bin', CLAUDE]);
      expect(readFileSync(precious, 'utf8')).toBe("the user's own file\n");
      expect(r.stdout + r.stderr).toMatch(/not a token/);
      // The planted hooks are gone; a real token file is still removed.
      expect(existsSync(path.join(b.project, '.claude', 'settings.local.json'))).toBe(false);
      const mine = await beidou(b, [
        'attach',
        '--agent',
        b.task.root_agent_id,
        '--server',
        b.ts.url,
        '--home',
        b.beidouHome,
        '--claude-bin',
        CLAUDE,
      ]);
      expect(mine.code, mine.stderr).toBe(0);
      expect((await beidou(b, ['attach', '--remove', '--home', b.beidouHome, '--claude-bin', CLAUDE])).code).toBe(0);
      expect(existsSync(b.tokenFile)).toBe(false);
    }, 60_000);

    it("a file planted where the token file's temporary copy is written (a shared folder): the token file is still 0600, and the planted file never holds the token", async () => {
      const b = await bench();
      const shared = path.join(b.dir, 'shared');
      mkdirSync(shared, { mode: 0o1777 });
      chmodSync(shared, 0o1777);
      const tokenFile = path.join(shared, 'agent.token');
      // `exec` keeps the pid, so the temporary name `attach` will use is known before it runs.
      const c = spawn(
        '/bin/sh',
        [
          '-c',
          'read go; exec "$0" "$@"',
          process.execPath,
          CLI,
          'attach',
          '--agent',
          b.task.root_agent_id,
          '--token-file',
          tokenFile,
          '--server',
          b.ts.url,
          '--home',
          b.beidouHome,
          '--claude-bin',
          CLAUDE,
        ],
        {
          cwd: b.project,
          env: b.env(),
          stdio: ['pipe', 'ignore', 'pipe'],
        },
      );
      let stderr = '';
      c.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      const plantedFile = `${tokenFile}.${c.pid}.tmp`;
      writeFileSync(plantedFile, '', { mode: 0o666 });
      chmodSync(plantedFile, 0o666);
      c.stdin!.end('go\n');
      expect(await exitOf(c), stderr).toBe(0);
      const token = readFileSync(tokenFile, 'utf8').trim();
      expect(token.split('.')).toHaveLength(3);
      expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
      expect(existsSync(plantedFile) ? readFileSync(plantedFile, 'utf8') : '').not.toContain(token);
    }, 60_000);
  });
});

describe('with the real Claude Code: /clear while the rewake hooks wait', () => {
  const rigs: WakeRig[] = [];
  afterEach(async () => {
    for (const r of rigs.splice(0)) await r.close();
  });

  it('the waiter of the cleared session stands down (one waiter per Claude Code process), and a message wakes the session once', async () => {
    const ts = await startTestServer();
    const rig = await WakeRig.create(() => ts, { extraEnv: { CLAUDE_CODE_HARBOR_KITE: '0' } });
    rig.onClose(async () => {
      await ts.close();
      removeHome(ts.home);
    });
    rigs.push(rig);
    await rig.attach();
    const claude = rig.startClaude();
    const session = await rig.idleSession(claude);
    const before = await until('the SessionStart waiter', () => rig.waker(session), STEP_MS);
    expect(before.path).toBe('rewake');

    // /clear: the same process, a new session id, SessionStart again.
    claude.keys('/clear', 'Enter');
    const cleared = await until(
      'a new session id in the same process',
      () =>
        liveSessions(rig.env).find(
          (x) => x.pid === session.pid && x.sessionId !== session.sessionId && x.status === 'idle',
        ),
      STEP_MS,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${rig.diagnose(claude)}`);
    });
    await until(
      'the waiter of the new session id',
      () => (rig.waker(cleared)?.session_id === cleared.sessionId ? true : undefined),
      STEP_MS,
    );
    await until(
      'the waiter of the cleared id to stand down',
      () => (pidAlive(before.pid) ? undefined : true),
      STEP_MS,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${rig.diagnose(claude)}`);
    });

    rig.fake.push({ tools: [{ name: 'mcp__beidou__read_inbox', input: {} }] }, { text: 'Read it.' });
    const woken = await rig.wakeBy(claude, async () => {
      const res = await ts.api('POST', `/agents/${rig.task.root_agent_id}/send`, { content: 'after the clear' });
      expect(res.status).toBe(200);
      return res.body.message_id as string;
    });
    expect(lastUserText(woken.request.body)).toMatch(/\[Beidou\] 1 new message from user/);
    expect((await rig.readInboxResult(0)).messages.map((m: any) => m.content)).toEqual(['after the clear']);

    // After a real session (transcripts, Claude Code's own files, the wake folder, the event log): the token is in its file only.
    const tokenFile = path.join(ts.home, 'agents', `${rig.task.root_agent_id}.token`);
    const token = readFileSync(tokenFile, 'utf8').trim();
    const holders = [rig.home, ts.home].flatMap(filesUnder).filter((f) => readFileSync(f).includes(token));
    expect(holders).toEqual([tokenFile]);
  }, 180_000);
});
