import {
  closeSync,
  constants,
  existsSync,
  fstatSync,
  lstatSync,
  openSync,
  readSync,
  realpathSync,
  statSync,
} from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Mount, SandboxBind, SandboxMounts } from './sandbox.js';

/**
 * What the sandbox hides and shows, looked up on the disk at each agent start (a home
 * created after the spawner started is hidden from the next agent on). sandbox.ts turns it
 * into bwrap's arguments. Every path is taken at its real path (every symlink on the way
 * resolved) before it is compared or mounted; nothing an agent wrote picks a mount unchecked.
 */

/** Credentials kept in a home folder that no agent's runtime needs: hidden unless a runtime or `--sandbox-bind` puts one back. */
export const HOME_CREDENTIALS: readonly string[] = [
  '.ssh',
  '.gnupg',
  '.aws',
  '.azure',
  '.config/gcloud',
  '.kube',
  '.docker',
  '.pgpass',
  '.netrc',
  '.npmrc',
  '.pypirc',
  '.git-credentials',
  '.config/gh',
  '.claude',
  '.claude.json',
  '.codex',
  '.gemini',
];

/** What a spawner hides from every agent, known at its start. */
export interface SandboxPolicy {
  /** Hidden when they exist: the server's home, the spool folders, the launch folders, the workdir, the token file, credentials. */
  hide: string[];
  /** `--sandbox-bind`, resolved at the spawner's start. */
  binds: SandboxBind[];
  /** `--workdir`: agents' workspaces may be in it (it is hidden otherwise). */
  workdir?: string | null;
}

/** A launch the sandbox refuses: the agent would be shown a hidden path, or a folder it does not own. */
export class SandboxRefusal extends Error {}

export interface HiddenSources {
  /** The server's home as this spawner knows it (`--home`, `BEIDOU_HOME`, `~/.beidou`). */
  serverHomes: string[];
  /** The spool root (`BEIDOU_SPAWNER_HOME`, `~/.beidou-spawner`) and this spawner's spool folder. */
  spoolDirs: string[];
  /** `beidou-<uid>`, every spawner's launch folders. */
  launchRoot: string;
  workdir: string | null;
  tokenFile: string | null;
  /** The spawner user's home, for HOME_CREDENTIALS. */
  userHome: string;
}

export function hiddenPaths(src: HiddenSources): string[] {
  return [
    ...src.serverHomes,
    ...src.spoolDirs,
    src.launchRoot,
    ...(src.workdir ? [src.workdir] : []),
    ...(src.tokenFile ? [src.tokenFile] : []),
    ...HOME_CREDENTIALS.map((p) => path.join(src.userHome, p)),
  ].map((p) => path.resolve(p));
}

/** One agent process: where it runs and what it is given. */
export interface AgentPlaces {
  cwd: string;
  /** Read-write: its workspace, or its task's shared workspace holding it. */
  workspaces: string[];
  /** Its launch folder (read-only inside). */
  launchDir: string;
  /** What its CLI needs (its own Claude Code folder). */
  credentials: SandboxBind[];
  /** Its git binds (gitBinds, looked up once per agent). */
  git?: SandboxBind[];
}

/** `p`'s real path, or its absolute path when it does not exist. */
export const real = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
};

/** Whether `p` is `dir` or inside it. */
export const within = (p: string, dir: string) => {
  const rel = path.relative(dir, p);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
};

/** The hide of `p` at its real path, if it exists (a dangling symlink shows nothing). */
function hideOf(p: string): Mount[] {
  try {
    const target = realpathSync(p);
    return [{ path: target, kind: 'hide', file: !statSync(target).isDirectory() }];
  } catch {
    return [];
  }
}

/** Bigger than any `.git` pointer or `commondir` git writes. */
const MAX_POINTER_BYTES = 4096;

/**
 * A small regular file's text, or null: never through a symlink, never a FIFO or device
 * (opened non-blocking, checked after open), never more than MAX_POINTER_BYTES.
 */
export function readPointer(file: string): string | null {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0));
  } catch {
    return null;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.size > MAX_POINTER_BYTES) return null;
    const buf = Buffer.alloc(st.size);
    const n = readSync(fd, buf, 0, st.size, 0);
    return buf.subarray(0, n).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** A folder at its own real path (no symlink anywhere on the way). */
const realDir = (p: string) => {
  try {
    return lstatSync(p).isDirectory() && realpathSync(p) === path.resolve(p);
  } catch {
    return false;
  }
};

export interface GitBinds {
  binds: SandboxBind[];
  /** Why a `.git` was found but nothing is bound, for the log. */
  refused: string | null;
}

/**
 * A repository's own git folder for a workspace: a worktree's `.git` file names a folder in
 * the main repository's `.git`, which git writes (objects, refs, the worktree's index), so it
 * is bound read-write. Its `hooks` and `config` stay read-only, in every repository a
 * workspace holds: from there a planted hook or `core.fsmonitor` would run outside the
 * sandbox the next time the user runs git.
 *
 * The `.git` file and `commondir` are the agent's to write, so the spawner looks them up once
 * per agent (agent-launcher.ts) and believes them only when they name a real git folder
 * outside every hidden path whose worktree entry points back at this workspace (git's own
 * back-link, which the agent cannot plant outside what it can write).
 */
export function gitBinds(workspace: string, hidden: readonly string[] = []): GitBinds {
  const none = (refused: string | null): GitBinds => ({ binds: [], refused });
  const dotGit = path.join(workspace, '.git');
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(dotGit);
  } catch {
    return none(null);
  }
  let common: string;
  if (st.isDirectory()) common = dotGit;
  else if (!st.isFile()) return none(`${dotGit} is neither a folder nor a regular file`);
  else {
    const m = /^gitdir:\s*(.+)$/m.exec(readPointer(dotGit) ?? '');
    if (!m) return none(`${dotGit} is not a readable "gitdir:" file`);
    const gitdir = path.resolve(workspace, m[1]!.trim());
    if (!realDir(gitdir)) return none(`${gitdir} (named by ${dotGit}) is not a real folder`);
    const back = readPointer(path.join(gitdir, 'gitdir'))?.trim();
    if (!back || real(path.resolve(gitdir, back)) !== real(dotGit))
      return none(`${gitdir} does not point back at ${dotGit}`);
    const commondir = path.join(gitdir, 'commondir');
    const pointer = existsSync(commondir) ? readPointer(commondir) : '.';
    if (pointer === null) return none(`${commondir} is not a small regular file`);
    common = path.resolve(gitdir, pointer.trim());
  }
  if (!realDir(common)) return none(`the git folder ${common} is not a real folder`);
  if (!existsSync(path.join(common, 'objects')) || !existsSync(path.join(common, 'HEAD')))
    return none(`${common} is not a git folder`);
  const clash = hidden.find((h) => within(common, h) || within(h, common));
  if (clash && !within(common, workspace)) return none(`the git folder ${common} overlaps the hidden ${clash}`);
  const binds: SandboxBind[] = common === dotGit ? [] : [{ path: common, readOnly: false }];
  for (const guarded of ['hooks', 'config'])
    if (existsSync(path.join(common, guarded))) binds.push({ path: real(path.join(common, guarded)), readOnly: true });
  return { binds, refused: null };
}

/** Private folders: each exists on a Debian system, but only what exists can be mounted over. */
const PRIVATE_DIRS = ['/tmp', '/var/tmp', '/run/user'];

/**
 * What the agent's runtime itself runs from, shown read-only when a private folder would hide
 * it (a checkout or install under /tmp): this package (the hook, the scripted agents, a bundled
 * CLI) and the Node binary's folder. Never when it lies inside a hidden path.
 */
const RUNTIME_DIRS = [
  path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..'),
  path.dirname(process.execPath),
];

function runtimeBinds(hides: readonly Mount[]): Mount[] {
  return [...new Set(RUNTIME_DIRS.filter((d) => existsSync(d)).map(real))]
    .filter((d) => PRIVATE_DIRS.some((p) => within(d, p)) && !hides.some((h) => within(d, h.path)))
    .map((d) => ({ path: d, kind: 'ro' as const }));
}

/**
 * The mounts of one agent process under `policy`, looked up now, at real paths. Refused
 * (SandboxRefusal) when a workspace or git folder is inside a hidden path (but for a workspace
 * in `--workdir`). A hidden path inside a bind is hidden again over it (sandbox.ts orders
 * mounts by containment).
 */
export function resolveMounts(policy: SandboxPolicy, agent: AgentPlaces): SandboxMounts {
  const cwd = real(agent.cwd);
  const workspaces = [...new Set([...agent.workspaces.filter((w) => existsSync(w)).map(real), cwd])];
  const bind = (b: SandboxBind): Mount => ({ path: real(b.path), kind: b.readOnly ? 'ro' : 'rw' });
  const hides = policy.hide.flatMap(hideOf);
  const workdir = policy.workdir ? real(policy.workdir) : null;
  const shown = [...workspaces.map((w) => bind({ path: w, readOnly: false })), ...(agent.git ?? []).map(bind)];
  // --sandbox-bind was checked at the spawner's start (spawner-sandbox.ts): a user may put a credential back.
  for (const m of shown) {
    const h = hides.find((h) => within(m.path, h.path) && !(h.path === workdir && m.path !== workdir));
    if (h) throw new SandboxRefusal(`the sandbox would show ${m.path}, inside the hidden ${h.path}`);
  }
  const mounts: Mount[] = [
    ...PRIVATE_DIRS.flatMap(hideOf).filter((m) => !m.file),
    ...runtimeBinds(hides),
    ...hides,
    ...shown,
    ...agent.credentials.filter((c) => existsSync(c.path)).map(bind),
    ...policy.binds.map(bind),
    bind({ path: agent.launchDir, readOnly: true }),
  ];
  return { mounts, cwd };
}
