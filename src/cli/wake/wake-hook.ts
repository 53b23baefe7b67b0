import { spawn } from 'node:child_process';
import { existsSync, openSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultHome } from '../../config.js';
import { findSession, parseVersion, ringable, wakes } from './claude-sessions.js';
import { rewakeWait } from './rewake.js';
import { WakeState } from './wake-state.js';

/**
 * The two wake hooks `beidou attach` installs, both run by Claude Code in the background
 * (`asyncRewake: true`):
 * - `session-start`: where the session has a messaging socket, starts its relay (once per
 *   socket, detached) and returns; otherwise waits for mail like `rewake`.
 * - `rewake` (at every Stop): where the session has a socket, restarts its relay if it died;
 *   otherwise waits for mail and exits 2 to wake the model.
 */
export interface WakeHookContext {
  server: string;
  tokenFile: string | null;
  token: string;
  home: string | null;
  sessionId: string;
  input: Record<string, unknown>;
}

const MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'main.js');

/** The agent a token names (its `sub` claim), for logs and `--check`; the server checks the token itself. */
export function agentOfToken(token: string): string | null {
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as {
      sub?: unknown;
    };
    return typeof payload.sub === 'string' ? payload.sub : null;
  } catch {
    return null;
  }
}

export async function wakeHook(_event: 'session-start' | 'rewake', ctx: WakeHookContext): Promise<number> {
  const home = ctx.home ?? defaultHome();
  const agentId = agentOfToken(ctx.token);
  const socket = process.env.CLAUDE_CODE_MESSAGING_SOCKET || null;
  const claudePid = Number(process.env.CLAUDE_PID) || null;
  const session = findSession({ pid: claudePid, socket, sessionId: ctx.sessionId });
  // The socket path when the session speaks peer protocol 1 (or, with no session file to ask, when it gave us a socket).
  const socketPath = socket && existsSync(socket) && (session === null || ringable(session)) ? socket : null;
  if (socketPath) {
    // At every Stop too: a relay that died (killed, or the machine slept) is back by the next turn's end.
    startRelay({ ...ctx, home, agentId, socket: socketPath, claudePid: claudePid ?? session?.pid ?? null });
    return 0;
  }
  if (!ctx.sessionId) {
    process.stderr.write('beidou hook: no session id (CLAUDE_CODE_SESSION_ID or session_id): cannot wait for mail\n');
    return 1;
  }
  // A Claude Code that does not know asyncRewake would run this hook in the foreground and
  // hang its session: wait only where the session file shows a version that runs it in the background.
  if (!session || !wakes(parseVersion(session.version))) {
    process.stderr.write(
      `beidou hook: not waiting for mail: ${session ? `Claude Code ${session.version ?? '(unknown version)'}` : "this session is not in Claude Code's sessions folder"} may not run asyncRewake hooks in the background; messages arrive after a tool call, at a stop, or by read_inbox\n`,
    );
    return 0;
  }
  return rewakeWait({
    server: ctx.server,
    tokenFile: ctx.tokenFile,
    token: ctx.token,
    home,
    sessionId: ctx.sessionId,
    claudePid: session.pid,
    agentId,
  });
}

function startRelay(
  o: WakeHookContext & { home: string; agentId: string | null; socket: string; claudePid: number | null },
): void {
  const state = new WakeState(o.home);
  if (state.relayOf(o.socket) !== null) return;
  const log = openSync(state.relayLog(o.claudePid ?? o.sessionId), 'a', 0o600);
  const args = [
    MAIN,
    'relay',
    '--socket',
    o.socket,
    '--session-id',
    o.sessionId,
    '--server',
    o.server,
    '--home',
    o.home,
  ];
  if (o.tokenFile) args.push('--token-file', o.tokenFile);
  if (o.claudePid) args.push('--claude-pid', String(o.claudePid));
  if (o.agentId) args.push('--agent', o.agentId);
  // The token travels in the environment (never on a command line others can read).
  const env = { ...process.env, ...(o.tokenFile ? {} : { BEIDOU_TOKEN: o.token }) };
  const child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', log, log], env });
  child.unref();
}
