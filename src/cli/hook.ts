import { readFileSync } from 'node:fs';

/** A usage error: one line on stderr, exit 2. (Local so the hook loads nothing heavy.) */
export class HookUsageError extends Error {}

/**
 * `beidou hook pre-tool-use | post-tool-use | stop | session-start | rewake`: a Claude Code
 * hook command. Reads the hook's JSON on stdin, asks the server (as the agent whose token
 * it holds: BEIDOU_TOKEN, or the file of `--token-file`), and prints Claude Code's hook
 * output. If the server cannot be reached it allows and says so on stderr: a hook must
 * never wedge a session. `session-start` and `rewake` wake an idle session when mail
 * arrives (docs/claude-code.md); they resolve with the hook's exit code.
 */
const ROUTES = { 'pre-tool-use': 'pre-tool-use', 'post-tool-use': 'post-tool-use', stop: 'stop' } as const;
const WAKE_EVENTS = new Set(['session-start', 'rewake']);

/** What `beidou attach` writes into the hook commands; the spawner's hooks use the environment instead. */
export interface HookOptions {
  server?: string;
  tokenFile?: string;
  /** The Beidou home whose `wake/` folder the relays and waiters share. */
  home?: string;
}

/** `hook EVENT [--server URL] [--token-file F] [--home DIR]`, parsed without the CLI parser (hooks start on every tool call). */
export function parseHookArgs(argv: readonly string[]): { event: string; opts: HookOptions } {
  const [event = '', ...rest] = argv;
  const opts: HookOptions = {};
  // A Map: a plain object would take `constructor` or `__proto__` for options.
  const flags = new Map<string, keyof HookOptions>([
    ['--server', 'server'],
    ['--token-file', 'tokenFile'],
    ['--home', 'home'],
  ]);
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    const eq = arg.indexOf('=');
    const inline = eq > 0;
    const name = inline ? arg.slice(0, eq) : arg;
    const key = flags.get(name);
    if (!key) throw new HookUsageError(`unknown option "${arg}": use --server, --token-file or --home`);
    const value = inline ? arg.slice(eq + 1) : rest[++i];
    // `--server --home D`: the next option is not the server's value.
    const next = value !== undefined && !inline && flags.has(value.split('=')[0]!);
    if (value === undefined || value === '' || next) throw new HookUsageError(`${name} needs a value`);
    opts[key] = value;
  }
  return { event, opts };
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export function hookServer(opts: HookOptions = {}): string {
  if (opts.server) return opts.server.replace(/\/+$/, '');
  const explicit = process.env.BEIDOU_SERVER;
  if (explicit) return explicit.replace(/\/+$/, '');
  const mcp = process.env.BEIDOU_URL;
  if (mcp) return mcp.replace(/\/mcp\/?$/, '');
  return `http://127.0.0.1:${process.env.BEIDOU_PORT || '7777'}`;
}

function hookToken(opts: HookOptions): string {
  if (opts.tokenFile) {
    try {
      const token = readFileSync(opts.tokenFile, 'utf8').trim();
      if (token) return token;
    } catch (err) {
      throw new HookUsageError(
        `cannot read the token file ${opts.tokenFile}: ${(err as Error).message}; run beidou attach again`,
      );
    }
    throw new HookUsageError(`the token file ${opts.tokenFile} is empty; run beidou attach again`);
  }
  const token = process.env.BEIDOU_TOKEN;
  if (!token)
    throw new HookUsageError(
      'BEIDOU_TOKEN is not set and no --token-file was given: the hook acts as the agent whose token it holds',
    );
  return token;
}

/** Resolves with the exit code the hook process should end with. */
export async function hook(event: string, opts: HookOptions = {}): Promise<number> {
  const route = ROUTES[event as keyof typeof ROUTES];
  if (!route && !WAKE_EVENTS.has(event) && event !== 'mcp-headers') {
    throw new HookUsageError(
      `unknown hook event "${event}": use pre-tool-use, post-tool-use, stop, session-start or rewake`,
    );
  }
  const token = hookToken(opts);
  if (event === 'mcp-headers') {
    // Claude Code's `headersHelper` for the MCP server `beidou attach` adds: the token stays in its file.
    process.stdout.write(`${JSON.stringify({ Authorization: `Bearer ${token}` })}\n`);
    return 0;
  }
  const raw = await readStdin();
  let input: Record<string, unknown> = {};
  try {
    input = raw.trim() ? (JSON.parse(raw) as Record<string, unknown>) : {};
  } catch {
    throw new HookUsageError('the hook input on stdin is not JSON');
  }
  const sessionId =
    process.env.CLAUDE_CODE_SESSION_ID || (typeof input.session_id === 'string' ? input.session_id : '');
  if (opts.home && sessionId && typeof input.permission_mode === 'string') {
    // The relay attests the session's permission class in each doorbell; the hooks see it change.
    const { WakeState } = await import('./wake/wake-state.js');
    try {
      new WakeState(opts.home).recordMode(sessionId, input.permission_mode);
    } catch {
      // Best effort: a read-only home only costs the relay its guess.
    }
  }
  if (!route) {
    const { wakeHook } = await import('./wake/wake-hook.js');
    return wakeHook(event as 'session-start' | 'rewake', {
      server: hookServer(opts),
      tokenFile: opts.tokenFile ?? null,
      token,
      home: opts.home ?? null,
      sessionId,
      input,
    });
  }
  // A Stop hook that already blocked once gets stop_hook_active: let it stop this time.
  if (route === 'stop' && input.stop_hook_active === true) return 0;
  const body =
    route === 'pre-tool-use' ? { tool_name: input.tool_name ?? '', tool_input: input.tool_input ?? null } : {};
  let answer: Record<string, unknown>;
  try {
    const res = await fetch(`${hookServer(opts)}/api/hook/${route}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    answer = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`${res.status} ${String(answer.error)}: ${String(answer.message)}`);
  } catch (err) {
    process.stderr.write(`beidou hook: ${(err as Error).message}; allowing\n`);
    return 0;
  }
  const out = hookOutput(route, answer);
  if (out) process.stdout.write(`${JSON.stringify(out)}\n`);
  return 0;
}

/** Claude Code's hook output shapes. */
export function hookOutput(route: string, answer: Record<string, unknown>): Record<string, unknown> | null {
  if (route === 'pre-tool-use') {
    if (answer.decision !== 'deny') return null;
    return {
      hookSpecificOutput: {
        hookEventName: 'PreToolUse',
        permissionDecision: 'deny',
        permissionDecisionReason: String(answer.reason),
      },
    };
  }
  if (route === 'post-tool-use') {
    if (!answer.context) return null;
    return { hookSpecificOutput: { hookEventName: 'PostToolUse', additionalContext: String(answer.context) } };
  }
  if (answer.block !== true) return null;
  return { decision: 'block', reason: String(answer.reason) };
}
