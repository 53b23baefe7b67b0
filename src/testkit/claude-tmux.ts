// In src/ (not test/support/) so the bench, compiled from src/, drives Claude Code the way test/claude-code/wake.test.ts does.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { PACKAGE_ROOT } from '../util/version.js';
import type { FakeAnthropic } from './fake-anthropic.js';

/**
 * The real Claude Code binary, interactive, in a tmux pane of its own tmux server, with a
 * throwaway HOME whose `~/.claude.json` settles onboarding, the folder's trust dialog and
 * (for bypass-permissions) its warning, so no keystroke is needed to reach the prompt.
 */
export const CLAUDE = path.join(PACKAGE_ROOT, 'node_modules', '.bin', 'claude');

export interface ClaudeHomeOptions {
  /** The project folders Claude Code may trust without asking. */
  projects: string[];
  bypass?: boolean;
}

export function settleClaudeHome(home: string, opts: ClaudeHomeOptions): void {
  mkdirSync(path.join(home, '.claude'), { recursive: true });
  const projects = Object.fromEntries(
    opts.projects.map((p) => [p, { hasTrustDialogAccepted: true, hasCompletedProjectOnboarding: true }]),
  );
  writeFileSync(
    path.join(home, '.claude.json'),
    JSON.stringify({
      hasCompletedOnboarding: true,
      numStartups: 5,
      theme: 'dark',
      ...(opts.bypass ? { bypassPermissionsModeAccepted: true } : {}),
      customApiKeyResponses: { approved: ['test'], rejected: [] },
      projects,
    }),
  );
  if (opts.bypass)
    writeFileSync(
      path.join(home, '.claude', 'settings.json'),
      JSON.stringify({ skipDangerousModePermissionPrompt: true }),
    );
}

/** Claude Code's environment: the fake as its API, the throwaway HOME, nothing of the session running the tests. */
export function claudeEnv(
  fake: FakeAnthropic,
  home: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || /^(ANTHROPIC_|CLAUDE|BEIDOU_|MCP_|TMUX)/.test(k) || k === 'IS_SANDBOX') continue;
    env[k] = v;
  }
  return {
    ...env,
    HOME: home,
    TERM: 'xterm-256color',
    ANTHROPIC_BASE_URL: fake.url,
    ANTHROPIC_API_KEY: 'test',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    ...extra,
  };
}

let servers = 0;

export interface TmuxClaude {
  socketName: string;
  /** Claude Code's pid (the pane's process: `env` execs it), which names its session file. */
  pid(): number;
  /** What the pane shows now. */
  capture(): string;
  keys(...keys: string[]): void;
  /** Ends the pane (Claude Code gets SIGHUP) and the tmux server. */
  kill(): void;
}

export function startTmuxClaude(cwd: string, env: Record<string, string>, args: string[] = []): TmuxClaude {
  const socketName = `beidou-test-${process.pid}-${++servers}`;
  const tmux = (...a: string[]) =>
    execFileSync('tmux', ['-L', socketName, ...a], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const assignments = Object.entries(env).map(([k, v]) => `${k}=${v}`);
  try {
    tmux(
      'new-session',
      '-d',
      '-s',
      'claude',
      '-x',
      '160',
      '-y',
      '50',
      '-c',
      cwd,
      'env',
      '-i',
      ...assignments,
      CLAUDE,
      ...args,
    );
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      throw new Error(
        'tmux is not installed: the interactive Claude Code tests need it (apt-get install tmux; .ci/run does)',
      );
    throw err;
  }
  let killed = false;
  return {
    socketName,
    pid: () => Number(tmux('display-message', '-p', '-t', 'claude', '#{pane_pid}').trim()),
    capture: () => {
      try {
        return tmux('capture-pane', '-p', '-t', 'claude');
      } catch {
        return '(no pane)';
      }
    },
    keys: (...keys) => void tmux('send-keys', '-t', 'claude', ...keys),
    kill: () => {
      if (killed) return;
      killed = true;
      try {
        tmux('kill-server');
      } catch {
        // Already gone with its only pane.
      }
    },
  };
}

/** What Claude Code says in `$HOME/.claude/sessions/<pid>.json` about whether it is working: 'idle', 'busy', or null before it says. */
export function sessionStatus(home: string, pid: number): string | null {
  try {
    const status = (
      JSON.parse(readFileSync(path.join(home, '.claude', 'sessions', `${pid}.json`), 'utf8')) as { status?: unknown }
    ).status;
    return typeof status === 'string' ? status : null;
  } catch {
    return null;
  }
}
