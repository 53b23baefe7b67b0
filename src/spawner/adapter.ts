import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { AGENT_STDERR_MAX_CHARS, type AgentErrorReason } from '../events/catalogue.js';
import type { DrainedEvent, LaunchCommand } from '../protocol/spawner.js';
import { scrubTokens } from '../util/scrub.js';
import { AGENT_LINE_MAX_BYTES, type LineCut, LineSplitter, readLines } from './line-reader.js';

/** What went wrong with an agent's process, as an adapter diagnosed it. */
export interface AgentFailure {
  reason: AgentErrorReason;
  /** One line, for a person: what happened and, where we know it, what to do. */
  msg: string;
}

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
  deliver(message: {
    message_id: string;
    from: string;
    from_name: string;
    kind: string;
    content: string;
    redelivered?: true;
  }): void;
  /** Asks the agent to end (closes its input); the supervisor kills it after the grace time. */
  end(): void;
  kill(): void;
  /** Settles when the process exits: `code` null means it was killed by `signal`. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The last lines it wrote to stderr (at most 200 of 4 KiB each), tokens cut out. */
  stderrTail(): string;
  /** What the adapter learnt went wrong (the binary could not run, an error result), if anything. */
  failure(): AgentFailure | null;
}

export interface AdapterHooks {
  /** An event drained from the agent's output. */
  onEvent(event: DrainedEvent): void;
  /** The agent's session id became known (Claude Code reports its own). */
  onSession(sessionId: string): void;
  /** A turn ended cleanly: crash strikes reset. */
  onCleanTurn(): void;
}

/**
 * Why a process that exited non-zero (or was killed) failed: what its adapter saw first
 * (a spawn error, an error result), else a shell's "command not found" (exit 127), else
 * the exit itself, with its last stderr line.
 */
export function exitFailure(
  proc: AgentProcess,
  exit: { code: number | null; signal: NodeJS.Signals | null },
): AgentFailure {
  const known = proc.failure();
  if (known) return known;
  const lines = proc
    .stderrTail()
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  const last = lines.at(-1) ?? '';
  // In the sandbox bwrap itself runs the binary, and says so when it cannot.
  const sandboxed = /^bwrap: execvp (.+): (No such file or directory|Permission denied)$/.exec(last);
  if (sandboxed)
    return {
      reason: 'binary_missing',
      msg: `cannot run ${sandboxed[1]} (${sandboxed[2]}); install it or point the spawner at it`,
    };
  if (exit.code === 127 && /not found|No such file/i.test(last))
    return { reason: 'binary_missing', msg: `command not found: ${last}` };
  const how = exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
  return { reason: 'exit_nonzero', msg: last ? `${how}: ${last}` : `${how} (nothing on stderr)` };
}

/** The one line a person reads about an agent's failure. */
export function failureLine(launch: LaunchCommand, failure: AgentFailure): string {
  return `agent ${launch.name} (${launch.agent_id}) failed [${failure.reason}]: ${failure.msg}`;
}

export interface Adapter {
  readonly name: string;
  start(spec: StartSpec, hooks: AdapterHooks): AgentProcess;
}

/** How many of an agent's last stderr lines its crash report keeps, and the longest of each. */
export const STDERR_LINES = 200;
export const STDERR_LINE_MAX_BYTES = 4 * 1024;

const marked = (line: string, cut: LineCut | null) => (cut ? `${line} [cut: a line of ${cut.bytes} bytes]` : line);

/**
 * A bounded ring of the last stderr lines, for crash reports: read by the same splitter as
 * stdout, each line at most STDERR_LINE_MAX_BYTES (a longer one cut, with a note), so a line
 * without its newline costs no more than the cap, and what it holds is at most
 * STDERR_LINES × STDERR_LINE_MAX_BYTES.
 */
export class LineRing {
  private readonly lines: string[] = [];
  private readonly splitter: LineSplitter;

  constructor(
    private readonly size = STDERR_LINES,
    maxLineBytes = STDERR_LINE_MAX_BYTES,
  ) {
    this.splitter = new LineSplitter(maxLineBytes, (line, cut) => {
      this.lines.push(marked(line, cut));
      if (this.lines.length > this.size) this.lines.shift();
    });
  }

  push(chunk: Buffer | string): void {
    this.splitter.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
  }

  /**
   * The last lines, the one still being written included, with tokens cut out (the tail is
   * posted in events and shown to people), within what the event's schema takes.
   */
  text(): string {
    const current = this.splitter.current();
    const lines = current ? [...this.lines, marked(current.line, current.cut)] : this.lines;
    const text = scrubTokens(lines.slice(-this.size).join('\n'));
    return text.length > AGENT_STDERR_MAX_CHARS ? text.slice(-AGENT_STDERR_MAX_CHARS) : text;
  }
}

/**
 * What every adapter does with its child (spawned with `detached: true`) the same way: stdout read by lines (each
 * at most `maxLineBytes`, longer ones cut: `cut` says how long it was; line-reader.ts), the stderr
 * ring, the exit as a promise (a failure to start counts as exit 127), and guarded writes
 * (a process that exits while we write must not crash the spawner).
 */
export function wrapChild(
  child: ChildProcessWithoutNullStreams,
  onLine: (line: string, cut: LineCut | null) => void,
  bin = 'the agent command',
  maxLineBytes = AGENT_LINE_MAX_BYTES,
): Omit<AgentProcess, 'deliver'> & { writeLine: (line: string) => void; setFailure: (f: AgentFailure | null) => void } {
  const stderr = new LineRing();
  let failure: AgentFailure | null = null;
  child.stderr.on('data', (d: Buffer) => stderr.push(d));
  readLines(child.stdout, maxLineBytes, onLine);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('close', (code, signal) => resolve({ code, signal }));
    child.once('error', (err) => {
      stderr.push(`${err.message}\n`);
      const code = (err as NodeJS.ErrnoException).code;
      failure =
        code === 'ENOENT' || code === 'EACCES'
          ? {
              reason: 'binary_missing',
              msg: `cannot run ${bin} (${err.message}); install it or point the spawner at it`,
            }
          : { reason: 'exit_nonzero', msg: `could not start ${bin}: ${err.message}` };
      resolve({ code: 127, signal: null });
    });
  });
  child.stdin.on('error', () => undefined);
  return {
    pid: child.pid,
    writeLine: (line) => {
      if (!child.stdin.destroyed && child.stdin.writable) child.stdin.write(`${line}\n`);
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
    failure: () => failure,
    // The latest diagnosis (null after a clean turn): a later exit is its consequence.
    setFailure: (f) => {
      failure = f;
    },
  };
}
