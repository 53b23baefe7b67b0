import { spawnSync } from 'node:child_process';
import { existsSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * The sandbox an agent process runs in (`beidou spawner --sandbox bwrap|none`; docs/security.md,
 * "Agents are untrusted"): Debian's bubblewrap, with the whole file system read-only, a
 * private /tmp, the spawner's secrets hidden, a PID namespace of its own (no other process in
 * /proc) and no capabilities; the agent's workspace read-write, its own launch folder
 * read-only, and what its CLI needs. The network is shared (the model API, the server).
 *
 * This file decides the bwrap command line from paths already looked up (sandbox-paths.ts
 * looks at the disk); `probeBwrap` is the one check, once at start, that bwrap runs here.
 */

export type SandboxMode = 'bwrap' | 'none';

export interface SandboxBind {
  path: string;
  readOnly: boolean;
}

/** What one agent process is given, every path absolute and existing (sandbox-paths.ts resolves them). */
export interface SandboxMounts {
  /**
   * Over the read-only root: `hide` puts an empty tmpfs over a folder (/dev/null over a file),
   * `rw` and `ro` bind a path back. The most specific path wins (a workspace under the hidden
   * server home shows; the server home inside a workspace of `~` stays hidden); on the same
   * path a bind wins over a hide (Claude Code's folder, hidden from every other runtime).
   */
  mounts: Mount[];
  cwd: string;
}

export interface Mount {
  path: string;
  kind: 'hide' | 'rw' | 'ro';
  /** For a hide: a folder gets a tmpfs, a file /dev/null. */
  file?: boolean;
}

/**
 * The bwrap arguments running `command` in `mounts`: the read-only root, a fresh /dev and a
 * /proc of its own PID namespace, then the mounts shallowest first (hides before binds on the
 * same path), so each lands over what it is inside of.
 *
 * No `--new-session`: the spawner starts bwrap in a session and process group of its own with
 * no terminal (so no TIOCSTI), and its kill of the group must reach every process inside.
 * `--die-with-parent`: bwrap dies with the spawner, and the PID namespace with bwrap, so no
 * agent process outlives either (a `setsid` escapee included). `--cap-drop ALL`: a spawner
 * running as root must not hand the agent the capabilities to unmount what hides the keys.
 * /proc/sys read-only and the kernel's trigger files masked: a fresh /proc is writable where
 * the spawner's user may write (root: `kernel.core_pattern` runs a program as host root).
 * `--unshare-uts`: the host name is the agent's own.
 */
export function bwrapArgs(mounts: SandboxMounts, command: string[]): string[] {
  const args = ['--die-with-parent', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--cap-drop', 'ALL'];
  args.push('--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--ro-bind', '/proc/sys', '/proc/sys');
  // bwrap cannot create a mount point in /proc: only what this kernel has is masked.
  for (const f of PROC_MASKED) if (existsSync(f)) args.push('--ro-bind', '/dev/null', f);
  // Paths are real (sandbox-paths.ts), so depth orders by containment: what holds a path lands before it.
  const order = (m: Mount) => depth(m.path) * 2 + (m.kind === 'hide' ? 0 : 1);
  const sorted = [...mounts.mounts].sort((a, b) => order(a) - order(b));
  sorted.forEach((m, i) => {
    const over = m.kind === 'hide' && sorted.slice(i + 1).find((b) => b.kind !== 'hide' && holds(b.path, m.path));
    if (over) throw new SandboxBindError(`the sandbox would bind ${over.path} over the hidden ${m.path}`);
  });
  for (const m of sorted) {
    if (m.kind === 'hide') args.push(...(m.file ? ['--ro-bind', '/dev/null', m.path] : ['--tmpfs', m.path]));
    else args.push(m.kind === 'ro' ? '--ro-bind' : '--bind', m.path, m.path);
  }
  args.push('--chdir', mounts.cwd, '--', ...command);
  return args;
}

/** Writable /proc files outside /proc/sys that act on the host kernel. */
const PROC_MASKED = ['/proc/sysrq-trigger', '/proc/kcore', '/proc/timer_list', '/proc/kallsyms'];

/** Whether `dir` strictly holds `p`. */
const holds = (dir: string, p: string) => p !== dir && p.startsWith(dir.endsWith(path.sep) ? dir : dir + path.sep);

const depth = (p: string) => p.split(path.sep).filter(Boolean).length;

export class SandboxBindError extends Error {}

/**
 * `--sandbox-bind DIR` (read-write) or `DIR:ro` (read-only; `DIR:rw` says read-write
 * explicitly): a folder or file the sandbox shows the agents, resolved from the current folder.
 */
export function parseSandboxBind(text: string, cwd = process.cwd()): SandboxBind {
  const m = /^(.*):(ro|rw)$/.exec(text);
  const given = m ? m[1]! : text;
  if (!given)
    throw new SandboxBindError(`--sandbox-bind needs a folder, e.g. --sandbox-bind ~/data:ro (got "${text}")`);
  let resolved = path.resolve(cwd, given);
  try {
    // Resolved once, at the spawner's start: a symlink changed later moves no agent's bind.
    resolved = realpathSync(resolved);
    statSync(resolved);
  } catch {
    throw new SandboxBindError(`--sandbox-bind ${text}: ${resolved} does not exist`);
  }
  return { path: resolved, readOnly: m?.[2] === 'ro' };
}

/**
 * Whether bwrap runs here with what the sandbox uses (a PID namespace and its /proc, no
 * capabilities): null if it does, else one line saying why not. Run once at start.
 */
export function probeBwrap(bin = 'bwrap'): string | null {
  if (process.platform !== 'linux') return `bubblewrap runs on Linux only (this is ${process.platform})`;
  const probe = ['--die-with-parent', '--unshare-pid', '--unshare-uts', '--cap-drop', 'ALL', '--ro-bind', '/', '/'];
  probe.push('--dev', '/dev', '--proc', '/proc', '--tmpfs', '/tmp', 'true');
  const run = spawnSync(bin, probe, { encoding: 'utf8', timeout: 15_000, stdio: ['ignore', 'ignore', 'pipe'] });
  if (run.error) {
    const code = (run.error as NodeJS.ErrnoException).code;
    return code === 'ENOENT' ? `${bin} is not installed` : `${bin} could not run (${run.error.message})`;
  }
  if (run.status === 0) return null;
  const last = (run.stderr ?? '').trim().split('\n').at(-1) ?? '';
  return `${bin} fails here (${last || `exit ${run.status ?? run.signal}`})`;
}
