import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import { INSTRUCTIONS_MAX_CHARS, launchPromptText } from '../../src/server/mcp/launch-prompt.js';
import { durableEvents, eventsNamed } from '../support/events.js';
import { until } from '../../src/testkit/poll.js';
import {
  agentToken,
  connectAgent,
  createTask,
  removeHome,
  startTestServer,
  type TestAgent,
  type TestServer,
} from '../support/server.js';

/**
 * Every agent, however it connects, is told who it is and what to do: a brief in the
 * `initialize` instructions and its whole launch prompt as the MCP prompt `launch`, built
 * by the same code as the launch record a spawner gets. Real server, real MCP SDK clients.
 */
describe('the launch prompt over MCP', () => {
  let ts: TestServer;
  const clients: TestAgent[] = [];
  afterEach(async () => {
    await Promise.allSettled(clients.map((c) => c.close()));
    clients.length = 0;
    await ts.close();
    removeHome(ts.home);
  });

  const connect = async (token: string) => {
    const agent = await connectAgent(ts.url, token);
    clients.push(agent);
    return agent;
  };
  const promptText = async (agent: TestAgent) => {
    const got = await agent.client.getPrompt({ name: 'launch' });
    expect(got.messages).toHaveLength(1);
    expect(got.messages[0]!.role).toBe('user');
    return (got.messages[0]!.content as { type: 'text'; text: string }).text;
  };

  it('a root a person runs (spawn: false) gets its task and skill in its instructions and as the launch prompt', async () => {
    ts = await startTestServer();
    const task = await createTask(ts, { task: 'Write a haiku about the sea into haiku.md', spawn: false });
    const root = await connect(task.token);
    const name = ts.server.services.registry.agent(task.root_agent_id)!.name;

    const instructions = root.client.getInstructions()!;
    expect(instructions).toContain(
      `You are agent ${name} (${task.root_agent_id}) in Beidou task ${task.task_id}, the root agent`,
    );
    expect(instructions).toContain('Your skill: leader (Leads a task or a team;');
    expect(instructions).toContain('/mcp__beidou__launch');
    expect(instructions.endsWith('Your task:\nWrite a haiku about the sea into haiku.md')).toBe(true);

    expect(root.client.getServerCapabilities()?.prompts).toBeDefined();
    const listed = await root.client.listPrompts();
    expect(listed.prompts.map((p) => p.name)).toEqual(['launch']);

    const text = await promptText(root);
    expect(text).toContain('You are root, a leader in a Beidou team.'); // the leader skill's body, substituted
    expect(text).toContain(`- Agent id: ${task.root_agent_id} (name: ${name})`);
    expect(text).toContain('- Leader: the user (through the user gateway)');
    expect(text).toContain('## Persistent-agent contract');
    expect(text).toContain('## Completion-handoff contract');
    expect(text.endsWith('## Your task\nWrite a haiku about the sea into haiku.md')).toBe(true);

    // The same builder as a spawner's launch record: a root queued for a spawner, same text,
    // gets the same prompt but for its own ids, name and workspace.
    const spawned = await createTask(ts, { task: 'Write a haiku about the sea into haiku.md', spawn: true });
    const [launch] = eventsNamed(durableEvents(ts, spawned.task_id), 'launch.requested');
    const spawnedName = ts.server.services.registry.agent(spawned.root_agent_id)!.name;
    const asIfSpawned = text
      .replaceAll(task.root_agent_id, spawned.root_agent_id)
      .replaceAll(task.task_id, spawned.task_id)
      .replaceAll(name, spawnedName);
    expect(asIfSpawned).toBe(launchPromptText({ prompt: launch!.prompt, first_message: launch!.first_message }));
  });

  it('a member gets its own role, skill and plan task, exactly as its launch record holds them', async () => {
    ts = await startTestServer();
    const task = await createTask(ts, { task: 'Ship the product', spawn: false });
    const root = await connect(task.token);
    const plan = await root.call('declare_plan', {
      tasks: [
        {
          id: 'docs',
          role: 'writer',
          skill: 'worker',
          task: 'Document the install steps in INSTALL.md',
          description: 'Writes the docs.',
        },
      ],
    });
    expect(plan.ok).toBe(true);
    const spawned = await root.call('spawn_agent', { task_id: 'docs' });
    if (!spawned.ok) throw new Error(JSON.stringify(spawned.error));
    const childId = spawned.value.agent_id as string;
    const child = await connect(await agentToken(ts, childId));
    const rootName = ts.server.services.registry.agent(task.root_agent_id)!.name;

    const instructions = child.client.getInstructions()!;
    expect(instructions).toContain(`(${childId}) in Beidou task ${task.task_id}, role "writer" in team`);
    expect(instructions).toContain(`led by ${rootName} (${task.root_agent_id})`);
    expect(instructions).toContain('Your skill: worker (');
    expect(instructions).toContain('[TASK ASSIGNMENT]\nplan_task_id: docs');
    expect(instructions).toContain('Document the install steps in INSTALL.md');
    expect(instructions).not.toContain('Ship the product');
    // ... and the root's brief is still its own.
    expect(root.client.getInstructions()).not.toContain('INSTALL.md');

    const [launch] = eventsNamed(durableEvents(ts, task.task_id), 'launch.requested', (e) => e.agent_id === childId);
    expect(await promptText(child)).toBe(
      launchPromptText({ prompt: launch!.prompt, first_message: launch!.first_message }),
    );
    expect(launch!.prompt).toContain('Writes the docs.'); // the worker skill's {role_description}
  });

  it("keeps the instructions under Claude Code's 2,048-character cut; the whole task is in the prompt", async () => {
    ts = await startTestServer();
    const long = `START ${'the sea, the tide, the shore. '.repeat(400)} END-OF-TASK`;
    const task = await createTask(ts, { task: long, spawn: false });
    const root = await connect(task.token);
    const instructions = root.client.getInstructions()!;
    expect(instructions.length).toBeLessThanOrEqual(INSTRUCTIONS_MAX_CHARS);
    expect(INSTRUCTIONS_MAX_CHARS).toBeLessThan(2048);
    expect(instructions).toContain('Your task:\nSTART the sea');
    expect(instructions).not.toContain('END-OF-TASK');
    expect(instructions.endsWith('… [cut here: the whole task is in the "launch" prompt]')).toBe(true);
    expect(await promptText(root)).toContain(`## Your task\n${long}`);
  });

  it('refuses an unknown prompt name with invalid params, naming the one prompt', async () => {
    ts = await startTestServer();
    const task = await createTask(ts, { spawn: false });
    const root = await connect(task.token);
    const err = await root.client.getPrompt({ name: 'lunch' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpError);
    expect((err as McpError).code).toBe(ErrorCode.InvalidParams);
    expect((err as McpError).message).toContain('no prompt named "lunch"; the one prompt is "launch"');
  });

  it('says so when the skill of a root no longer loads, and refuses the prompt with the reason', async () => {
    ts = await startTestServer();
    const dir = path.join(ts.home, 'skills', 'poet');
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      path.join(dir, 'SKILL.md'),
      '---\nname: poet\ndescription: Writes poems.\n---\nYou are {role}, a poet.\n',
    );
    const task = await createTask(ts, { task: 'a sonnet', skill: 'poet', spawn: false });
    const before = await connect(task.token);
    expect(before.client.getInstructions()).toContain('Your skill: poet (Writes poems.)');
    expect(await promptText(before)).toContain('You are root, a poet.');

    rmSync(dir, { recursive: true });
    const after = await connect(task.token);
    expect(after.client.getInstructions()).toContain(
      'Your skill: poet, which does not load now (the skill "poet" of agent',
    );
    expect(after.client.getInstructions()).toContain('Your task:\na sonnet');
    const err = await after.client.getPrompt({ name: 'launch' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpError);
    expect((err as McpError).code).toBe(ErrorCode.InternalError);
    expect((err as McpError).message).toContain('unknown_skill: the skill "poet" of agent');
  });

  it('a terminated agent gets no launch prompt: its session ends and a new one is refused', async () => {
    ts = await startTestServer();
    const task = await createTask(ts, { spawn: false });
    const root = await connect(task.token);
    expect(await promptText(root)).toContain(task.root_agent_id);
    expect((await ts.api('POST', `/tasks/${task.task_id}/terminate`, {})).status).toBe(200);
    await until(
      "the terminated root's session to be closed",
      async () =>
        await root.client.getPrompt({ name: 'launch' }).then(
          () => undefined,
          (e: Error) => e.message,
        ),
    );
    const refused = await connectAgent(ts.url, task.token).then(
      () => 'connected',
      (e: Error) => e.message,
    );
    expect(refused).toContain('agent_terminated');
  });
});
