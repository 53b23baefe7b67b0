import { spawn, type ChildProcess } from 'node:child_process';
import type { Adapter } from './adapter.js';

/**
 * Agents die with their spawner, SIGKILL included: a spawner killed outright must leave no
 * orphan acting as an agent that another spawner now runs.
 *
 * Closing an agent's stdin is the first line (the scripted agent and Claude Code's
 * stream-json input end on EOF), but an agent busy in a tool call, or one that ignores its
 * input, would live on. Node has no `prctl(PR_SET_PDEATHSIG)`, so each spawner starts one
 * small shell, the reaper, in a process group of its own, and tells it over a pipe which
 * agent process groups are alive (`+pgid`, `-pgid`). The kernel closes that pipe when the
 * spawner dies, however it dies: the reaper reads EOF at once (no polling, no pid that
 * could be reused) and sends SIGTERM to every group still listed, then SIGKILL after
 * `KILL_AFTER_S` to any group with a process left. One `sh` per spawner, idle on
 * a read; agent command lines are untouched, so it serves every adapter alike.
 */

const KILL_AFTER_S = 3;

const SCRIPT = `
trap '' INT HUP TERM
live=' '
while IFS= read -r line; do
  case "$line" in
    +*) live="$live\${line#+} " ;;
    -*) keep=' '; for g in $live; do [ "$g" = "\${line#-}" ] || keep="$keep$g "; done; live=$keep ;;
  esac
done
[ "$live" = ' ' ] && exit 0
for g in $live; do kill -TERM -"$g" 2>/dev/null; done
n=0
while [ $n -lt ${KILL_AFTER_S} ]; do
  alive=''
  for g in $live; do kill -0 -"$g" 2>/dev/null && alive=1; done
  [ -z "$alive" ] && exit 0
  sleep 1
  n=$((n + 1))
done
for g in $live; do kill -KILL -"$g" 2>/dev/null; done
`;

export class Reaper {
  private child: ChildProcess | null = null;

  /** Starts the reaper shell; without a shell the spawner runs on, with stdin EOF as the only line. */
  start(onError: (err: Error) => void): void {
    if (this.child) return;
    const child = spawn('/bin/sh', ['-c', SCRIPT], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
    child.on('error', onError);
    child.stdin!.on('error', () => undefined);
    // It must never keep the spawner alive, nor die with the spawner's process group (Ctrl-C).
    child.unref();
    (child.stdin as unknown as { unref?: () => void }).unref?.();
    this.child = child;
  }

  watch(pgid: number): void {
    this.write(`+${pgid}`);
  }

  unwatch(pgid: number): void {
    this.write(`-${pgid}`);
  }

  /** A clean stop: the spawner ended its agents itself; the reaper exits on EOF. */
  stop(): void {
    this.child?.stdin?.end();
    this.child = null;
  }

  private write(line: string): void {
    const stdin = this.child?.stdin;
    if (stdin && !stdin.destroyed && stdin.writable) stdin.write(`${line}\n`);
  }
}

/**
 * The adapter with every agent process registered with the reaper while it lives. Agents
 * are spawned detached, so an agent's pid is its process group's id.
 */
export function reaped(adapter: Adapter, reaper: Reaper): Adapter {
  return {
    name: adapter.name,
    start(spec, hooks) {
      const proc = adapter.start(spec, hooks);
      const pid = proc.pid;
      if (pid) {
        reaper.watch(pid);
        void proc.exited.then(() => reaper.unwatch(pid));
      }
      return proc;
    },
  };
}
