import { pidAlive } from '../../util/process.js';
import { findSession } from './claude-sessions.js';
import { awaitingMcp, doorbellText } from './doorbell.js';
import { pause, watchInbox, type InboxState } from './inbox-watch.js';
import { readToken } from './relay.js';
import { WakeState } from './wake-state.js';

/**
 * The rewake path, for a session without a messaging socket: a hook that Claude Code runs
 * in the background (`asyncRewake: true`) at SessionStart and at every Stop waits on the
 * agent's inbox stream and, when mail waits while the session is idle, prints the doorbell
 * on stderr and exits 2, which wakes the model. One waiter per session: each Stop starts a
 * new one, and the older stands down.
 */
export interface RewakeOptions {
  server: string;
  /** The agent's token: re-read from its file at each connection when there is one. */
  tokenFile: string | null;
  token: string;
  home: string;
  sessionId: string;
  /** The Claude Code process (CLAUDE_PID): its waiters replace each other across session ids (/clear). */
  claudePid: number | null;
  agentId: string | null;
}

/** Mail seen while the session is idle is checked again after this long, so a Stop hook that is handing it over right now wins. */
const SETTLE_MS = 500;
const POLL_MS = 250;

/** Resolves with the hook's exit code: 2 to wake the model (doorbell on stderr), 0 to stand down. */
export async function rewakeWait(opts: RewakeOptions): Promise<number> {
  const state = new WakeState(opts.home);
  const session = findSession({ pid: opts.claudePid, sessionId: opts.sessionId });
  const claudeKey = session ? `pid:${session.pid}` : `sid:${opts.sessionId}`;
  // One waiter per Claude Code process, not per session id: /clear starts a new id in the same process.
  state.claimWaiter(claudeKey);
  state.recordSession(claudeKey, {
    path: 'rewake',
    pid: process.pid,
    agent_id: opts.agentId,
    session_id: opts.sessionId,
    socket: null,
    since: Date.now(),
  });
  const parent = process.ppid;
  const stop = new AbortController();
  let latest: InboxState | null = null;
  let pendingSince = 0;
  let code = 0;

  // Stand down when a newer waiter took over, or when the session is gone.
  const live = setInterval(() => {
    if (!state.isNewestWaiter(claudeKey) || process.ppid !== parent || (session && !pidAlive(session.pid)))
      stop.abort();
  }, 1_000);

  const idle = () => findSession({ pid: session?.pid, sessionId: opts.sessionId })?.status !== 'busy';
  let checking = false;
  const check = async () => {
    if (checking) return;
    checking = true;
    try {
      while (!stop.signal.aborted && latest && latest.count > 0) {
        if (!idle() || awaitingMcp(latest, pendingSince)) {
          await pause(POLL_MS, stop.signal);
          continue;
        }
        await pause(SETTLE_MS, stop.signal);
        if (stop.signal.aborted || !latest || latest.count === 0 || !idle()) continue;
        if (!state.isNewestWaiter(claudeKey)) return stop.abort();
        process.stderr.write(`${doorbellText(latest)}\n`);
        code = 2;
        return stop.abort();
      }
    } finally {
      checking = false;
    }
  };

  try {
    await watchInbox({
      server: opts.server,
      token: () => (opts.tokenFile ? readToken(opts.tokenFile) : opts.token),
      signal: stop.signal,
      onSummary: (s) => {
        if (s.latest !== latest?.latest) pendingSince = Date.now();
        latest = s;
        void check();
      },
    });
  } finally {
    stop.abort();
    clearInterval(live);
    state.releaseWaiter(claudeKey);
    state.forgetSession(claudeKey);
  }
  return code;
}
