import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { pidAlive } from '../../src/util/process.js';
import { lastUserText } from '../../src/testkit/fake-anthropic.js';
import { until } from '../../src/testkit/poll.js';
import { spawnServer, type ServerProcess } from '../support/process.js';
import { removeHome, tempHome } from '../support/server.js';
import { STEP_MS, WakeRig, type RigServer } from '../support/wake-rig.js';

/**
 * Faults around the wake path (docs/claude-code.md): the server killed under a relay, the
 * relay itself killed, the agent terminated. Real processes throughout: `beidou serve` as a
 * child process, the real Claude Code under tmux, the relay as Claude Code's hook starts it.
 */
describe('waking a Claude Code session when parts die', () => {
  const rigs: WakeRig[] = [];
  afterEach(async () => {
    for (const r of rigs.splice(0)) await r.close();
  });

  /** A server process on `home`, and a rig whose server is whichever process runs now. */
  async function setup(): Promise<{ rig: WakeRig; restart: () => Promise<void>; kill: () => Promise<void> }> {
    const home = tempHome();
    let proc: ServerProcess = await spawnServer(home);
    const port = Number(new URL(proc.url).port);
    const admin = readFileSync(path.join(home, 'admin.token'), 'utf8').trim();
    const server = (): RigServer => ({
      url: proc.url,
      home,
      api: async (method, route, body) => {
        const res = await fetch(`${proc.url}/api${route}`, {
          method,
          headers: {
            authorization: `Bearer ${admin}`,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
        const text = await res.text();
        return { status: res.status, body: text ? JSON.parse(text) : undefined };
      },
    });
    const kill = async () => {
      proc.child.kill('SIGKILL');
      await proc.exited;
    };
    const rig = await WakeRig.create(server);
    rig.onClose(async () => {
      if (proc.child.exitCode === null && proc.child.signalCode === null) await kill();
      removeHome(home);
    });
    rigs.push(rig);
    return { rig, kill, restart: async () => void (proc = await spawnServer(home, {}, port)) };
  }

  const send = (rig: WakeRig, content: string) => async () => {
    const res = await rig.server().api('POST', `/agents/${rig.task.root_agent_id}/send`, { content });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.message_id as string;
  };

  it('the server SIGKILLed and restarted on its home and port: the relay reconnects, and the next message wakes the session', async () => {
    const { rig, kill, restart } = await setup();
    await rig.attach();
    const claude = rig.startClaude();
    const session = await rig.idleSession(claude);
    const relay = await until('the relay', () => rig.waker(session), STEP_MS);

    await kill();
    await restart();
    rig.fake.push({ tools: [{ name: 'mcp__beidou__read_inbox', input: {} }] }, { text: 'Read it.' });
    const woken = await rig.wakeBy(claude, send(rig, 'after the restart'));
    expect(lastUserText(woken.request.body)).toMatch(/\[Beidou\] 1 new message from user/);
    // Taken once: by read_inbox, or (when Claude Code's tools are not back yet after the
    // restart: "No such tool available") by the Stop hook that ends the woken turn.
    const events = await until(
      'the message delivered',
      async () => {
        const all = (await rig.server().api('GET', `/tasks/${rig.task.task_id}/events?since=0&limit=10000`)).body
          .events as any[];
        return all.some((e) => e.event === 'agent_input' && (e.message_ids ?? [e.message_id]).includes(woken.messageId))
          ? all
          : undefined;
      },
      STEP_MS,
    );
    const inputs = events.filter(
      (e) => e.event === 'agent_input' && (e.message_ids ?? [e.message_id]).includes(woken.messageId),
    );
    expect(inputs).toHaveLength(1);
    expect(['read_inbox', 'hook']).toContain(inputs[0].via);
    // The same relay: it outlived the server.
    expect(rig.waker(session)?.pid).toBe(relay.pid);
  }, 180_000);

  it("the relay SIGKILLed: the session's next Stop starts a new one, which rings for the next message", async () => {
    const { rig } = await setup();
    await rig.attach();
    const claude = rig.startClaude();
    const session = await rig.idleSession(claude);
    const relay = await until('the relay', () => rig.waker(session), STEP_MS);
    process.kill(relay.pid, 'SIGKILL');
    await until('the relay to die', () => (pidAlive(relay.pid) ? undefined : true), STEP_MS);

    // The user types; the turn's Stop hook finds no relay for the socket and starts one.
    rig.fake.push(
      { text: 'Hello.' },
      { tools: [{ name: 'mcp__beidou__read_inbox', input: {} }] },
      { text: 'Read it.' },
    );
    claude.keys('hello', 'Enter');
    await rig.fake.waitForTurn(0, { timeoutMs: STEP_MS });
    const next = await until(
      'a new relay',
      () => {
        const w = rig.waker(session);
        return w && w.pid !== relay.pid ? w : undefined;
      },
      STEP_MS,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${rig.diagnose(claude)}`);
    });
    expect(next.path).toBe('socket');
    await rig.idleSession(claude);
    const woken = await rig.wakeBy(claude, send(rig, 'after the relay died'));
    expect(woken.request.turn).toBe(1);
    const inbox = await rig.readInboxResult(1);
    expect(inbox.messages.map((m: any) => m.content)).toEqual(['after the relay died']);
  }, 180_000);

  it('the agent terminated: the relay exits and leaves no lock behind', async () => {
    const { rig } = await setup();
    await rig.attach();
    const claude = rig.startClaude();
    const session = await rig.idleSession(claude);
    const relay = await until('the relay', () => rig.waker(session), STEP_MS);
    const logFile = path.join(rig.state.dir, `relay-${session.pid}.log`);
    await until(
      'the relay to follow the inbox',
      () => (readFileSync(logFile, 'utf8').includes('following the inbox') ? true : undefined),
      STEP_MS,
    );
    const res = await rig.server().api('POST', `/tasks/${rig.task.task_id}/terminate`, {});
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await until('the relay to exit', () => (pidAlive(relay.pid) ? undefined : true), STEP_MS);
    expect(rig.state.relayOf(session.messagingSocketPath!)).toBeNull();
    const log = readFileSync(logFile, 'utf8');
    expect(log).toMatch(/exiting: the server ended the stream: agent_terminated/);
  }, 180_000);
});
