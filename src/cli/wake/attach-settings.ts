import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CliError } from '../client.js';

/**
 * The files `beidou attach` writes into a project: its hooks and the permission for Beidou's
 * tools, merged into `.claude/settings.local.json` beside the user's own entries and taken out
 * again without touching those; and the atomic write used for the settings and the token file.
 */

const HOOK_MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'hook-main.js');
/** The wake hooks wait in the background for a week; each Stop re-arms them. */
const WAIT_TIMEOUT_S = 7 * 24 * 3600;
export const ALLOW_RULE = 'mcp__beidou__*';

// biome-ignore lint/suspicious/noExplicitAny: a user's settings.json, of any shape: read and merged, never trusted for types
export type Json = Record<string, any>;

/** One shell word, single-quoted. */
export const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const ours = (hook: { command?: unknown }) => typeof hook.command === 'string' && hook.command.includes('hook-main.js');

export function settingsFile(dir: string): string {
  return path.join(dir, '.claude', 'settings.local.json');
}

export function readJson(file: string): Json {
  if (!existsSync(file)) return {};
  try {
    const parsed = JSON.parse(readFileSync(file, 'utf8')) as unknown;
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Json;
  } catch {
    // fall through
  }
  throw new CliError(`${file} is not a JSON object; fix or remove it first`, 2);
}

export function writeFileAtomic(file: string, text: string, mode: number): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  // A new file of our own (O_EXCL, unguessable name): in a shared folder a file or link
  // planted at a predictable name would otherwise take the token, with its own mode.
  const tmp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  writeFileSync(tmp, text, { mode, flag: 'wx' });
  renameSync(tmp, file);
}

/**
 * The settings without any hook or rule this command wrote (others' entries are kept). A
 * group, event, list or object goes only when removing ours emptied it: settings with
 * nothing of ours come back as they are (an empty `hooks` or `allow` of the user's too).
 */
export function withoutOurs(settings: Json): Json {
  const out: Json = { ...settings };
  if (out.hooks && typeof out.hooks === 'object' && !Array.isArray(out.hooks)) {
    const hooks: Json = {};
    let removed = false;
    for (const [event, groups] of Object.entries(out.hooks as Json)) {
      if (!Array.isArray(groups)) {
        hooks[event] = groups;
        continue;
      }
      const kept = groups.flatMap((g: Json) => {
        if (!Array.isArray(g?.hooks)) return [g];
        const rest = g.hooks.filter((h: Json) => !ours(h));
        if (rest.length === g.hooks.length) return [g];
        removed = true;
        return rest.length > 0 ? [{ ...g, hooks: rest }] : [];
      });
      if (kept.length > 0 || groups.length === 0) hooks[event] = kept;
    }
    if (removed) {
      if (Object.keys(hooks).length > 0) out.hooks = hooks;
      else delete out.hooks;
    }
  }
  if (Array.isArray(out.permissions?.allow) && out.permissions.allow.includes(ALLOW_RULE)) {
    const allow = out.permissions.allow.filter((r: unknown) => r !== ALLOW_RULE);
    out.permissions = { ...out.permissions, allow };
    if (allow.length === 0) delete out.permissions.allow;
    if (Object.keys(out.permissions).length === 0) delete out.permissions;
  }
  return out;
}

export function hookCommand(event: string, o: { server: string; tokenFile: string; home: string }): string {
  return [
    quote(process.execPath),
    quote(HOOK_MAIN),
    event,
    '--server',
    quote(o.server),
    '--token-file',
    quote(o.tokenFile),
    '--home',
    quote(o.home),
  ].join(' ');
}

/** A shell word: as it is when nothing in it needs quoting (a path, a URL), else single-quoted. */
const word = (s: string) => (/^[\w./:@%+=,-]+$/.test(s) ? s : quote(s));

/**
 * The `headersHelper` of an MCP server entry in Claude Code: `beidou hook mcp-headers`,
 * printing the Authorization header from the token file, so no config holds the token.
 */
export function headersHelper(tokenFile: string): string {
  return [process.execPath, HOOK_MAIN, 'mcp-headers', '--token-file', tokenFile].map(word).join(' ');
}

export function attachedSettings(settings: Json, o: { server: string; tokenFile: string; home: string }): Json {
  const base = withoutOurs(settings);
  const cmd = (event: string, extra: Json = {}) => ({ type: 'command', command: hookCommand(event, o), ...extra });
  const wait = { asyncRewake: true, timeout: WAIT_TIMEOUT_S };
  const add: Json = {
    PreToolUse: [{ matcher: '*', hooks: [cmd('pre-tool-use')] }],
    PostToolUse: [{ matcher: '*', hooks: [cmd('post-tool-use')] }],
    Stop: [{ hooks: [cmd('stop'), cmd('rewake', wait)] }],
    SessionStart: [{ hooks: [cmd('session-start', wait)] }],
  };
  const hooks: Json = { ...(base.hooks ?? {}) };
  for (const [event, groups] of Object.entries(add)) hooks[event] = [...(hooks[event] ?? []), ...groups];
  const allow = [...(base.permissions?.allow ?? []), ALLOW_RULE];
  return { ...base, permissions: { ...(base.permissions ?? {}), allow }, hooks };
}

export function isAttached(settings: Json): boolean {
  return JSON.stringify(withoutOurs(settings)) !== JSON.stringify(settings);
}

/** The token file the installed hooks name, read back from the settings. */
export function installedTokenFile(settings: Json): string | null {
  for (const groups of Object.values((settings.hooks ?? {}) as Json)) {
    if (!Array.isArray(groups)) continue;
    for (const g of groups) {
      for (const h of Array.isArray(g?.hooks) ? g.hooks : []) {
        const m = ours(h) ? /--token-file '((?:[^']|'\\'')*)'/.exec(h.command as string) : null;
        if (m) return m[1]!.replace(/'\\''/g, "'");
      }
    }
  }
  return null;
}
