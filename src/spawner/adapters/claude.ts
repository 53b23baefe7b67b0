import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type { Adapter, AdapterHooks, AgentFailure, AgentProcess, StartSpec } from '../adapter.js';
import { failureLine, wrapChild } from '../adapter.js';
import type { AgentLauncher } from '../agent-launcher.js';
import { StreamJsonDrain } from '../drain.js';
import { ensurePrivateDir, writePrivateFile } from '../launch-files.js';
import type { SandboxBind } from '../sandbox.js';
import type { DrainedEvent } from '../../protocol/spawner.js';

/** Tools that compete with Beidou primitives, removed at launch (the hook is the second layer). */
export const DISALLOWED_TOOLS = ['SendMessage', 'TodoWrite', 'AskUserQuestion'];

/** Long enough that a blocked ask_user is never cut by Claude Code (progress keeps it alive too). */
const MCP_TOOL_TIMEOUT_MS = String(24 * 3600 * 1000);

// The hook's own entry point: it runs around every tool call, so it must start fast.
const HOOK_MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'cli', 'hook-main.js');

export interface ClaudeAdapterOptions {
  bin: string;
  permissionMode: string;
  /** Starts the process (sandbox, environment, launch folder). In the sandbox Claude Code gets IS_SANDBOX=1. */
  launcher: AgentLauncher;
  logger: Logger;
}

/** What Claude Code reads from its environment: the model API, its own settings, its telemetry switches. */
export const CLAUDE_ENV_NAMES: readonly string[] = [
  'ANTHROPIC_*',
  'CLAUDE_CODE_*',
  'CLAUDE_CONFIG_DIR',
  'DISABLE_AUTOUPDATER',
  'DISABLE_TELEMETRY',
  'DISABLE_ERROR_REPORTING',
  'DISABLE_COST_WARNINGS',
  'DISABLE_NON_ESSENTIAL_MODEL_CALLS',
  'DISABLE_PROMPT_CACHING',
  'MAX_THINKING_TOKENS',
  'API_TIMEOUT_MS',
  'BASH_DEFAULT_TIMEOUT_MS',
  'BASH_MAX_TIMEOUT_MS',
  'BASH_MAX_OUTPUT_LENGTH',
];

const on = (v: string | undefined) => v !== undefined && v !== '' && v !== '0' && v !== 'false';

/** Claude Code's names, and a cloud provider's credentials when Claude Code is switched to that provider. */
export function claudeEnvNames(env: NodeJS.ProcessEnv): string[] {
  const names = [...CLAUDE_ENV_NAMES];
  if (on(env.CLAUDE_CODE_USE_BEDROCK)) names.push('AWS_*');
  if (on(env.CLAUDE_CODE_USE_VERTEX))
    names.push('CLOUD_ML_REGION', 'VERTEX_REGION_*', 'GOOGLE_APPLICATION_CREDENTIALS', 'GOOGLE_CLOUD_PROJECT');
  if (on(env.CLAUDE_CODE_USE_FOUNDRY)) names.push('AZURE_*');
  return names;
}

/**
 * A sandboxed Claude Code agent's own folder (`CLAUDE_CONFIG_DIR`): `<spool>/claude/<agent>`,
 * 0700, kept across its processes on this spawner (`--resume` reads its transcript there),
 * bound read-write; the spool folder around it stays hidden. The user's `~/.claude` and
 * `~/.claude.json` are never shown: a hook or MCP server an agent planted there would run
 * unsandboxed in the user's own Claude Code and in later agents. Seeded with the login only
 * (`.credentials.json`, copied 0600 when the user has one), never their settings or hooks.
 */
export function claudeAgentHome(stateDir: string, agentId: string, env: NodeJS.ProcessEnv): SandboxBind[] {
  const root = path.join(stateDir, 'claude');
  ensurePrivateDir(root);
  const dir = path.join(root, agentId.replace(/[^A-Za-z0-9._-]/g, '_'));
  ensurePrivateDir(dir);
  const login = path.join(env.CLAUDE_CONFIG_DIR || path.join(env.HOME || os.homedir(), '.claude'), '.credentials.json');
  if (existsSync(login) && !existsSync(path.join(dir, '.credentials.json'))) {
    try {
      writePrivateFile(dir, '.credentials.json', readFileSync(login, 'utf8'));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
  return [{ path: dir, readOnly: false }];
}

export interface AgentFiles {
  mcpConfig: string;
  settings: string;
  /** The assembled prompt (`--append-system-prompt-file`): never an argument, which `ps` shows and E2BIG caps. */
  systemPrompt: string;
}

/** The files a Claude Code agent runs with, created exclusively in its (private) launch folder `dir`. */
export function writeAgentFiles(dir: string, spec: StartSpec): AgentFiles {
  const mcpConfig = writePrivateFile(
    dir,
    'mcp.json',
    JSON.stringify(
      {
        mcpServers: {
          beidou: { type: 'http', url: spec.mcpUrl, headers: { Authorization: `Bearer ${spec.launch.token}` } },
        },
      },
      null,
      2,
    ),
  );
  const entry = (event: string, matcher?: string) => ({
    ...(matcher ? { matcher } : {}),
    hooks: [{ type: 'command', command: `"${process.execPath}" "${HOOK_MAIN}" ${event}` }],
  });
  const hooks = {
    PreToolUse: [entry('pre-tool-use', '*')],
    PostToolUse: [entry('post-tool-use', '*')],
    Stop: [entry('stop')],
  };
  const settings = writePrivateFile(dir, 'settings.json', JSON.stringify({ hooks }, null, 2));
  const systemPrompt = writePrivateFile(dir, 'system-prompt.md', spec.launch.prompt);
  return { mcpConfig, settings, systemPrompt };
}

export function claudeArgs(spec: StartSpec, files: AgentFiles, permissionMode: string): string[] {
  const args = [
    '-p',
    '--input-format',
    'stream-json',
    '--output-format',
    'stream-json',
    '--verbose',
    '--mcp-config',
    files.mcpConfig,
    '--strict-mcp-config',
    '--settings',
    files.settings,
    '--append-system-prompt-file',
    files.systemPrompt,
    '--disallowedTools',
    ...DISALLOWED_TOOLS,
    '--permission-mode',
    permissionMode,
  ];
  if (spec.launch.model) args.push('--model', spec.launch.model);
  // The spawner picks the session id, so the server records the id Claude Code really uses
  // and another spawner can resume it.
  if (spec.resume) args.push('--resume', spec.sessionId);
  else args.push('--session-id', spec.sessionId);
  return args;
}

function resultFailure(f: { reason: AgentFailure['reason']; detail: string }): AgentFailure {
  if (f.reason === 'not_logged_in') {
    return {
      reason: f.reason,
      msg: `Claude Code is not logged in ("${f.detail}"): run claude and /login as the spawner's user, or set ANTHROPIC_API_KEY for the spawner`,
    };
  }
  return { reason: f.reason, msg: `the model API answered an error: ${f.detail}` };
}

const userTurn = (text: string) => JSON.stringify({ type: 'user', message: { role: 'user', content: text } });

/**
 * The `claude` adapter (docs/claude-code.md): Claude Code headless in streaming mode. The first user
 * turn is the task (or, on a resume, the nudge if any); each inbox message is the next user
 * turn; stdout is drained into events.
 */
export function claudeAdapter(opts: ClaudeAdapterOptions): Adapter {
  return {
    name: 'claude',
    start(spec: StartSpec, hooks: AdapterHooks): AgentProcess {
      // The MCP config holds the agent's token: written per start in a private folder, removed when the process ends.
      const { launcher } = opts;
      const dir = launcher.newDir(spec.launch.agent_id);
      let files: AgentFiles;
      try {
        files = writeAgentFiles(dir.path, spec);
      } catch (err) {
        dir.remove();
        throw err;
      }
      const home = launcher.sandboxed
        ? claudeAgentHome(launcher.stateDir, spec.launch.agent_id, launcher.spawnerEnv)
        : [];
      const child = launcher.spawn({
        dir,
        cwd: spec.cwd,
        launch: spec.launch,
        command: [opts.bin, ...claudeArgs(spec, files, opts.permissionMode)],
        credentials: home,
        env: {
          runtime: claudeEnvNames(launcher.spawnerEnv),
          set: {
            // Claude Code's own agent teams compete with Beidou's.
            CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS: '',
            // Claude Code 2.x defers MCP tools behind ToolSearch, hiding their descriptions and
            // schemas from the model; Beidou's tools are the agent's main tools, so send them whole.
            ENABLE_TOOL_SEARCH: 'false',
            MCP_TOOL_TIMEOUT: MCP_TOOL_TIMEOUT_MS,
            MCP_TIMEOUT: '60000',
            // For `beidou hook`, which runs as this agent.
            BEIDOU_URL: spec.mcpUrl,
            BEIDOU_SERVER: spec.serverUrl,
            BEIDOU_TOKEN: spec.launch.token,
            BEIDOU_AGENT_ID: spec.launch.agent_id,
            // Claude Code refuses bypassPermissions as root unless told it runs in a sandbox: it does.
            ...(launcher.sandboxed ? { IS_SANDBOX: '1', CLAUDE_CONFIG_DIR: home[0]!.path } : {}),
          },
        },
      });
      const drain = new StreamJsonDrain();
      const { writeLine, setFailure, ...proc } = wrapChild(
        child,
        (line, cut) => {
          // A line past 4 MiB is cut, so no longer JSON: the drain drops it, and this says so.
          if (cut)
            opts.logger.warn(
              { agent: spec.launch.agent_id, bytes: cut.bytes, kept: cut.kept },
              `agent ${spec.launch.agent_id} printed a line of ${cut.bytes} bytes; only its first ${cut.kept} bytes were read (the limit of a line), and it was dropped`,
            );
          const out = drain.line(line);
          if (out.sessionId) hooks.onSession(out.sessionId);
          for (const event of out.events) hooks.onEvent(event);
          if (out.turnEnded?.clean) {
            setFailure(null);
            hooks.onCleanTurn();
          }
          // Claude Code stays up after an error result, waiting for the next turn: the
          // failure is reported now, not when (if ever) the process exits.
          if (out.failure) {
            const failure = resultFailure(out.failure);
            setFailure(failure);
            opts.logger.error(
              { agent: spec.launch.agent_id, reason: failure.reason },
              failureLine(spec.launch, failure),
            );
            hooks.onEvent({
              event: 'agent_error',
              exception: 'ErrorResult',
              msg: failure.msg,
              stderr: proc.stderrTail(),
              reason: failure.reason,
            } as DrainedEvent);
          }
        },
        opts.bin,
      );
      const write = (text: string) => writeLine(userTurn(text));
      if (!spec.resume) write(spec.launch.first_message);
      else if (spec.nudge) write(spec.nudge);
      opts.logger.debug({ agent: spec.launch.agent_id, pid: child.pid }, 'claude started');
      return { ...proc, deliver: (message) => write(message.content) };
    },
  };
}
