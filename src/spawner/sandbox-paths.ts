import { existsSync, lstatSync, readFileSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Hidden, SandboxBind, SandboxMounts } from './sandbox.js';

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

/** The path itself and, when it is a symlink, where it leads: both are hidden. */
function lookup(p: string): Hidden[] {
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(p);
  } catch {
    return [];
  }
  if (!st.isSymbolicLink()) return [{ path: p, kind: st.isDirectory() ? 'dir' : 'file' }];
  try {
    const real = realpathSync(p);
    return [{ path: real, kind: statSync(real).isDirectory() ? 'dir' : 'file' }];
  } catch {
    return []; // a dangling link shows nothing
  }
}

const real = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
};

const inside = (child: string, parent: string) => {
  const rel = path.relative(parent, child);
  return rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
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
  const privateDirs = PRIVATE_DIRS.filter((d) => lookup(d)[0]?.kind === 'dir');
  const hide = policy.hide.flatMap(lookup);
  const workspaces = agent.workspaces.filter((w) => existsSync(w)).map(real);
  const rehide = hide.filter((h) => workspaces.some((w) => inside(h.path, w)));
  const cwd = real(agent.cwd);
  const binds: SandboxBind[] = [
    { path: cwd, readOnly: false },
    ...[...new Set([...workspaces, cwd])].flatMap(gitBinds),
    ...agent.credentials.filter((c) => existsSync(c.path)).map((c) => ({ ...c, path: real(c.path) })),
    ...policy.binds.map((b) => ({ ...b, path: real(b.path) })),
    { path: real(agent.launchDir), readOnly: true },
  ];
  return { privateDirs, hide, workspaces, rehide, binds, cwd };
}
