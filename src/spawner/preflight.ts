import { execFile, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * What `beidou spawner --adapter claude` checks before it serves anyone: that the Claude
 * Code binary runs (`claude --version`) and that it will find credentials. Without this,
 * every agent it launched would fail the same way, three times, out of the user's sight.
 */

export type PreflightResult = { ok: true; version: string; credentials: string } | { ok: false; problem: string };

const ENV_KEYS = ['ANTHROPIC_API_KEY', 'ANTHROPIC_AUTH_TOKEN', 'CLAUDE_CODE_OAUTH_TOKEN'] as const;
/** Claude Code on a cloud provider authenticates with that provider's own credentials. */
const PROVIDER_SWITCHES = ['CLAUDE_CODE_USE_BEDROCK', 'CLAUDE_CODE_USE_VERTEX', 'CLAUDE_CODE_USE_FOUNDRY'] as const;

const SKIP = '(--skip-preflight starts anyway)';

export async function claudePreflight(bin: string, env: NodeJS.ProcessEnv = process.env): Promise<PreflightResult> {
  const version = await runVersion(bin, env);
  if (!version.ok) return version;
  const credentials = findCredentials(env);
  if (!credentials) {
    const dir = configDir(env);
    return {
      ok: false,
      problem:
        `Claude Code (${bin}) has no credentials: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, or CLAUDE_CODE_OAUTH_TOKEN from \`claude setup-token\`) ` +
        `for the spawner, or run \`claude\` and /login as this user (nothing in ${path.join(dir, '.credentials.json')}) ${SKIP}`,
    };
  }
  return { ok: true, version: version.version, credentials };
}

function runVersion(
  bin: string,
  env: NodeJS.ProcessEnv,
): Promise<{ ok: true; version: string } | { ok: false; problem: string }> {
  return new Promise((resolve) => {
    execFile(bin, ['--version'], { env, timeout: 30_000, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (!err) return resolve({ ok: true, version: stdout.trim().split('\n')[0] ?? '' });
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'EACCES') {
        return resolve({
          ok: false,
          problem: `cannot run Claude Code: ${bin} ${code === 'ENOENT' ? 'not found' : 'not executable'}; install it (npm install -g @anthropic-ai/claude-code) or pass --claude-bin PATH ${SKIP}`,
        });
      }
      const last = stderr.trim().split('\n').at(-1) ?? '';
      resolve({
        ok: false,
        problem: `\`${bin} --version\` failed (${err.message.split('\n')[0]}${last ? `: ${last}` : ''}) ${SKIP}`,
      });
    });
  });
}

/** Claude Code's own folder: `CLAUDE_CONFIG_DIR`, else `~/.claude`. */
function configDir(env: NodeJS.ProcessEnv): string {
  return env.CLAUDE_CONFIG_DIR || path.join(env.HOME || os.homedir(), '.claude');
}

function readJson(file: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(readFileSync(file, 'utf8'));
    return value !== null && typeof value === 'object' ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

const nonEmpty = (v: unknown) => typeof v === 'string' && v.trim().length > 0;

/**
 * Where Claude Code would find credentials, in the order it looks, named for the log; null
 * if nowhere. An environment key; a cloud provider switch; an `apiKeyHelper` (or a key in
 * the `env` block) of the user or managed settings; a login: the OAuth tokens `/login`
 * writes to `.credentials.json` in its folder (the macOS Keychain holds them there instead),
 * or the `primaryApiKey` a Console login keeps in `.claude.json`.
 */
export function findCredentials(env: NodeJS.ProcessEnv): string | null {
  for (const key of ENV_KEYS) if (nonEmpty(env[key])) return `environment ${key}`;
  for (const key of PROVIDER_SWITCHES)
    if (env[key] && env[key] !== '0' && env[key] !== 'false') return `cloud provider (${key})`;
  const dir = configDir(env);
  const settingsFiles = [
    path.join(dir, 'settings.json'),
    path.join(dir, 'settings.local.json'),
    process.platform === 'darwin'
      ? '/Library/Application Support/ClaudeCode/managed-settings.json'
      : '/etc/claude-code/managed-settings.json',
  ];
  for (const file of settingsFiles) {
    const settings = readJson(file);
    if (!settings) continue;
    if (nonEmpty(settings.apiKeyHelper)) return `apiKeyHelper in ${file}`;
    const block = settings.env as Record<string, unknown> | undefined;
    if (block && typeof block === 'object')
      for (const key of ENV_KEYS) if (nonEmpty(block[key])) return `${key} in ${file}`;
  }
  const credentialsFile = path.join(dir, '.credentials.json');
  const oauth = readJson(credentialsFile)?.claudeAiOauth as Record<string, unknown> | undefined;
  if (oauth && (nonEmpty(oauth.accessToken) || nonEmpty(oauth.refreshToken))) return `login in ${credentialsFile}`;
  const stateFile = env.CLAUDE_CONFIG_DIR
    ? path.join(dir, '.claude.json')
    : path.join(env.HOME || os.homedir(), '.claude.json');
  if (nonEmpty(readJson(stateFile)?.primaryApiKey)) return `API key login in ${stateFile}`;
  if (process.platform === 'darwin' && keychainHasLogin()) return 'login in the macOS Keychain';
  return null;
}

function keychainHasLogin(): boolean {
  try {
    // Only whether the item exists (no -w: its secret is never read).
    const { status } = spawnSync('security', ['find-generic-password', '-s', 'Claude Code-credentials'], {
      stdio: 'ignore',
      timeout: 10_000,
    });
    return status === 0;
  } catch {
    return false;
  }
}
