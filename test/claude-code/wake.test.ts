import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { pidAlive } from '../../src/util/process.js';
import { CLAUDE } from '../../src/testkit/claude-tmux.js';
import type { TmuxClaude } from '../../src/testkit/claude-tmux.js';
import { eventsNamed, waitForEvent, type AnyEvent } from '../support/events.js';
import { lastUserText } from '../../src/testkit/fake-anthropic.js';
import { until } from '../../src/testkit/poll.js';
import {
  agentToken,
  connectAgent,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';
import { STEP_MS, WakeRig, type RigOptions } from '../support/wake-rig.js';

/**
 * A message wakes an idle Claude Code session the user runs (docs/claude-code.md): the real
 * Claude Code binary, interactive under tmux, set up by `beidou attach`, against the real
 * server and a scripted stand-in for the Messages API. Every wait is on something observed:
 * a request the stand-in recorded, an event in the task's log, a file or process state.
 */

describe('a message wakes an idle Claude Code session (beidou attach)', () => {
  const rigs: WakeRig[] = [];
  afterEach(async () => {
    for (const r of rigs.splice(0)) await r.close();
  });

  async function setup(opts: RigOptions = {}): Promise<WakeRig> {
    const ts = await startTestServer();
    const rig = await WakeRig.create(() => ts, opts);
    rig.onClose(async () => {
      await ts.close();
      removeHome(ts.home);
    });
    rigs.push(rig);
    return rig;
  }

  const delivered = (events: AnyEvent[], messageId: string) =>
    eventsNamed(events, 'agent_input', (e) => (e.message_ids ?? [e.message_id]).includes(messageId));

  /**
   * The session idle at its prompt: a message from the user (REST) and one from another agent
   * (send_message) each start a model request within 5 s; the session's read_inbox returns
   * each message once. Returns the session, and the pid of what woke it.
   */
  async function twoWakes(s: WakeRig, claude: TmuxClaude, path: 'socket' | 'rewake') {
    s.fake.push(
      { tools: [{ name: 'mcp__beidou__read_inbox', input: {} }] },
      { text: 'Read the first message.' },
      { tools: [{ name: 'mcp__beidou__read_inbox', input: {} }] },
      { text: 'Read the second message.' },
    );
    const session = await s.idleSession(claude);
    const waker = () => s.waker(session);
    const wake = await until(`the session's ${path} waker`, waker, STEP_MS).catch((err: Error) => {
      throw new Error(`${err.message}\n${s.diagnose(claude)}`);
    });
    expect(wake).toMatchObject({ path, agent_id: s.task.root_agent_id });
    const check = await s.beidou(['attach', '--check', '--claude-bin', CLAUDE]);
    expect(check.stdout, check.stderr).toMatch(new RegExp(`^${path}\t`));

    // 1. From the user, through the REST API.
    const first = await s.wakeBy(claude, async () => {
      const res = await s
        .server()
        .api('POST', `/agents/${s.task.root_agent_id}/send`, { content: 'first: from the user' });
      expect(res.status).toBe(200);
      return res.body.message_id as string;
    });
    expect(first.request.turn).toBe(0);
    expect(first.ms).toBeLessThan(5_000);
    expect(lastUserText(first.request.body)).toMatch(
      /\[Beidou\] 1 new message from user: call mcp__beidou__read_inbox/,
    );
    expect(lastUserText(first.request.body)).not.toContain('first: from the user');
    const inbox1 = await s.readInboxResult(0);
    expect(inbox1.messages.map((m: any) => m.content)).toEqual(['first: from the user']);

    // 2. From another agent of the task, through send_message.
    const root = await connectAgent(s.server().url, s.task.token);
    s.onClose(() => root.close());
    const made = await root.call('create_team', {
      name: 'helpers',
      task: 'help',
      roles: [{ role: 'helper', skill: 'worker', description: 'helps' }],
    });
    expect(made.ok, JSON.stringify(made)).toBe(true);
    const team = (made as { value: any }).value;
    const helperId: string = team.members?.[0]?.agent_id ?? team.agents?.[0]?.agent_id;
    const helper: TestAgent = await connectAgent(s.server().url, await agentToken(s.server() as TestServer, helperId));
    s.onClose(() => helper.close());
    // Idle again, and (rewake) the waiter the last Stop re-armed is in place.
    await s.fake.waitForTurn(1);
    await s.idleSession(claude);
    await until(
      'a waker for the next message',
      () => (waker()?.pid && (path === 'socket' || waker()!.pid !== wake.pid) ? true : undefined),
      STEP_MS,
    );
    const second = await s.wakeBy(claude, async () => {
      const sent = await helper.call('send_message', { to: s.task.root_agent_id, content: 'second: from the helper' });
      expect(sent.ok, JSON.stringify(sent)).toBe(true);
      return (sent as { value: { message_id: string } }).value.message_id;
    });
    expect(second.request.turn).toBe(2);
    expect(second.ms).toBeLessThan(5_000);
    expect(lastUserText(second.request.body)).toMatch(/\[Beidou\] 1 new message from helper/);
    const inbox2 = await s.readInboxResult(2);
    expect(inbox2.messages.map((m: any) => m.content)).toEqual(['second: from the helper']);

    // Each message delivered exactly once, by the session's read_inbox.
    await waitForEvent(s.server() as TestServer, s.task.task_id, (e) => delivered([e], second.messageId).length > 0, {
      what: 'the second delivery',
    });
    const events = (await s.server().api('GET', `/tasks/${s.task.task_id}/events?since=0&limit=10000`)).body
      .events as AnyEvent[];
    expect(delivered(events, first.messageId)).toHaveLength(1);
    expect(delivered(events, second.messageId)).toHaveLength(1);
    // Taken by the session's own read_inbox: the doorbell carried no message.
    expect([...delivered(events, first.messageId), ...delivered(events, second.messageId)].map((e) => e.via)).toEqual([
      'read_inbox',
      'read_inbox',
    ]);
    return { session, wake };
  }

  it('socket: a REST message and a send_message each wake the idle session within 5 s; read_inbox returns each once; the relay ends with the session', async () => {
    const s = await setup();
    const printed = await s.attach();
    expect(printed).toContain(`attached ${s.task.root_agent_id}`);

    // No file in the project holds the token; the token file is 0600 and outside it.
    const tokenFile = path.join(s.server().home, 'agents', `${s.task.root_agent_id}.token`);
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    const token = readFileSync(tokenFile, 'utf8').trim();
    const settingsText = readFileSync(path.join(s.project, '.claude', 'settings.local.json'), 'utf8');
    expect(settingsText).not.toContain(token);
    const settings = JSON.parse(settingsText);
    expect(settings.permissions.allow).toContain('mcp__beidou__*');
    expect(Object.keys(settings.hooks).sort()).toEqual(['PostToolUse', 'PreToolUse', 'SessionStart', 'Stop']);
    const claudeJson = readFileSync(path.join(s.home, '.claude.json'), 'utf8');
    expect(claudeJson).toContain(`${s.server().url}/mcp`);
    expect(claudeJson).not.toContain(token);

    const claude = s.startClaude();
    const { session, wake } = await twoWakes(s, claude, 'socket');

    // The relay ends with the session.
    claude.kill();
    await until('the relay to exit with its session', () => (pidAlive(wake.pid) ? undefined : true), STEP_MS);
    expect(s.state.relayOf(session.messagingSocketPath!)).toBeNull();
    // A relay whose session ended leaves nothing behind in the wake folder.
    expect(readdirSync(s.state.dir)).toEqual([]);
  }, 180_000);

  it('rewake: with the socket switched off (CLAUDE_CODE_HARBOR_KITE=0) the asyncRewake hooks wake the idle session, re-armed at each Stop', async () => {
    const s = await setup({ extraEnv: { CLAUDE_CODE_HARBOR_KITE: '0' } });
    await s.attach();
    const claude = s.startClaude();
    const { session, wake } = await twoWakes(s, claude, 'rewake');
    expect(session.messagingSocketPath).toBeNull();
    claude.kill();
    await until('the waiter to end with its session', () => (pidAlive(wake.pid) ? undefined : true), STEP_MS);
  }, 180_000);

  it("bypass-permissions: the doorbell attests the session's mode, so the session takes it instead of holding it", async () => {
    const s = await setup({ bypass: true, extraEnv: { IS_SANDBOX: '1' } });
    await s.attach();
    const claude = s.startClaude(['--permission-mode', 'bypassPermissions']);
    await twoWakes(s, claude, 'socket');
    expect(claude.capture()).not.toMatch(/Held peer message/);
  }, 180_000);
});
