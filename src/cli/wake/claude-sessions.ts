import { existsSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pidAlive } from '../../util/process.js';

/**
 * What a running Claude Code session says about itself in `~/.claude/sessions/<pid>.json`
 * (Claude Code 2.1.332; undocumented, so every field is optional and checked): its id, its
 * folder, whether it is working, and, when its messaging socket is on, where that is.
 * `peerProtocol: 1` is the socket dialect the relay speaks (docs/claude-code.md).
 */
export interface ClaudeSession {
  pid: number;
  sessionId: string | null;
  cwd: string | null;
  version: string | null;
  peerProtocol: number | null;
  messagingSocketPath: string | null;
  status: 'idle' | 'busy' | null;
}

export function claudeConfigDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.CLAUDE_CONFIG_DIR || path.join(env.HOME || os.homedir(), '.claude');
}

export function sessionsDir(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(claudeConfigDir(env), 'sessions');
}

const str = (v: unknown): string | null => (typeof v === 'string' && v.length > 0 ? v : null);

export function parseSession(text: string): ClaudeSession | null {
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return null;
  }
  // A pid of 0 or below names a process group to kill(2), which answers "alive" for ever.
  if (!raw || typeof raw !== 'object' || !Number.isSafeInteger(raw.pid) || (raw.pid as number) <= 0) return null;
  return {
    pid: raw.pid as number,
    sessionId: str(raw.sessionId),
    cwd: str(raw.cwd),
    version: str(raw.version),
    peerProtocol: typeof raw.peerProtocol === 'number' ? raw.peerProtocol : null,
    messagingSocketPath: str(raw.messagingSocketPath),
    status: raw.status === 'idle' || raw.status === 'busy' ? raw.status : null,
  };
}

export function readSession(file: string): ClaudeSession | null {
  try {
    return parseSession(readFileSync(file, 'utf8'));
  } catch {
    return null;
  }
}

/** Every live session Claude Code has registered (a file left by a dead process is skipped). */
export function liveSessions(env: NodeJS.ProcessEnv = process.env): ClaudeSession[] {
  const dir = sessionsDir(env);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names
    .filter((n) => /^\d+\.json$/.test(n))
    .map((n) => readSession(path.join(dir, n)))
    .filter((s): s is ClaudeSession => s !== null && pidAlive(s.pid));
}

/**
 * The session of a Claude Code process, by its pid, or the one whose id or socket is given.
 * With a pid to go by, only a session of that pid answers: another file naming the same
 * session id (a stale one, or garbage) speaks for another process.
 */
export function findSession(
  by: { pid?: number | null; sessionId?: string | null; socket?: string | null },
  env: NodeJS.ProcessEnv = process.env,
): ClaudeSession | null {
  if (by.pid) {
    const s = readSession(path.join(sessionsDir(env), `${by.pid}.json`));
    if (s && s.pid === by.pid && pidAlive(s.pid)) return s;
  }
  const matches = (s: ClaudeSession) =>
    (!by.pid || s.pid === by.pid) &&
    ((by.socket && s.messagingSocketPath === by.socket) || (by.sessionId && s.sessionId === by.sessionId));
  return liveSessions(env).find(matches) ?? null;
}

/** A session that can be rung: peer protocol 1 and a socket that exists. */
export function ringable(s: ClaudeSession | null): s is ClaudeSession & { messagingSocketPath: string } {
  return !!s && s.peerProtocol === 1 && !!s.messagingSocketPath && existsSync(s.messagingSocketPath);
}

/** The first Claude Code version seen to speak messaging peer protocol 1 and run asyncRewake hooks (2.1.332). */
export const FIRST_WAKE_VERSION: readonly number[] = [2, 1, 332];

export function parseVersion(text: string | null | undefined): number[] | null {
  const m = /(\d+)\.(\d+)\.(\d+)/.exec(text ?? '');
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : null;
}

/** Whether a version is at least the one that wakes: older ones may run an asyncRewake hook in the foreground. */
export function wakes(version: readonly number[] | null): boolean {
  if (!version) return false;
  for (let i = 0; i < FIRST_WAKE_VERSION.length; i++)
    if (version[i] !== FIRST_WAKE_VERSION[i]) return version[i]! > FIRST_WAKE_VERSION[i]!;
  return true;
}
