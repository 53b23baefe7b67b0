import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import type { LaunchCommand } from '../protocol/spawner.js';
import type { Logger } from '../util/logger.js';
import { agentEnvironment } from './agent-env.js';
import type { AgentLaunchDir, LaunchFiles } from './launch-files.js';
import { bwrapArgs, type SandboxBind } from './sandbox.js';
import { gitBinds, real, resolveMounts, SandboxRefusal, type SandboxPolicy, within } from './sandbox-paths.js';

/**
 * How every adapter starts an agent process: in its own launch folder (launch-files.ts),
 * with the allowlisted environment (agent-env.ts), inside the sandbox unless the spawner
 * runs with `--sandbox none`, detached (its own process group: the supervisor's kill ends
 * everything it started). The launch folder is removed when the process ends.
 */

export interface LauncherOptions {
  /** null: `--sandbox none`. */
  sandbox: { bin: string; policy: SandboxPolicy } | null;
  /** `--pass-env` names. */
  passEnv: readonly string[];
  launchFiles: LaunchFiles;
  /** The spawner's environment (what the allowlist reads from). */
  env?: NodeJS.ProcessEnv;
  /** The spawner's spool folder (hidden): where an agent's runtime keeps its own state across processes. */
  stateDir?: string;
  /** Where a git folder left unbound is said. */
  logger?: Pick<Logger, 'warn'>;
}

export interface AgentSpawn {
  dir: AgentLaunchDir;
  cwd: string;
  launch: Pick<LaunchCommand, 'project_workspace_path' | 'agent_id'>;
  /** The program and its arguments (a shell line is `/bin/sh -c LINE`). */
  command: string[];
  /** The runtime's allowlist, and what the adapter sets. */
  env: { runtime: readonly string[]; set: Record<string, string> };
  /** What the runtime's CLI needs in the sandbox (Claude Code's folder). */
  credentials?: SandboxBind[];
}

/** The private temporary folder inside the sandbox. */
const SANDBOX_TMP = '/tmp';

export class AgentLauncher {
  /** Each agent's git binds, looked up at its first launch here: its `.git` is its own to rewrite after. */
  private readonly gitCache = new Map<string, SandboxBind[]>();

  constructor(private readonly opts: LauncherOptions) {}

  /** Whether agents run in the bwrap sandbox. */
  get sandboxed(): boolean {
    return this.opts.sandbox !== null;
  }

  /** Where agents' runtime state is kept (`<spool>`); a sandboxed spawner is always given one. */
  get stateDir(): string {
    if (!this.opts.stateDir) throw new Error('a sandboxed launcher needs the spool folder for its agents state');
    return this.opts.stateDir;
  }

  get spawnerEnv(): NodeJS.ProcessEnv {
    return this.opts.env ?? process.env;
  }

  /** A fresh launch folder for one process of `agentId`. */
  newDir(agentId: string): AgentLaunchDir {
    return this.opts.launchFiles.agentDir(agentId);
  }

  spawn(req: AgentSpawn): ChildProcessWithoutNullStreams {
    const env = agentEnvironment({
      source: this.spawnerEnv,
      runtime: req.env.runtime,
      passEnv: this.opts.passEnv,
      set: { ...req.env.set, ...(this.opts.sandbox ? { TMPDIR: SANDBOX_TMP } : {}) },
    });
    let child: ChildProcessWithoutNullStreams;
    try {
      const [file, ...args] = this.opts.sandbox
        ? [this.opts.sandbox.bin, ...bwrapArgs(this.mounts(req), req.command)]
        : req.command;
      child = spawn(file!, args, { cwd: req.cwd, env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    } catch (err) {
      req.dir.remove();
      throw err;
    }
    const cleanUp = () => req.dir.remove();
    child.once('close', cleanUp);
    child.once('error', cleanUp);
    return child;
  }

  private mounts(req: AgentSpawn) {
    const policy = this.opts.sandbox!.policy;
    // An agent whose workspace is inside its task's shared workspace (a team's, under the
    // project's) gets the shared one: the skills integrate and write artifacts there. Compared
    // at real paths: a folder swapped for a symlink (by another agent) leads nowhere else.
    const project = real(req.launch.project_workspace_path);
    const cwd = real(req.cwd);
    const shared = within(cwd, project);
    if (!shared && !(policy.workdir && within(cwd, real(policy.workdir))))
      throw new SandboxRefusal(
        `the workspace ${req.cwd} leads to ${cwd}, outside its project's ${project}: not started in the sandbox`,
      );
    const workspace = shared ? project : cwd;
    let git = this.gitCache.get(req.launch.agent_id);
    if (!git) {
      git = [];
      for (const w of new Set([workspace, cwd])) {
        const found = gitBinds(w, policy.hide.map(real));
        if (found.refused)
          this.opts.logger?.warn(
            { agent_id: req.launch.agent_id, why: found.refused },
            'git folder not bound in the sandbox',
          );
        git.push(...found.binds);
      }
      this.gitCache.set(req.launch.agent_id, git);
    }
    return resolveMounts(policy, {
      cwd,
      workspaces: [workspace],
      launchDir: req.dir.path,
      credentials: req.credentials ?? [],
      git,
    });
  }
}
