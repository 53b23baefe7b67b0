import { existsSync, lstatSync, readFileSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Mount, SandboxBind, SandboxMounts } from './sandbox.js';

/**
 * What the sandbox hides and shows, looked up on the disk at each agent start (a home
 * created after the spawner started is hidden from the next agent on). sandbox.ts turns it
 * into bwrap's arguments.
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
  /** `--sandbox-bind`. */
  binds: SandboxBind[];
}

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
  /** What its CLI needs (Claude Code's folder). */
  credentials: SandboxBind[];
}

/** The hide of `p` if it exists (of where it leads, for a symlink; a dangling one shows nothing). */
function hideOf(p: string): Mount[] {
  try {
    const st = lstatSync(p);
    const target = st.isSymbolicLink() ? realpathSync(p) : p;
    return [{ path: target, kind: 'hide', file: !statSync(target).isDirectory() }];
  } catch {
    return [];
  }
}

const real = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
};

/**
 * A repository's own git folder for a workspace: a worktree's `.git` file names a folder in
 * the main repository's `.git`, which git writes (objects, refs, the worktree's index), so it
 * is bound read-write. Its `hooks` and `config` stay read-only, in every repository a
 * workspace holds: from there a planted hook or `core.fsmonitor` would run outside the
 * sandbox the next time the user runs git.
 */
export function gitBinds(workspace: string): SandboxBind[] {
  const dotGit = path.join(workspace, '.git');
  let common: string | null = null;
  try {
    const st = lstatSync(dotGit);
    if (st.isDirectory()) common = dotGit;
    else if (st.isFile()) {
      const m = /^gitdir:\s*(.+)$/m.exec(readFileSync(dotGit, 'utf8'));
      if (m) {
        const gitdir = path.resolve(workspace, m[1]!.trim());
        const commondir = path.join(gitdir, 'commondir');
        common = existsSync(commondir) ? path.resolve(gitdir, readFileSync(commondir, 'utf8').trim()) : gitdir;
      }
    }
  } catch {
    return [];
  }
  if (!common || !existsSync(common)) return [];
  const binds: SandboxBind[] = common === dotGit ? [] : [{ path: real(common), readOnly: false }];
  for (const guarded of ['hooks', 'config'])
    if (existsSync(path.join(common, guarded))) binds.push({ path: real(path.join(common, guarded)), readOnly: true });
  return binds;
}

/** Private folders: each exists on a Debian system, but only what exists can be mounted over. */
const PRIVATE_DIRS = ['/tmp', '/var/tmp', '/run/user'];

/** The mounts of one agent process under `policy`, looked up now. */
export function resolveMounts(policy: SandboxPolicy, agent: AgentPlaces): SandboxMounts {
  const cwd = real(agent.cwd);
  const workspaces = [...new Set([...agent.workspaces.filter((w) => existsSync(w)).map(real), cwd])];
  const bind = (b: SandboxBind): Mount => ({ path: real(b.path), kind: b.readOnly ? 'ro' : 'rw' });
  const mounts: Mount[] = [
    ...PRIVATE_DIRS.flatMap(hideOf).filter((m) => !m.file),
    ...policy.hide.flatMap(hideOf),
    ...workspaces.map((w) => bind({ path: w, readOnly: false })),
    ...workspaces.flatMap(gitBinds).map(bind),
    ...agent.credentials.filter((c) => existsSync(c.path)).map(bind),
    ...policy.binds.map(bind),
    bind({ path: agent.launchDir, readOnly: true }),
  ];
  return { mounts, cwd };
}
