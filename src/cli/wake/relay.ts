import { existsSync, readFileSync } from 'node:fs';
import { pidAlive } from '../../util/process.js';
import { findSession } from './claude-sessions.js';
import { awaitingMcp, permissionClass, ring, startupPermissionMode } from './doorbell.js';
import { pause, watchInbox, type InboxState, type WatchEnd } from './inbox-watch.js';
import { WakeState } from './wake-state.js';

/**
 * `beidou relay`: one per Claude Code session socket, started by the SessionStart hook. It
 * follows the agent's inbox and, when new mail waits and the session is idle, rings the
 * session's socket with a doorbell turn; the session then takes the mail with read_inbox.
 * It holds only the agent's token (read from its file) and ends with the session (its
 * socket or process gone) or when the agent can get no more mail.
 */
export interface RelayOptions {
  server: string;
  /** The agent's token: re-read from its file at each connection when there is one. */
  tokenFile: string | null;
  token: string;
  home: string;
  socket: string;
  sessionId: string;
  claudePid: number | null;
  /** CLAUDE_CODE_MESSAGING_TOKEN, from the environment the hook passed on. */
  messagingToken: string | null;
  agentId: string | null;
}

/** Claude Code takes about 0.5 doorbells a second once a burst is spent: never ring faster. */
const MIN_RING_GAP_MS = 2_000;
const BUSY_POLL_MS = 250;
const LIVENESS_MS = 1_000;

export function readToken(file: string): string {
  const token = readFileSync(file, 'utf8').trim();
  if (!token) throw new Error(`the token file ${file} is empty`);
  return token;
}

const log = (line: string) =>
  process.stderr.write(`${new Date().toISOString()} beidou relay[${process.pid}]: ${line}\n`);
export async function relay(opts: RelayOptions): Promise<void> {
  const state = new WakeState(opts.home);
  if (!state.lockRelay(opts.socket)) {
    log(`another relay already serves ${opts.socket}`);
    return;
  }
  const claudeKey = opts.claudePid ? `pid:${opts.claudePid}` : `sid:${opts.sessionId}`;
  const since = Date.now();
  const record = () =>
    state.recordSession(claudeKey, {
      path: 'socket',
      pid: process.pid,
      agent_id: opts.agentId,
      session_id: opts.sessionId,
      socket: opts.socket,
      since,
    });
  record();
  const stop = new AbortController();
  let why = 'stopped';
  let sessionGone = false;
  const end = (reason: string) => {
    if (stop.signal.aborted) return;
    why = reason;
    stop.abort();
  };
  let folderTrouble = false;
  const live = setInterval(() => {
    if (!existsSync(opts.socket) || (opts.claudePid && !pidAlive(opts.claudePid))) {
      sessionGone = true;
      end('the session ended');
      return;
    }
    try {
      if (!state.holdsRelay(opts.socket)) return end('another relay serves the socket');
      if (state.sessionWake(claudeKey)?.pid !== process.pid) record(); // a relay that stood down may have written over it
    } catch (err) {
      // Keep ringing: the lock only keeps relays apart. Said once, not every second.
      if (!folderTrouble) log(`wake folder: ${(err as Error).message}`);
      folderTrouble = true;
    }
  }, LIVENESS_MS);
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.once(sig, () => end(sig));

  let latest: InboxState | null = null;
  /** When the newest waiting message arrived (as the relay saw it). */
  let pendingSince = 0;
  let rungFor: string | null = null;
  let lastRing = 0;
  let ringing = false;

  const ringWhenIdle = async () => {
    if (ringing) return;
    ringing = true;
    try {
      while (!stop.signal.aborted && latest && latest.count > 0 && latest.latest !== rungFor) {
        const session = findSession({ pid: opts.claudePid, socket: opts.socket });
        // A working session gets its mail from the hooks (after a tool call, at its stop).
        if (session?.status === 'busy' || awaitingMcp(latest, pendingSince)) {
          await pause(BUSY_POLL_MS, stop.signal);
          continue;
        }
        const wait = lastRing + MIN_RING_GAP_MS - Date.now();
        if (wait > 0) {
          await pause(wait, stop.signal);
          continue;
        }
        const sessionId = session?.sessionId ?? opts.sessionId;
        const mode = permissionClass(
          state.modeOf(sessionId) ?? startupPermissionMode(opts.claudePid, session?.cwd ?? null),
        );
        const summary = latest;
        try {
          await ring({ socket: opts.socket, sessionId, token: opts.messagingToken, summary, mode });
          log(`rang for ${summary.count} message(s), latest ${summary.latest}`);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENOENT' || code === 'ECONNREFUSED') {
            sessionGone = true;
            return end('the session ended (its socket refuses)');
          }
          log(`ring failed: ${(err as Error).message}`);
        }
        rungFor = summary.latest;
        lastRing = Date.now();
      }
    } finally {
      ringing = false;
    }
  };

  let outcome: WatchEnd;
  try {
    outcome = await watchInbox({
      server: opts.server,
      token: () => (opts.tokenFile ? readToken(opts.tokenFile) : opts.token),
      signal: stop.signal,
      onTrouble: log,
      onSummary: (s) => {
        if (!latest)
          log(`following the inbox of ${opts.agentId ?? 'the agent'} for ${opts.socket}: ${s.count} waiting`);
        if (s.latest !== latest?.latest) pendingSince = Date.now();
        latest = s;
        void ringWhenIdle();
      },
    });
  } finally {
    stop.abort();
    clearInterval(live);
    state.unlockRelay(opts.socket);
    state.forgetSession(claudeKey);
  }
  if (outcome.kind === 'ended') why = `the server ended the stream: ${outcome.reason}`;
  if (outcome.kind === 'refused') why = `the server refused the token: ${outcome.message}`;
  log(`exiting: ${why}`);
  // A session that ended leaves nothing behind; any other end keeps the log to read.
  if (sessionGone) state.forgetEnded(opts.sessionId, opts.claudePid ?? opts.sessionId);
}
