#!/usr/bin/env node
import { Command } from 'commander';
import type { ConfigFlags } from '../config.js';
import { VERSION } from '../util/version.js';
import { CliError } from './client.js';
import { agentRevokeCommand, tokenCommand } from './token-commands.js';

// Any command function (`never[]` accepts every parameter list); commander passes what it parsed.
type CommandAction = (...args: never[]) => Promise<void>;

/**
 * Each command's module is loaded when that command runs: `beidou serve` does not pay for
 * the client commands' modules, nor a client command for the server's.
 */
const lazy =
  <M>(load: () => Promise<M>, pick: (m: M) => CommandAction) =>
  async (...args: unknown[]): Promise<void> =>
    (pick(await load()) as (...args: unknown[]) => Promise<void>)(...args);

const program = new Command()
  .name('beidou')
  .description('Beidou: the MCP server through which a team of AI agents coordinates')
  .version(VERSION)
  .showHelpAfterError();

program
  .command('serve')
  .description('run the server (MCP endpoint, admin API, event streams)')
  .option('--host <host>', 'interface to listen on (BEIDOU_HOST, default 127.0.0.1)')
  .option('--port <port>', 'port; 0 picks a free one (BEIDOU_PORT, default 7777)')
  .option('--home <dir>', 'data directory (BEIDOU_HOME, default ~/.beidou)')
  .option(
    '--database-url <url>',
    'keep events, rollups and plans in PostgreSQL (BEIDOU_DATABASE_URL; default: files in the home)',
  )
  .option('--log-format <format>', 'json or pretty (BEIDOU_LOG_FORMAT; default pretty on a terminal, else json)')
  .option('--allow-any-host', 'off loopback, no BEIDOU_ALLOWED_HOSTS: check no Host (BEIDOU_ALLOW_ANY_HOST=1)')
  // Loaded on demand: client commands should not pay for the server's imports.
  .action(async (opts: ConfigFlags & { logFormat?: string }) => (await import('./serve.js')).serve(opts));

const clientOptions = (cmd: Command) =>
  cmd
    .option('--server <url>', 'server base URL (BEIDOU_SERVER, default http://127.0.0.1:7777)')
    .option('--home <dir>', 'where admin.token is (BEIDOU_HOME, default ~/.beidou)');

tokenCommand(program, clientOptions);

const task = program.command('task').description('tasks');
clientOptions(
  task
    .command('start')
    .description('create a task and its root agent; prints the ids and, with --no-spawn, how to be the root')
    .argument('<text>', 'the task, as the root agent will read it')
    .option('--no-spawn', 'do not queue the root for a spawner (run it yourself, e.g. in Claude Code)')
    .option('--json', 'print one JSON object')
    .option('--print-token', "print the root's token too (for an MCP client that takes no headers helper)")
    .option('--skill <name>', "the root agent's skill (default leader)")
    .option('--model <model>', "the root agent's model")
    .option('--name <name>', 'a display name for the task')
    .option('--workspace <dir>', 'the project workspace path'),
).action(
  lazy(
    () => import('./task.js'),
    (m) => m.taskStart,
  ),
);

clientOptions(
  task
    .command('list')
    .description('every task, newest first: status, agents live/total, events')
    .option('--json', "print the API's JSON"),
).action(
  lazy(
    () => import('./task.js'),
    (m) => m.taskList,
  ),
);

clientOptions(
  task
    .command('show')
    .description('one task: its team tree, plans, questions waiting for you, and cost')
    .argument('<task_id>', 'the task')
    .option('--json', "print the API's JSON"),
).action(
  lazy(
    () => import('./task.js'),
    (m) => m.taskShow,
  ),
);

clientOptions(
  task
    .command('terminate')
    .description('terminate a task: its root and, depth-first, every agent under it')
    .argument('<task_id>', 'the task')
    .option('--json', 'print JSON'),
).action(
  lazy(
    () => import('./task.js'),
    (m) => m.taskTerminate,
  ),
);

const agent = program.command('agent').description('agents');
clientOptions(
  agent
    .command('show')
    .description('one agent: status (and its error), team, process, inbox, usage, a hand-off waiting')
    .argument('<agent>', 'an agent id, or with --task a name or role')
    .option('--task <task_id>', 'look AGENT up by name or role in this task')
    .option('--json', "print the API's JSON"),
).action(
  lazy(
    () => import('./agent.js'),
    (m) => m.agentShow,
  ),
);

agentRevokeCommand(agent, clientOptions);

clientOptions(
  program
    .command('message')
    .description('send a message to an agent as the user')
    .argument('<agent>', 'an agent id, or with --task a name or role')
    .argument('<text>', 'the message')
    .option('--task <task_id>', 'look AGENT up by name or role in this task')
    .option('--json', 'print JSON'),
).action(
  lazy(
    () => import('./agent.js'),
    (m) => m.message,
  ),
);

clientOptions(
  program
    .command('tail')
    .description("a task's events as readable lines: the last few, then each new one as it happens")
    .argument('<task_id>', 'the task')
    .option('-n, --lines <n>', 'how many past events to show first', '10')
    .option('--since <seq>', 'show every event after this seq instead')
    .option('--no-follow', 'stop after the past events'),
).action(
  lazy(
    () => import('./tail.js'),
    (m) => m.tail,
  ),
);

clientOptions(
  program
    .command('events')
    .description("print a task's events as JSON lines; --follow keeps streaming")
    .requiredOption('--task <task_id>', 'the task')
    .option('--since <seq>', 'only events after this seq')
    .option('--follow', 'stream new events as they happen'),
).action(
  lazy(
    () => import('./events.js'),
    (m) => m.events,
  ),
);

clientOptions(
  program.command('questions').description('list the questions waiting for the user').option('--json', 'print JSON'),
).action(
  lazy(
    () => import('./questions.js'),
    (m) => m.questions,
  ),
);

clientOptions(
  program
    .command('answer')
    .description('answer a question as the user')
    .argument('<qid>', 'the question id (see beidou questions)')
    .option('--choose <label>', 'an option label (repeat for multi-select)', (v: string, prev: string[] = []) => [
      ...prev,
      v,
    ])
    .option('--text <text>', 'free text, or the text an option requires')
    .option('--answers <json>', 'all answers as JSON: [{"selected_labels": [...], "text": ...}, ...]'),
).action(
  lazy(
    () => import('./questions.js'),
    (m) => m.answer,
  ),
);

clientOptions(
  program
    .command('decline')
    .description('decline a question as the user; the asking agent is told your reason')
    .argument('<qid>', 'the question id (see beidou questions)')
    .option('--reason <text>', 'why you will not answer (the agent reads it)')
    .option('--json', 'print JSON'),
).action(
  lazy(
    () => import('./questions.js'),
    (m) => m.decline,
  ),
);

clientOptions(
  program
    .command('spawners')
    .description('the spawners the server knows, and the agents each runs')
    .option('--json', "print the API's JSON"),
).action(
  lazy(
    () => import('./list-spawners.js'),
    (m) => m.spawners,
  ),
);

program
  .command('spawner')
  .description('launch and supervise agent processes for a server')
  .option('--server <url>', 'the server base URL (BEIDOU_SERVER, default http://127.0.0.1:7777)')
  .option('--token <token>', 'a spawner token (BEIDOU_SPAWNER_TOKEN; default: mint one with the admin token of --home)')
  .option('--token-file <file>', 'read the spawner token from this file (argv is visible to every local user)')
  .option('--home <dir>', 'where admin.token is, to mint a token (BEIDOU_HOME, default ~/.beidou); hidden from agents')
  .option('--adapter <name>', 'claude or command', 'claude')
  .option('--command <cmd>', 'the command line the command adapter runs for each agent')
  .option('--max-agents <n>', 'agents this spawner runs at most', '16')
  .option('--workdir <dir>', 'run agents in DIR/<task_id>/<agent_id> instead of their workspace paths')
  .option('--name <name>', 'a display name for this spawner')
  .option('--permission-mode <mode>', 'Claude Code permission mode for agents', 'bypassPermissions')
  .option('--sandbox <mode>', 'bwrap (default on Linux: each agent in a bubblewrap sandbox) or none')
  .option(
    '--sandbox-bind <dir>',
    'show DIR to agents in the sandbox, read-write; DIR:ro read-only (repeatable)',
    (v: string, prev: string[] = []) => [...prev, v],
  )
  .option(
    '--pass-env <name>',
    "pass this variable of the spawner's environment to agents; PREFIX* for several (repeatable)",
    (v: string, prev: string[] = []) => [...prev, v],
  )
  .option('--claude-bin <path>', 'the Claude Code binary (BEIDOU_CLAUDE_BIN, default claude on PATH)')
  .option('--skip-preflight', 'start without checking that Claude Code runs and has credentials')
  .option('--log-format <format>', 'json or pretty (BEIDOU_LOG_FORMAT; default pretty on a terminal, else json)')
  .option(
    '--spool-dir <dir>',
    'where reports wait while the server is unreachable, and this spawner keeps its id (BEIDOU_SPOOL_DIR, default ~/.beidou-spawner/<name>)',
  )
  .option('--spool-max-mb <n>', 'the spool size past which drained observability events are dropped', '64')
  .option(
    '--restart-backoff <s,s,...>',
    'seconds before restarting an agent after its 1st, 2nd, ... crash in a row (plus up to 25% jitter)',
    '1,5,30',
  )
  .action(async (opts) => (await import('./run-spawner.js')).spawner(opts));

program
  .command('hook')
  .description(
    'a Claude Code hook command: pre-tool-use, post-tool-use, stop, session-start or rewake (reads the hook JSON on stdin)',
  )
  .argument('<event>', 'pre-tool-use | post-tool-use | stop | session-start | rewake')
  .option('--server <url>', 'the server base URL (default BEIDOU_SERVER)')
  .option('--token-file <file>', 'read the agent token from this file (default BEIDOU_TOKEN)')
  .option('--home <dir>', 'the Beidou home whose wake/ folder relays and waiters share')
  .action(async (event: string, opts: { server?: string; tokenFile?: string; home?: string }) => {
    const { hook } = await import('./hook.js');
    // Failures exit 1, never 2: to Claude Code 2 blocks the tool (or wakes the model).
    process.exitCode = await hook(event, opts).catch((err: unknown) => {
      process.stderr.write(`beidou hook: ${(err as Error).message}\n`);
      return 1;
    });
  });

clientOptions(
  program
    .command('attach')
    .description(
      'make the Claude Code you start in this folder an agent: MCP server, hooks, and a relay that wakes it on mail',
    )
    .option('--agent <agent_id>', "the agent to be (beidou task start --no-spawn prints the root's)")
    .option(
      '--token-file <file>',
      'where the agent token is kept, outside the project (default <home>/agents/<agent_id>.token)',
    )
    .option('--claude-bin <path>', 'the Claude Code binary (BEIDOU_CLAUDE_BIN, default claude on PATH)')
    .option('--remove', 'undo beidou attach in this folder')
    .option('--check', 'print how a session here gets woken: socket, rewake or hooks-only')
    .option('--json', 'print JSON'),
).action(async (opts) => (await import('./wake/attach.js')).attach(opts));

program
  .command('relay')
  .description('wake a Claude Code session when its agent gets mail (started by beidou hook session-start)')
  .requiredOption('--socket <path>', "the session's messaging socket (CLAUDE_CODE_MESSAGING_SOCKET)")
  .requiredOption('--session-id <id>', 'the session id (CLAUDE_CODE_SESSION_ID)')
  .option('--token-file <file>', 'the agent token file (default BEIDOU_TOKEN from the environment)')
  .option('--claude-pid <pid>', 'the Claude Code process: the relay ends with it')
  .option('--server <url>', 'the server base URL (BEIDOU_SERVER, default http://127.0.0.1:7777)')
  .option('--home <dir>', 'the Beidou home (BEIDOU_HOME, default ~/.beidou)')
  .option('--agent <agent_id>', 'the agent, for beidou attach --check')
  .action(async (opts) => (await import('./wake/relay-command.js')).relayCommand(opts));

program
  .command('stats')
  .description('rollup maintenance')
  .command('rebuild')
  .description(
    'recreate the rollups (stats.db, or the rollup tables of the database) from the event logs (refused while a server holds the home or the database)',
  )
  .option('--home <dir>', 'data directory (BEIDOU_HOME, default ~/.beidou)')
  .option('--database-url <url>', 'the PostgreSQL store (BEIDOU_DATABASE_URL)')
  .action(async (opts: { home?: string; databaseUrl?: string }) => (await import('./stats.js')).statsRebuild(opts));

program
  .command('doctor')
  .description(
    'check every task log of a home; --repair backs up and cuts each damaged one back to its last whole commit',
  )
  .option('--home <dir>', 'data directory (BEIDOU_HOME, default ~/.beidou)')
  .option('--repair', 'repair what it finds (refused while a server holds the home)')
  .action(async (opts: { home?: string; repair?: boolean }) => (await import('./doctor.js')).doctor(opts));

program.parseAsync(process.argv).catch((err: unknown) => {
  if (err instanceof CliError) {
    process.stderr.write(`beidou: ${err.message}\n`);
    process.exit(err.exitCode);
  }
  process.stderr.write(`beidou: ${(err as Error).message}\n`);
  process.exit(1);
});
