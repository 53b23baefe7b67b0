import { accessSync, constants, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { defaultHome } from '../config.js';
import { api, CliError, flagsFrom, printJson, serverUrl, type ClientOptions } from './client.js';
import { renderTaskDetail, renderTaskList, type TaskDetailView, type TaskListItem } from './render.js';
import { headersHelper, quote, writeFileAtomic } from './wake/attach-settings.js';

interface CreatedTask {
  task_id: string;
  root_agent_id: string;
  token: string;
  mcp_url: string;
}

export interface TaskStartOptions extends ClientOptions {
  spawn: boolean;
  json?: boolean;
  skill?: string;
  model?: string;
  name?: string;
  workspace?: string;
  printToken?: boolean;
}

/** The request's fields as `task start` spells them. */
const START_FLAGS = flagsFrom({
  task: 'TEXT',
  skill: '--skill',
  model: '--model',
  name: '--name',
  workspace: '--workspace',
});

/**
 * `beidou task start "TEXT"`: create a task; print its ids and, with --no-spawn, the `attach`
 * line and a `claude mcp add-json` line whose headers helper reads the root's token from a
 * 0600 file. The token itself is printed only with --print-token: a printed token lands in
 * shell history, and a `--header` one in ~/.claude.json.
 */
export async function taskStart(text: string, opts: TaskStartOptions): Promise<void> {
  const body = {
    task: text,
    spawn: opts.spawn,
    ...(opts.skill ? { skill: opts.skill } : {}),
    ...(opts.model ? { model: opts.model } : {}),
    ...(opts.name ? { name: opts.name } : {}),
    ...(opts.workspace ? { workspace: opts.workspace } : {}),
  };
  const home = path.resolve(opts.home ?? defaultHome());
  const agentsDir = path.join(home, 'agents');
  // A root the user runs: its token waits in the file `beidou attach` would use, for the helper
  // to read. The folder is made (and proved writable) first, so a refusal leaves no task behind.
  if (!opts.spawn) ensureWritableDir(agentsDir);
  const created = await api<CreatedTask>(opts, 'POST', '/tasks', body, START_FLAGS);
  const server = serverUrl(opts);
  let tokenFile: string | null = null;
  if (!opts.spawn) {
    // The id names a file: only the shape our ids have (src/util/ids.ts), never a path.
    if (!AGENT_ID.test(created.root_agent_id))
      throw new CliError(
        `the server created task ${created.task_id} but answered a root agent id that is not one (${JSON.stringify(created.root_agent_id)}): no token file was written`,
      );
    tokenFile = path.join(agentsDir, `${created.root_agent_id}.token`);
    try {
      writeFileAtomic(tokenFile, `${created.token}\n`, 0o600);
    } catch (err) {
      throw new CliError(
        `task ${created.task_id} was created (root agent ${created.root_agent_id}), but its token could not be written to ${tokenFile} (${reason(err)}): get one with \`beidou token --agent ${created.root_agent_id}\``,
      );
    }
  }
  const claudeLine = tokenFile
    ? `claude mcp add-json beidou ${quote(
        JSON.stringify({
          type: 'http',
          url: created.mcp_url,
          headersHelper: headersHelper(tokenFile),
        }),
      )}`
    : null;
  const { token, ...shown } = created;
  if (opts.json) {
    process.stdout.write(
      `${JSON.stringify({
        ...shown,
        ...(opts.printToken ? { token } : {}),
        ...(tokenFile ? { token_file: tokenFile, claude_mcp_add: claudeLine } : {}),
        attach: `beidou attach --agent ${created.root_agent_id} --server ${server}`,
      })}\n`,
    );
    return;
  }
  const attachLine = `beidou attach --agent ${created.root_agent_id}${server === serverUrl({}) ? '' : ` --server ${server}`}`;
  const lines = [
    `task_id:       ${created.task_id}`,
    `root_agent_id: ${created.root_agent_id}`,
    `mcp_url:       ${created.mcp_url}`,
    ...(tokenFile ? [`token_file:    ${tokenFile} (0600)`] : []),
    ...(opts.printToken ? [`token:         ${token}`] : []),
  ];
  if (opts.spawn) lines.push('the root agent is queued for a spawner', '');
  else {
    lines.push(
      'no spawner will run the root: be it yourself. In the folder to work in, run',
      '',
      `  ${attachLine}`,
      '',
      'then start claude there (a message wakes it when idle). Or add the root to Claude Code as a plain',
      'MCP server (its headers helper reads the token from the file, in a folder you trust; for another',
      'MCP client, --print-token prints the token):',
      '',
      claudeLine!,
      '',
    );
  }
  process.stdout.write(lines.join('\n'));
}

/** An agent id as the server makes them (`ag_` and 12 hex digits, src/util/ids.ts). */
const AGENT_ID = /^ag_[0-9a-f]{12}$/;

const reason = (err: unknown) => (err as NodeJS.ErrnoException).code ?? (err as Error).message;

/** Makes `dir` (0700) if it is missing and proves it writable; else a line for a person, exit 2. */
function ensureWritableDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    accessSync(dir, constants.W_OK);
    if (!statSync(dir).isDirectory()) throw Object.assign(new Error('not a folder'), { code: 'ENOTDIR' });
  } catch (err) {
    throw new CliError(
      `cannot keep the root's token in ${dir} (${reason(err)}): make it a folder you can write, or pass --home DIR; no task was created`,
      2,
    );
  }
}

export interface JsonOption extends ClientOptions {
  json?: boolean;
}

/** `beidou task list`: every task, newest first. */
export async function taskList(opts: JsonOption): Promise<void> {
  const listed = await api<{ tasks: TaskListItem[] }>(opts, 'GET', '/tasks');
  if (opts.json) printJson(listed);
  else process.stdout.write(renderTaskList(listed.tasks));
}

/** `beidou task show ID`: the team tree, plans, questions waiting and cost of one task. */
export async function taskShow(taskId: string, opts: JsonOption): Promise<void> {
  const detail = await api<TaskDetailView>(opts, 'GET', `/tasks/${encodeURIComponent(taskId)}`);
  if (opts.json) printJson(detail);
  else process.stdout.write(renderTaskDetail(detail));
}

/** `beidou task terminate ID`: the admin's termination: the root and, depth-first, every agent under it. */
export async function taskTerminate(taskId: string, opts: JsonOption): Promise<void> {
  await api(opts, 'POST', `/tasks/${encodeURIComponent(taskId)}/terminate`, {});
  if (opts.json) printJson({ ok: true, task_id: taskId });
  else
    process.stdout.write(
      `terminating ${taskId}: its root and every agent under it are told to stop; the task ends as terminated\n`,
    );
}
