import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { DrainedEvent, LaunchCommand } from '../protocol/spawner.js';


export interface StartSpec {
  launch: LaunchCommand;
  /** The server's base URL (`http://HOST:PORT`) and its MCP endpoint (`…/mcp`). */
  serverUrl: string;
  mcpUrl: string;
  cwd: string;
  /** Continue `sessionId` (a resume) rather than start afresh. */
  resume: boolean;
  sessionId: string;
  /** A turn to send first on a resume (the contract-violation nudge). */
  nudge: string | null;
}

export interface AgentProcess {
  readonly pid: number | undefined;
  /** Writes one inbox message into the agent as its next user turn. */
  deliver(message: { message_id: string; from: string; from_name: string; kind: string; content: string; redelivered?: true }): void;
  /** Asks the agent to end (closes its input); the supervisor kills it after the grace time. */
  end(): void;
  kill(): void;
  /** Settles when the process exits: `code` null means it was killed by `signal`. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The last lines it wrote to stderr (at most 200). */
  stderrTail(): string;
}

export interface AdapterHooks {
  /** An event drained from the agent's output. */
  onEvent(event: DrainedEvent): void;
  /** The agent's session id became known (Claude Code reports its own). */
  onSession(sessionId: string): void;
  /** A turn ended cleanly: crash strikes reset. */
  onCleanTurn(): void;
}

export interface Adapter {
  readonly name: string;
  start(spec: StartSpec, hooks: AdapterHooks): AgentProcess;
}

/** A bounded ring of the last stderr lines, for crash reports. */
export class LineRing {
  private readonly lines: string[] = [];
  private partial = '';

  constructor(private readonly size = 200) {}

  push(chunk: string): void {
    const parts = (this.partial + chunk).split('\n');
    this.partial = parts.pop() ?? '';
    for (const line of parts) {
      this.lines.push(line);
      if (this.lines.length > this.size) this.lines.shift();
    }
  }

  text(): string {
    return [...this.lines, ...(this.partial ? [this.partial] : [])].slice(-this.size).join('\n');
  }
}

/**
 * What every adapter does with its child (spawned with `detached: true`) the same way: stdout read by lines, the stderr
 * ring, the exit as a promise (a failure to start counts as exit 127), and guarded writes
 * (a process that exits while we write must not crash the spawner).
 */
export function wrapChild(
  child: ChildProcessWithoutNullStreams,
  onLine: (line: string) => void,
): Omit<AgentProcess, 'deliver'> & { writeLine: (line: string) => void } {
  const stderr = new LineRing();
  child.stderr.setEncoding('utf8').on('data', (d: string) => stderr.push(d));
  createInterface({ input: child.stdout }).on('line', onLine);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('close', (code, signal) => resolve({ code, signal }));
    child.once('error', (err) => {
      stderr.push(`${err.message}\n`);
      resolve({ code: 127, signal: null });
    });
  });
  child.stdin.on('error', () => undefined);
  return {
    pid: child.pid,
    writeLine: (line) => {
      if (!child.stdin.destroyed && child.stdin.writable) child.stdin.write(line + '\n');
    },
    end: () => child.stdin.end(),
    // The agent runs in its own process group (spawned detached): a shell and whatever the
    // agent started (Claude Code's tools, a shell's child) die together.
    kill: () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    },
    exited,
    stderrTail: () => stderr.text(),
  };
}

/**
 * The environment an agent process inherits: the spawner's own minus its secrets. An agent
 * (an LLM with a shell) must never hold the admin, spawner or signing secret: with them it
 * could answer the user's questions or approve its own review.
 */
export function agentEnvironment(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const secret of ['BEIDOU_ADMIN_TOKEN', 'BEIDOU_SECRET', 'BEIDOU_SPAWNER_TOKEN']) delete env[secret];
  return { ...env, ...extra };
}
