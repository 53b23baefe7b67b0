import { createConnection } from 'node:net';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { InboxSummary } from '../../domain/messages.js';
import { claudeConfigDir } from './claude-sessions.js';

/**
 * The doorbell: a short turn that tells an idle Claude Code session it has mail, written
 * into the session's messaging socket (peer protocol 1) or printed by the rewake hook. It
 * carries names and a count, never contents: the agent takes its messages with read_inbox.
 */

const NAME_MAX = 64;

/**
 * A name as it may appear in the doorbell and in `from-name="…"`: no quotes, angle brackets,
 * line breaks, control characters (C0 and C1) or bidirectional overrides (which would
 * reorder what the model and the terminal show), at most 64 characters, none cut in half.
 */
export function safeName(name: string): string {
  const cleaned = name
    // biome-ignore lint/suspicious/noControlCharactersInRegex: C0 and C1 control characters are what this strips from a name
    .replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]+/g, ' ')
    .replace(/"/g, "'")
    .replace(/</g, '‹')
    .replace(/>/g, '›')
    .replace(/\s+/g, ' ')
    .trim();
  return Array.from(cleaned).slice(0, NAME_MAX).join('').trim() || 'someone';
}

/** `[Beidou] 2 new messages from leader-1 and user: call read_inbox (ref m-…)`; the ref keeps it unique. */
export function doorbellText(summary: InboxSummary): string {
  const names = summary.senders.map((s) => safeName(s.name));
  const from = names.length <= 2 ? names.join(' and ') : `${names.slice(0, 2).join(', ')} and ${names.length - 2} more`;
  const what = summary.count === 1 ? '1 new message' : `${summary.count} new messages`;
  return `[Beidou] ${what} from ${from}: call mcp__beidou__read_inbox to read ${summary.count === 1 ? 'it' : 'them'} (ref ${safeRef(summary.latest)})`;
}

const safeRef = (id: string | null) => (id ?? 'none').replace(/[^\w.:-]/g, '').slice(0, 48);

/** The sender address Claude Code shows (`from`): address-shaped, one per sender so its per-sender dedupe holds. */
export function senderAddress(summary: InboxSummary): string {
  const only = summary.senders.length === 1 ? summary.senders[0]!.agent_id : 'inbox';
  return `beidou:${only.replace(/[^\w.-]/g, '') || 'inbox'}`;
}

/**
 * How long a doorbell waits for the agent's MCP client to be connected (after a server
 * restart Claude Code reconnects within seconds; until then read_inbox is "no such tool").
 * Past it the doorbell rings anyway: the turn it starts ends at a Stop, whose hook hands
 * the mail over without MCP.
 */
export const MCP_RECONNECT_GRACE_MS = 10_000;

/** Whether a doorbell for mail pending since `since` should wait for the agent's MCP client. */
export function awaitingMcp(state: { mcp_sessions?: number }, since: number, now = Date.now()): boolean {
  return state.mcp_sessions === 0 && now - since < MCP_RECONNECT_GRACE_MS;
}

/** Claude Code's two permission classes: a sender must attest the receiver's, or a bypass session holds the message. */
export type PermissionClass = 'bypass' | 'prompting';

export function permissionClass(mode: string | null | undefined): PermissionClass | null {
  if (!mode) return null;
  return mode === 'bypassPermissions' ? 'bypass' : 'prompting';
}

/** The mode a Claude Code process was started in: its command line, else the settings it reads. */
export function startupPermissionMode(
  pid: number | null,
  cwd: string | null,
  env: NodeJS.ProcessEnv = process.env,
): string | null {
  if (pid) {
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (args.includes('--dangerously-skip-permissions')) return 'bypassPermissions';
      const i = args.indexOf('--permission-mode');
      if (i >= 0 && args[i + 1]) return args[i + 1]!;
      const eq = args.find((a) => a.startsWith('--permission-mode='));
      if (eq) return eq.slice('--permission-mode='.length);
    } catch {
      // Not Linux, or the process is gone: the settings decide.
    }
  }
  // Later files override earlier ones, as Claude Code reads them.
  const files = [path.join(claudeConfigDir(env), 'settings.json')];
  if (cwd) files.push(path.join(cwd, '.claude', 'settings.json'), path.join(cwd, '.claude', 'settings.local.json'));
  let mode: string | null = null;
  for (const f of files) {
    try {
      const m = (JSON.parse(readFileSync(f, 'utf8')) as { permissions?: { defaultMode?: unknown } }).permissions
        ?.defaultMode;
      if (typeof m === 'string') mode = m;
    } catch {
      // Missing or not JSON: nothing to learn here.
    }
  }
  return mode ?? 'default';
}

/**
 * The socket body: a user turn for the session, wrapped as a cross-session message that
 * attests the session's own permission class (a bypass session holds an unattested one).
 */
export function doorbellContent(text: string, summary: InboxSummary, mode: PermissionClass | null): string {
  if (!mode) return text;
  const name = summary.senders.length === 1 ? safeName(summary.senders[0]!.name) : 'Beidou';
  return `<cross-session-message from="${senderAddress(summary)}" from-name="${name}" from-mode="${mode}">\n${text}\n</cross-session-message>`;
}

export interface Ring {
  socket: string;
  /** The session's current id: a message for another id is dropped. */
  sessionId: string;
  /** CLAUDE_CODE_MESSAGING_TOKEN, when the session gave one. */
  token: string | null;
  summary: InboxSummary;
  mode: PermissionClass | null;
}

/** Writes one doorbell into the session's socket (newline-delimited JSON, one way). */
export function ring(r: Ring): Promise<void> {
  const lines = [
    ...(r.token ? [{ type: 'auth', token: r.token }] : []),
    {
      type: 'user',
      message: { role: 'user', content: doorbellContent(doorbellText(r.summary), r.summary, r.mode) },
      priority: 'next',
      session_id: r.sessionId,
      from: senderAddress(r.summary),
      msg_id: `beidou-${safeRef(r.summary.latest)}-${Date.now().toString(36)}`,
    },
  ];
  return new Promise((resolve, reject) => {
    const conn = createConnection(r.socket, () => conn.end(lines.map((l) => `${JSON.stringify(l)}\n`).join('')));
    conn.setTimeout(5_000, () =>
      conn.destroy(new Error(`the session socket ${r.socket} did not take the doorbell in 5 s`)),
    );
    conn.on('error', reject);
    conn.on('close', (hadError) => {
      if (!hadError) resolve();
    });
    conn.resume();
  });
}
