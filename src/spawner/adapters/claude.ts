import { spawn } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type { Adapter, AdapterHooks, AgentFailure, AgentProcess, StartSpec } from '../adapter.js';
import { agentEnvironment, failureLine, wrapChild } from '../adapter.js';
import { StreamJsonDrain } from '../drain.js';
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
  /** Sets IS_SANDBOX=1: Claude Code refuses bypassPermissions as root without it. */
  sandbox: boolean;
  logger: Logger;
}

/** The files a Claude Code agent runs with: its MCP config and its settings (hooks). */
export function writeAgentFiles(dir: string, spec: StartSpec): { mcpConfig: string; settings: string } {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const mcpConfig = path.join(dir, 'mcp.json');
  const settings = path.join(dir, 'settings.json');
  writeFileSync(
    mcpConfig,
    JSON.stringify(
      {
        mcpServers: {
          beidou: { type: 'http', url: spec.mcpUrl, headers: { Authorization: `Bearer ${spec.launch.token}` } },
        },
      },
      null,
      2,
    ),
    { mode: 0o600 },
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
  writeFileSync(settings, JSON.stringify({ hooks }, null, 2), { mode: 0o600 });
  return { mcpConfig, settings };
}

export function claudeArgs(
  spec: StartSpec,
  files: { mcpConfig: string; settings: string },
  permissionMode: string,
): string[] {
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
    '--append-system-prompt',
    spec.launch.prompt,
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
      // The MCP config holds the agent's token: written per start, removed when the process ends.
      const filesDir = path.join(os.tmpdir(), 'beidou-claude', `${spec.launch.agent_id}-${process.pid}-${Date.now()}`);
      const files = writeAgentFiles(filesDir, spec);
      const child = spawn(opts.bin, claudeArgs(spec, files, opts.permissionMode), {
        cwd: spec.cwd,
        stdio: ['pipe', 'pipe', 'pipe'],
        detached: true,
        env: agentEnvironment({
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
          ...(opts.sandbox ? { IS_SANDBOX: '1' } : {}),
        }),
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
      void proc.exited.then(() => {
        try {
          rmSync(filesDir, { recursive: true, force: true });
        } catch (err) {
          opts.logger.warn({ err: (err as Error).message, dir: filesDir }, 'could not remove the agent files');
        }
      });
      opts.logger.debug({ agent: spec.launch.agent_id, pid: child.pid }, 'claude started');
      return { ...proc, deliver: (message) => write(message.content) };
    },
  };
}
