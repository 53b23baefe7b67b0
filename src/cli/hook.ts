/** A usage error: one line on stderr, exit 2. (Local so the hook loads nothing heavy.) */
export class HookUsageError extends Error {}

/**
 * `beidou hook pre-tool-use | post-tool-use | stop`: a Claude Code hook command. Reads the
 * hook's JSON on stdin, asks the server (as the agent of BEIDOU_TOKEN), and prints Claude
 * Code's hook output. If the server cannot be reached it allows and says so on stderr: a
 * hook must never wedge a session.
 */
const ROUTES = { 'pre-tool-use': 'pre-tool-use', 'post-tool-use': 'post-tool-use', stop: 'stop' } as const;

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export function hookServer(): string {
  const explicit = process.env.BEIDOU_SERVER;
  if (explicit) return explicit.replace(/\/+$/, '');
  const mcp = process.env.BEIDOU_URL;
  if (mcp) return mcp.replace(/\/mcp\/?$/, '');
  return `http://127.0.0.1:${process.env.BEIDOU_PORT || '7777'}`;
}

export async function hook(event: string): Promise<void> {
  const route = ROUTES[event as keyof typeof ROUTES];
  if (!route) throw new HookUsageError(`unknown hook event "${event}": use pre-tool-use, post-tool-use or stop`);
  const token = process.env.BEIDOU_TOKEN;
  if (!token) throw new HookUsageError('BEIDOU_TOKEN is not set: the hook acts as the agent whose token it holds');
  const raw = await readStdin();
  let input: Record<string, unknown> = {};
  try {
    input = raw.trim() ? (JSON.parse(raw) as Record<string, unknown>) : {};
  } catch {
    throw new HookUsageError('the hook input on stdin is not JSON');
  }
  // A Stop hook that already blocked once gets stop_hook_active: let it stop this time.
  if (route === 'stop' && input.stop_hook_active === true) return;
  const body = route === 'pre-tool-use' ? { tool_name: input.tool_name ?? '', tool_input: input.tool_input ?? null } : {};
  let answer: Record<string, unknown>;
  try {
    const res = await fetch(`${hookServer()}/api/hook/${route}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    answer = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`${res.status} ${String(answer.error)}: ${String(answer.message)}`);
  } catch (err) {
    process.stderr.write(`beidou hook: ${(err as Error).message}; allowing\n`);
    return;
  }
  const out = hookOutput(route, answer);
  if (out) process.stdout.write(JSON.stringify(out) + '\n');
}

/** Claude Code's hook output shapes. */
export function hookOutput(route: string, answer: Record<string, unknown>): Record<string, unknown> | null {
  if (route === 'pre-tool-use') {
    if (answer.decision !== 'deny') return null;
    return { hookSpecificOutput: { hookEventName: 'PreToolUse', permissionDecision: 'deny', permissionDecisionReason: String(answer.reason) } };
  }
  if (route === 'post-tool-use') {
    if (!answer.context) return null;
    return { hookSpecificOutput: { hookEventName: 'PostToolUse', additionalContext: String(answer.context) } };
  }
  if (answer.block !== true) return null;
  return { decision: 'block', reason: String(answer.reason) };
}
