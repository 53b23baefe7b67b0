import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import path from 'node:path';
import { defaultHome } from '../../config.js';
import { adminToken, api, CliError, serverUrl, type ClientOptions } from '../client.js';
import {
  ALLOW_RULE,
  attachedSettings,
  hookCommand,
  installedTokenFile,
  isAttached,
  readJson,
  settingsFile,
  withoutOurs,
  writeFileAtomic,
} from './attach-settings.js';
import { FIRST_WAKE_VERSION, liveSessions, parseVersion, ringable, wakes } from './claude-sessions.js';
import { WakeState, type WakePath } from './wake-state.js';
import { agentOfToken } from './wake-hook.js';

/**
 * `beidou attach --agent ID`: makes plain `claude`, started in this folder, that agent. The
 * MCP server goes into Claude Code's local scope (kept in ~/.claude.json, never in the
 * project) with a headers helper that reads the agent's token from a 0600 file outside the
 * project; the hooks and the permission for Beidou's tools go into
 * `.claude/settings.local.json`. No file in the project holds a token.
 */
export interface AttachOptions extends ClientOptions {
  agent?: string;
  tokenFile?: string;
  claudeBin?: string;
  remove?: boolean;
  check?: boolean;
  json?: boolean;
}

const SERVER_NAME = 'beidou';

function claudeBin(opts: AttachOptions): string {
  return opts.claudeBin ?? process.env.BEIDOU_CLAUDE_BIN ?? 'claude';
}

function runClaude(opts: AttachOptions, args: string[], dir: string): string {
  try {
    return execFileSync(claudeBin(opts), args, { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === 'ENOENT')
      throw new CliError(`Claude Code not found (${claudeBin(opts)}): install it, or pass --claude-bin`, 2);
    throw new CliError(
      `claude ${args.join(' ')} failed: ${(e.stderr ?? e.message).trim().split('\n').slice(-3).join(' ')}`,
    );
  }
}

/** Removes the local-scope server if there is one (Claude Code answers an error when there is none). */
function removeMcpServer(opts: AttachOptions, dir: string): boolean {
  try {
    runClaude(opts, ['mcp', 'remove', '--scope', 'local', SERVER_NAME], dir);
    return true;
  } catch (err) {
    if (err instanceof CliError && err.exitCode === 2) throw err; // no Claude Code at all
    return false;
  }
}

function tokenFileOf(opts: AttachOptions, home: string, agent: string): string {
  return path.resolve(opts.tokenFile ?? path.join(home, 'agents', `${agent}.token`));
}

export async function attach(opts: AttachOptions): Promise<void> {
  const dir = process.cwd();
  if (opts.check) return check(opts, dir);
  if (opts.remove) return remove(opts, dir);
  if (!opts.agent) throw new CliError('--agent ID is required (or --check, or --remove)', 2);
  const home = path.resolve(opts.home ?? defaultHome());
  const server = serverUrl(opts);
  const tokenFile = tokenFileOf(opts, home, opts.agent);
  const projectRoot = path.resolve(dir) + path.sep;
  if (tokenFile.startsWith(projectRoot))
    throw new CliError(`--token-file ${tokenFile} is inside this project; keep the token outside it`, 2);

  const agent = await api<{
    agent_id: string;
    task_id: string;
    name?: string;
    spawner_id: string | null;
    launch: { state: string } | null;
  }>(opts, 'GET', `/agents/${encodeURIComponent(opts.agent)}`);
  // Two processes as one agent would take each other's mail.
  if (agent.spawner_id) {
    throw new CliError(
      `agent ${agent.agent_id} is run by spawner ${agent.spawner_id}: attach an agent no spawner runs (beidou task start --no-spawn)`,
    );
  }
  if (agent.launch?.state === 'queued') {
    process.stderr.write(
      `beidou: warning: agent ${agent.agent_id} is queued for a spawner; if one connects it will run a second copy of it\n`,
    );
  }
  let token: string;
  try {
    adminToken(opts);
    token = (await api<{ token: string }>(opts, 'POST', `/agents/${encodeURIComponent(agent.agent_id)}/token`, {}))
      .token;
  } catch (err) {
    throw err instanceof CliError ? err : new CliError((err as Error).message);
  }
  writeFileAtomic(tokenFile, `${token}\n`, 0o600);

  removeMcpServer(opts, dir);
  runClaude(
    opts,
    [
      'mcp',
      'add-json',
      '--scope',
      'local',
      SERVER_NAME,
      JSON.stringify({
        type: 'http',
        url: `${server}/mcp`,
        headersHelper: hookCommand('mcp-headers', { server, tokenFile, home }),
      }),
    ],
    dir,
  );
  const file = settingsFile(dir);
  writeFileAtomic(
    file,
    `${JSON.stringify(attachedSettings(readJson(file), { server, tokenFile, home }), null, 2)}\n`,
    0o644,
  );

  const out = {
    agent_id: agent.agent_id,
    task_id: agent.task_id,
    dir,
    server,
    mcp_url: `${server}/mcp`,
    token_file: tokenFile,
    settings: file,
  };
  if (opts.json) return void process.stdout.write(`${JSON.stringify(out)}\n`);
  process.stdout.write(
    [
      `attached ${agent.agent_id}${agent.name ? ` (${agent.name})` : ''} of task ${agent.task_id} to ${dir}`,
      `  MCP server "${SERVER_NAME}" (Claude Code local scope) -> ${server}/mcp`,
      `  token:    ${tokenFile} (0600; read by the MCP headers helper, the hooks and the relay)`,
      `  settings: ${file} (hooks, and ${ALLOW_RULE} allowed)`,
      'Start claude in this folder: it is that agent, and a message wakes it when idle.',
      'Trust the folder when claude asks: Claude Code runs the token helper of an MCP server only in a trusted folder.',
      'beidou attach --check tells which way it will be woken.',
      '',
    ].join('\n'),
  );
}

function holdsToken(file: string): boolean {
  try {
    return agentOfToken(readFileSync(file, 'utf8').trim()) !== null;
  } catch {
    return false;
  }
}

async function remove(opts: AttachOptions, dir: string): Promise<void> {
  const file = settingsFile(dir);
  const settings = readJson(file);
  const tokenFile = opts.tokenFile ? path.resolve(opts.tokenFile) : installedTokenFile(settings);
  const hadSettings = isAttached(settings);
  if (hadSettings) {
    const rest = withoutOurs(settings);
    if (Object.keys(rest).length === 0) rmSync(file, { force: true });
    else writeFileAtomic(file, `${JSON.stringify(rest, null, 2)}\n`, 0o644);
  }
  const hadServer = removeMcpServer(opts, dir);
  const hadToken = !!tokenFile && existsSync(tokenFile);
  // The settings name the file, and a project's settings may come from anyone: delete only a token.
  const isToken = hadToken && holdsToken(tokenFile);
  if (isToken) rmSync(tokenFile, { force: true });
  if (!hadSettings && !hadServer && !isToken) throw new CliError(`nothing of beidou attach to remove in ${dir}`);
  process.stdout.write(
    [
      `detached ${dir}:`,
      `  hooks and permission: ${hadSettings ? `removed from ${file}` : 'none were there'}`,
      `  MCP server "${SERVER_NAME}": ${hadServer ? "removed from Claude Code's local scope" : 'none was there'}`,
      `  token file: ${isToken ? `${tokenFile} deleted` : hadToken ? `${tokenFile} left alone: it is not a token` : 'none'}`,
      'A running Claude Code session keeps what it loaded until it ends; its relay ends with it.',
      '',
    ].join('\n'),
  );
}

function versionOf(opts: AttachOptions, dir: string): number[] | null {
  try {
    return parseVersion(runClaude(opts, ['--version'], dir));
  } catch {
    return null;
  }
}

export interface CheckResult {
  path: WakePath | 'hooks-only';
  why: string;
  session?: { pid: number; session_id: string | null; version: string | null };
}

function sameDir(a: string, b: string): boolean {
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return path.resolve(a) === path.resolve(b);
  }
}

export function checkPaths(opts: AttachOptions, dir: string): CheckResult[] {
  const settings = readJson(settingsFile(dir));
  if (!isAttached(settings)) throw new CliError(`${dir} is not attached: run beidou attach --agent ID here first`);
  const home = path.resolve(opts.home ?? defaultHome());
  const state = new WakeState(home);
  const running = liveSessions().filter((s) => s.cwd && sameDir(s.cwd, dir));
  if (running.length > 0) {
    return running.map((s) => {
      const session = { pid: s.pid, session_id: s.sessionId, version: s.version };
      const wake = state.sessionWake(`pid:${s.pid}`) ?? (s.sessionId ? state.sessionWake(`sid:${s.sessionId}`) : null);
      if (wake?.path === 'socket')
        return { path: 'socket' as const, why: `relay ${wake.pid} rings ${wake.socket}`, session };
      if (wake?.path === 'rewake')
        return {
          path: 'rewake' as const,
          why: `rewake hook ${wake.pid} waits for mail (no messaging socket)`,
          session,
        };
      const why = ringable(s)
        ? `the session has a socket but no relay runs for it (see ${path.join(state.dir, `relay-${s.pid}.log`)})`
        : 'no relay and no rewake hook runs for this session (started before beidou attach, or with --bare?)';
      return { path: 'hooks-only' as const, why, session };
    });
  }
  const version = versionOf(opts, dir);
  if (!version)
    return [{ path: 'hooks-only', why: `no session runs here and ${claudeBin(opts)} --version did not answer` }];
  if (!wakes(version)) {
    return [
      {
        path: 'hooks-only',
        why: `Claude Code ${version.join('.')} is older than ${FIRST_WAKE_VERSION.join('.')}: messages arrive after a tool call, at a stop, or by read_inbox`,
      },
    ];
  }
  if (process.env.CLAUDE_CODE_HARBOR_KITE === '0') {
    return [
      {
        path: 'rewake',
        why: 'CLAUDE_CODE_HARBOR_KITE=0 switches the messaging socket off: the asyncRewake hooks will wake the session',
      },
    ];
  }
  return [
    {
      path: 'socket',
      why: `expected with Claude Code ${version.join('.')} (no session runs here yet: start claude and check again to confirm)`,
    },
  ];
}

function check(opts: AttachOptions, dir: string): void {
  const results = checkPaths(opts, dir);
  if (opts.json) return void process.stdout.write(`${JSON.stringify(results)}\n`);
  for (const r of results) {
    const who = r.session
      ? `session ${r.session.pid}${r.session.version ? ` (Claude Code ${r.session.version})` : ''}: `
      : '';
    process.stdout.write(`${r.path}\t${who}${r.why}\n`);
  }
}
