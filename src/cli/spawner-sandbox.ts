import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultHome } from '../config.js';
import { passEnvProblem } from '../spawner/agent-env.js';
import { parseSandboxBind, probeBwrap, type SandboxBind, SandboxBindError } from '../spawner/sandbox.js';
import { HOME_CREDENTIALS, hiddenPaths, real, type SandboxPolicy, within } from '../spawner/sandbox-paths.js';
import { CliError } from './client.js';

/**
 * `beidou spawner --sandbox bwrap|none`, `--sandbox-bind`, `--pass-env` and `--token-file`:
 * what the flags ask for, checked before the spawner serves anyone (docs/security.md,
 * "Agents are untrusted"). A sandbox that cannot run refuses the start, asked for or by
 * default: agents never run unsandboxed because bwrap happened to be missing.
 */

export type SandboxChoice =
  | { mode: 'bwrap'; bin: string; binds: SandboxBind[]; passEnv: string[] }
  | { mode: 'none'; warning: string; passEnv: string[] };

const INSTALL = 'install bubblewrap (apt-get install bubblewrap)';

export function resolveSandbox(opts: { sandbox?: string; sandboxBind?: string[]; passEnv?: string[] }): SandboxChoice {
  const passEnv = opts.passEnv ?? [];
  for (const name of passEnv) {
    const problem = passEnvProblem(name);
    if (problem) throw new CliError(problem, 2);
  }
  const asked = opts.sandbox;
  if (asked !== undefined && asked !== 'bwrap' && asked !== 'none')
    throw new CliError(`--sandbox must be bwrap or none (got "${asked}")`, 2);
  const mode = asked ?? (process.platform === 'linux' ? 'bwrap' : 'none');
  if (mode === 'none') {
    const user = os.userInfo().username;
    const why = asked ? '--sandbox none' : `no sandbox on ${process.platform}`;
    return {
      mode,
      passEnv,
      warning: `${why}: agents run as ${user} with no sandbox and can read everything ${user} can, the server's keys in ${defaultHome()} included`,
    };
  }
  let binds: SandboxBind[];
  try {
    binds = (opts.sandboxBind ?? []).map((b) => parseSandboxBind(b));
  } catch (err) {
    if (err instanceof SandboxBindError) throw new CliError(err.message, 2);
    throw err;
  }
  const bin = 'bwrap';
  const problem = probeBwrap(bin);
  if (problem)
    throw new CliError(
      asked
        ? `--sandbox bwrap: ${problem}; ${INSTALL}, or pass --sandbox none to run agents unsandboxed`
        : `agents run in a bubblewrap sandbox by default and ${problem}: ${INSTALL}, or pass --sandbox none to run agents unsandboxed`,
      2,
    );
  return { mode, bin, binds, passEnv };
}

/** What every agent of this spawner is kept from, and what `--sandbox-bind` shows it. */
export function sandboxPolicy(
  choice: Extract<SandboxChoice, { mode: 'bwrap' }>,
  where: {
    home: string | undefined;
    spoolDirs: string[];
    launchRoot: string;
    workdir: string | null;
    tokenFile: string | null;
  },
): SandboxPolicy {
  const userHome = process.env.HOME || os.homedir();
  const serverHomes = [
    ...(where.home ? [where.home] : []),
    defaultHome(),
    path.join(os.homedir(), '.beidou'),
    path.join(userHome, '.beidou'),
  ];
  const hide = hiddenPaths({
    serverHomes,
    spoolDirs: where.spoolDirs,
    launchRoot: where.launchRoot,
    workdir: where.workdir,
    tokenFile: where.tokenFile,
    userHome,
  });
  // A --sandbox-bind may put a credential back (~/.ssh:ro), or show a folder inside --workdir
  // (one all agents share, as their own workspaces are shown); never the server's keys or a spool folder.
  const credentials = new Set(HOME_CREDENTIALS.map((c) => path.join(userHome, c)));
  const kept = hide.filter((h) => !credentials.has(h)).map(real);
  const workdir = where.workdir ? real(where.workdir) : null;
  const insideWorkdir = (p: string, h: string) => h === workdir && p !== workdir;
  for (const b of choice.binds) {
    const clash = kept.find((h) => (within(b.path, h) && !insideWorkdir(b.path, h)) || within(h, b.path));
    if (clash)
      throw new CliError(`--sandbox-bind ${b.path} would show ${clash}, which the sandbox hides from every agent`, 2);
  }
  return { hide: [...new Set(hide)], binds: choice.binds, workdir: where.workdir };
}

/** `--token-file F`: the spawner token, read once (argv is visible to every local user; a file need not be). */
export function readTokenFile(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new CliError(`--token-file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, 2);
  }
  const token = text.trim();
  if (!token) throw new CliError(`--token-file ${file} is empty`, 2);
  return token;
}
