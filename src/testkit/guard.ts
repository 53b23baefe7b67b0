// In src/ (not test/support/) so the bench, compiled from src/, starts its servers the way the tests do.
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import type { Readable } from 'node:stream';

/**
 * A child process that must never outlive the process that started it, however that process
 * ends (SIGKILL included): it runs under a small guard shell that holds a pipe from us (its
 * stdin) and sends the child `stopSignal` when the pipe closes, by `stop()` or by our death.
 * The guard exits when the child does, with its status, and reports the child's own pid (on
 * fd 3) so the owner can signal the child itself (the bench SIGKILLs and SIGSTOPs replicas).
 * The child's stdout and stderr are the guard's.
 */

export interface GuardOptions {
  /** Sent to the child when the pipe closes (PostgreSQL: INT, its fast shutdown). Default TERM. */
  stopSignal?: 'INT' | 'TERM' | 'KILL';
  /** Appends the child's stderr to this file instead. */
  stderrFile?: string;
  /** Runs the guard and the child as this user (`runuser`; we must be root). */
  user?: string | null;
  stdout?: 'pipe' | 'ignore';
  stderr?: 'pipe' | 'ignore';
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** A process group of its own, so a Ctrl-C at the terminal reaches the child only through the guard. */
  detached?: boolean;
  /** False: neither the guard nor its pipe keeps the owner alive (a finished test run must exit). Default true. */
  keepsOwnerAlive?: boolean;
}

export interface GuardExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface GuardedChild {
  /** The guard shell: its stdout and stderr are the child's. */
  guard: ChildProcess;
  /** The guarded process's own pid. */
  pid: number;
  /** Resolves once the child has exited (the guard exits with it, its signal decoded). */
  exited: Promise<GuardExit>;
  exitCode(): GuardExit | null;
  /** Closes the pipe: the guard sends the stop signal; resolves once the child has exited. */
  stop(): Promise<GuardExit>;
}

/**
 * `$0` the stop signal, `$1` a file for the child's stderr (or empty), then the command.
 * The watcher (a subshell on the pipe, saved as fd 4) does the stopping, and continues a
 * child left paused (SIGSTOP) so the signal takes effect; the guard itself
 * ignores the terminal's signals and waits on the child to pass its status on. The child
 * keeps neither the pipe nor fd 3, so only the guard and the watcher hold them.
 */
const GUARD = `
sig="$0"; log="$1"; shift
exec 4<&0
if [ -n "$log" ]; then "$@" </dev/null 2>>"$log" 3>&- 4<&- &
else "$@" </dev/null 3>&- 4<&- &
fi
pid=$!
echo "$pid" >&3
exec 3>&-
( cat <&4 >/dev/null 2>&1; kill -"$sig" "$pid" 2>/dev/null; kill -CONT "$pid" 2>/dev/null ) >/dev/null 2>&1 &
watcher=$!
exec 4<&-
trap '' INT HUP TERM
wait "$pid"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
`;

/** Starts `command args` under a guard; resolves once the guard has reported the child's pid. */
export async function startGuarded(command: string, args: string[], opts: GuardOptions = {}): Promise<GuardedChild> {
  const shellArgs = ['-c', GUARD, opts.stopSignal ?? 'TERM', opts.stderrFile ?? '', command, ...args];
  const [cmd, cmdArgs] = opts.user
    ? ['runuser', ['-u', opts.user, '--', '/bin/sh', ...shellArgs]]
    : ['/bin/sh', shellArgs];
  const guard = spawn(cmd, cmdArgs, {
    stdio: ['pipe', opts.stdout ?? 'ignore', opts.stderr ?? 'ignore', 'pipe'],
    detached: opts.detached ?? false,
    env: opts.env ?? process.env,
    cwd: opts.cwd,
  });
  // A pipe that broke because the guard is gone is not our error; its exit says what happened.
  guard.stdin!.on('error', () => undefined);
  guard.on('error', () => undefined);
  let exit: GuardExit | null = null;
  const exited = new Promise<GuardExit>((resolve) => {
    guard.once('exit', (code, signal) => {
      // The guard exits with the child's status: 128 + N for a child ended by signal N.
      const bySignal =
        code !== null && code > 128
          ? (Object.entries(constants.signals).find(([, n]) => n === code - 128)?.[0] as NodeJS.Signals | undefined)
          : undefined;
      exit = bySignal ? { code: null, signal: bySignal } : { code, signal };
      guard.stdin!.end(); // the watcher's cat, if still there, ends too
      resolve(exit);
    });
  });
  const keepAlive = opts.keepsOwnerAlive ?? true;
  if (!keepAlive) {
    guard.unref();
    (guard.stdin as unknown as { unref?: () => void }).unref?.();
  }
  const pid = await readPid(guard.stdio[3] as Readable, exited, guard);
  let stopping: Promise<GuardExit> | null = null;
  return {
    guard,
    pid,
    exited,
    exitCode: () => exit,
    stop: () =>
      (stopping ??= (async () => {
        guard.ref(); // until it is gone
        guard.stdin!.end();
        return exited;
      })()),
  };
}

function readPid(fd3: Readable, exited: Promise<GuardExit>, guard: ChildProcess): Promise<number> {
  return new Promise((resolve, reject) => {
    let text = '';
    fd3.setEncoding('utf8');
    fd3.on('error', () => undefined);
    fd3.on('data', (chunk: string) => {
      text += chunk;
      const line = /^(\d+)\n/.exec(text);
      if (line) {
        fd3.destroy();
        resolve(Number(line[1]));
      }
    });
    void exited.then((e) =>
      reject(
        new Error(
          `the guard of ${guard.spawnargs.join(' ').slice(0, 200)} exited (${JSON.stringify(e)}) before it started its child`,
        ),
      ),
    );
  });
}
