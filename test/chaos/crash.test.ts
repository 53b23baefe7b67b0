import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { connectAgent, removeHome, tempHome, type TestAgent } from '../support/server.js';
import { spawnServer, type ServerProcess, processApi } from '../support/process.js';

/** kill -9 at an arbitrary instant loses nothing the server acknowledged. */
describe('crash safety', () => {
  let home = '';
  let proc: ServerProcess | undefined;
  const clients: TestAgent[] = [];
  beforeAll(() => {
    execFileSync('npx', ['tsc', '-b'], { cwd: path.resolve(import.meta.dirname, '../..'), stdio: 'inherit' });
  });
  afterEach(async () => {
    await Promise.allSettled(clients.splice(0).map((c) => c.close()));
    proc?.child.kill('SIGKILL');
    await proc?.exited;
    removeHome(home);
  });

  it('keeps every acknowledged message after SIGKILL mid-load, and delivers each exactly once', async () => {
    home = tempHome();
    proc = await spawnServer(home);
    const api = processApi(home, () => proc!);
    const task = await api('POST', '/tasks', { task: 'crash test', spawn: false });
    const root = await connectAgent(proc.url, task.token);
    clients.push(root);
    const team = await root.call('create_team', {
      name: 'senders',
      task: 'send',
      roles: [1, 2, 3].map((i) => ({ role: `sender-${i}`, skill: 'worker', description: `sender ${i}` })),
    });
    if (!team.ok) throw new Error(JSON.stringify(team.error));
    const memberIds = (team.value.members as Array<{ agent_id: string }>).map((m) => m.agent_id);
    const senders = await Promise.all(
      memberIds.map(async (id) => connectAgent(proc!.url, (await api('POST', `/agents/${id}/token`, {})).token)),
    );
    clients.push(...senders);

    // Three senders stream messages to the root; we kill the server after 150 acknowledgements.
    const acknowledged = new Set<string>();
    let killed = false;
    let resolveEnough!: () => void;
    const enough = new Promise<void>((r) => (resolveEnough = r));
    const streams = senders.map(async (sender, s) => {
      for (let i = 0; !killed; i++) {
        const res = await sender
          .call('send_message', { to: task.root_agent_id, content: `s${s}-${i}` })
          .catch(() => null);
        if (!res) return;
        if (res.ok) acknowledged.add(res.value.message_id);
        if (acknowledged.size >= 150) resolveEnough();
      }
    });
    await enough;
    killed = true;
    proc.child.kill('SIGKILL');
    await proc.exited;
    // What was acknowledged before the kill is what the server promised to keep.
    const ackedAtKill = new Set(acknowledged);
    // Calls cut by the kill may hang in the client's reconnection logic; closing ends them.
    await Promise.allSettled(clients.splice(0).map((c) => c.close()));
    await Promise.allSettled(streams);

    proc = await spawnServer(home);
    const events = (await api('GET', `/tasks/${task.task_id}/events?since=0&limit=10000`)).events as Array<{
      seq: number;
      event: string;
      message_id?: string;
    }>;
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    const logged = new Set(events.filter((e) => e.event === 'send_message').map((e) => e.message_id));
    for (const id of ackedAtKill) expect(logged.has(id)).toBe(true);

    const root2 = await connectAgent(proc.url, task.token);
    clients.push(root2);
    const read = await root2.call('read_inbox');
    if (!read.ok) throw new Error(JSON.stringify(read.error));
    const delivered = (read.value.messages as Array<{ message_id: string }>).map((m) => m.message_id);
    expect(new Set(delivered).size).toBe(delivered.length);
    expect(new Set(delivered)).toEqual(logged);
    expect((await root2.call('read_inbox')).raw.structuredContent).toEqual({ messages: [] });
  });
});
