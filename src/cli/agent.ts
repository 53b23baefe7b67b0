import { api, CliError, flagsFrom, printJson, type ClientOptions } from './client.js';
import { renderAgent, type AgentView, type TaskDetailView } from './render.js';

export interface AgentOptions extends ClientOptions {
  /** The task in which AGENT is looked up by name (or role). */
  task?: string;
  json?: boolean;
}

/**
 * AGENT as the user typed it: an agent id, or with `--task` a name (`worker-3f2a`), a
 * role held by one agent of that task, or `root`. Names are resolved here, from the task's
 * agents, since the API addresses agents by id only. An unknown one exits 1 (as the
 * server's 404 does); one that fits several agents exits 2: the user has to say which.
 */
export async function resolveAgent(
  opts: AgentOptions,
  ref: string,
): Promise<{ agent: AgentView; detail: TaskDetailView | null }> {
  if (!opts.task) {
    try {
      return { agent: await api<AgentView>(opts, 'GET', `/agents/${encodeURIComponent(ref)}`), detail: null };
    } catch (err) {
      if (err instanceof CliError && err.code === 'unknown_agent') {
        throw new CliError(
          `${err.message} (to find an agent by name or role, give its task: --task TASK_ID)`,
          1,
          err.code,
        );
      }
      throw err;
    }
  }
  const detail = await api<TaskDetailView>(opts, 'GET', `/tasks/${encodeURIComponent(opts.task)}`);
  const match = (pick: (a: AgentView) => boolean) => detail.agents.filter(pick);
  // `root` names the task's root (whose role is empty) unless an agent has that role.
  const isRoot = (a: AgentView) => ref === 'root' && a.agent_id === detail.task.root_agent_id;
  for (const found of [
    match((a) => a.agent_id === ref),
    match((a) => a.name === ref),
    match((a) => a.role === ref),
    match(isRoot),
  ]) {
    if (found.length === 1) return { agent: found[0]!, detail };
    if (found.length > 1) {
      throw new CliError(
        `"${ref}" fits ${found.length} agents of task ${opts.task}: ${found.map((a) => `${a.name} (${a.agent_id})`).join(', ')}; give a name or an id`,
        2,
      );
    }
  }
  const known = detail.agents.map((a) => a.name).join(', ') || 'none';
  throw new CliError(`no agent "${ref}" in task ${opts.task} (its agents: ${known})`, 1, 'unknown_agent');
}

/** `beidou agent show AGENT`: one agent, its status (and error), usage and hand-off. */
export async function agentShow(ref: string, opts: AgentOptions): Promise<void> {
  const { agent, detail } = await resolveAgent(opts, ref);
  if (opts.json) return printJson(agent);
  // The task gives names to the ids the agent refers to (its leader, its teams).
  const task = detail ?? (await api<TaskDetailView>(opts, 'GET', `/tasks/${encodeURIComponent(agent.task_id)}`));
  process.stdout.write(renderAgent(agent, task));
}

/** `beidou message AGENT TEXT`: a message from the user into the agent's inbox. */
export async function message(ref: string, text: string, opts: AgentOptions): Promise<void> {
  const { agent } = await resolveAgent(opts, ref);
  const sent = await api<{ message_id: string }>(
    opts,
    'POST',
    `/agents/${encodeURIComponent(agent.agent_id)}/send`,
    { content: text },
    flagsFrom({ content: 'TEXT' }),
  );
  if (opts.json) printJson({ ok: true, message_id: sent.message_id, agent_id: agent.agent_id });
  else process.stdout.write(`sent ${sent.message_id} to ${agent.name} (${agent.agent_id})\n`);
}

/** `beidou agent revoke-tokens AGENT`: every token of the agent minted until now is refused. */
export async function agentRevokeTokens(ref: string, opts: AgentOptions): Promise<void> {
  const { agent } = await resolveAgent(opts, ref);
  const revoked = await api<{ ok: true; agent_id: string; before: number; relaunched: boolean }>(
    opts,
    'POST',
    `/agents/${encodeURIComponent(agent.agent_id)}/revoke-tokens`,
    {},
  );
  if (opts.json) return printJson(revoked);
  const next = revoked.relaunched
    ? 'its spawner restarts it with a fresh token'
    : `mint a new one with beidou token --agent ${agent.agent_id}`;
  process.stdout.write(`revoked every token of ${agent.name} (${agent.agent_id}) minted until now; ${next}\n`);
}
