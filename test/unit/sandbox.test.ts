import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { agentEnvironment, passEnvProblem } from '../../src/spawner/agent-env.js';
import { LaunchFiles, LaunchFolderError, writePrivateFile } from '../../src/spawner/launch-files.js';
import { bwrapArgs, parseSandboxBind, probeBwrap } from '../../src/spawner/sandbox.js';
import { AgentLauncher } from '../../src/spawner/agent-launcher.js';
import { gitBinds, resolveMounts, SandboxRefusal } from '../../src/spawner/sandbox-paths.js';
import { sandboxPolicy } from '../../src/cli/spawner-sandbox.js';

/**
 * The sandbox's parts on their own: the environment allowlist, the private launch folders
 * (on the real file system: a symlink, another owner, a wide mode), and bwrap itself running
 * a real git in a worktree whose hooks it must not change. The hostile agents through a real
 * spawner are in test/embedded/sandbox.test.ts and test/claude-code/sandbox.test.ts.
 */

const dirs: string[] = [];
const tmp = (prefix = 'beidou-sandbox-unit-') => {
  const d = mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('the environment allowlist', () => {
  const source = {
    PATH: '/usr/bin',
    HOME: '/home/u',
    LC_ALL: 'C.UTF-8',
    PGPASSWORD: 'canary',
    BEIDOU_DATABASE_URL: 'postgres://u:canary@h/db',
    BEIDOU_ADMIN_TOKEN: 'admin',
    BEIDOU_SPAWNER_TOKEN: 'spawner',
    ANTHROPIC_API_KEY: 'sk',
    AWS_SECRET_ACCESS_KEY: 'aws',
    MY_VAR: 'mine',
  };

  it('passes what every process and the runtime need, what --pass-env names, and what the adapter sets; nothing else', () => {
    expect(
      agentEnvironment({
        source,
        runtime: ['ANTHROPIC_*'],
        passEnv: ['MY_VAR'],
        set: { BEIDOU_TOKEN: 't', HOME: '/h' },
      }),
    ).toEqual({
      PATH: '/usr/bin',
      HOME: '/h',
      LC_ALL: 'C.UTF-8',
      ANTHROPIC_API_KEY: 'sk',
      MY_VAR: 'mine',
      BEIDOU_TOKEN: 't',
    });
    expect(agentEnvironment({ source, runtime: [], passEnv: [], set: {} })).toEqual({
      PATH: '/usr/bin',
      HOME: '/home/u',
      LC_ALL: 'C.UTF-8',
    });
  });

  it("never passes the spawner's own keys, even under a PREFIX*; refuses to be told to", () => {
    expect(Object.keys(agentEnvironment({ source, runtime: [], passEnv: ['BEIDOU_*'], set: {} }))).toEqual([
      'PATH',
      'HOME',
      'LC_ALL',
      'BEIDOU_DATABASE_URL',
    ]);
    expect(passEnvProblem('BEIDOU_SPAWNER_TOKEN')).toMatch(/spawner's own key/);
    expect(passEnvProblem('NOT A NAME')).toMatch(/takes an environment variable name/);
    expect(passEnvProblem('*')).toMatch(/takes an environment variable name/);
    expect(passEnvProblem('AWS_*')).toBeNull();
    expect(passEnvProblem('BEIDOU_*')).toMatch(/a secret of the server's/);
    expect(passEnvProblem('PGPASSWORD')).toMatch(/PGPASSWORD, a secret/);
    expect(passEnvProblem('PG*')).toMatch(/a secret of the server's/);
    expect(passEnvProblem('PGHOST')).toBeNull();
  });
});

describe('private launch folders', () => {
  it('are created 0700, with files 0600 written exclusively; a stale folder of the same spawner is emptied', () => {
    const base = tmp();
    const files = LaunchFiles.open('host-1234', base);
    expect(statSync(files.root).mode & 0o777).toBe(0o700);
    expect(statSync(files.dir).mode & 0o777).toBe(0o700);
    const agent = files.agentDir('ag_1');
    expect(statSync(agent.path).mode & 0o777).toBe(0o700);
    const file = agent.write('mcp.json', '{}');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(() => agent.write('mcp.json', 'again')).toThrow(/EEXIST/);
    // A spawner of the same instance starting again finds its dead predecessor's files gone.
    LaunchFiles.open('host-1234', base);
    expect(existsSync(agent.path)).toBe(false);
  });

  it('refuse a folder that is a symlink, not this user’s, or open to others', () => {
    const base = tmp();
    const root = path.join(base, `beidou-${process.getuid!()}`);
    const elsewhere = tmp();
    symlinkSync(elsewhere, root);
    expect(() => LaunchFiles.open('x', base)).toThrow(LaunchFolderError);
    expect(() => LaunchFiles.open('x', base)).toThrow(/is a symlink/);
    rmSync(root);
    mkdirSync(root, { mode: 0o755 });
    chmodSync(root, 0o755);
    expect(() => LaunchFiles.open('x', base)).toThrow(/mode 0755, wider than 0700/);
    chmodSync(root, 0o700);
    if (process.getuid!() === 0) {
      // Made first by another local user.
      chownSync(root, 4242, 4242);
      expect(() => LaunchFiles.open('x', base)).toThrow(/belongs to uid 4242, not to this user/);
      chownSync(root, 0, 0);
    }
    expect(() => LaunchFiles.open('x', base)).not.toThrow();
  });

  it('never write through a symlink planted where a file will be', () => {
    const dir = tmp();
    const target = path.join(tmp(), 'victim');
    writeFileSync(target, 'untouched');
    symlinkSync(target, path.join(dir, 'settings.json'));
    expect(() => writePrivateFile(dir, 'settings.json', '{"hooks":{}}')).toThrow(/EEXIST/);
    expect(readFileSync(target, 'utf8')).toBe('untouched');
  });
});

describe('--sandbox-bind', () => {
  it('is read-write, or read-only with :ro; a path that does not exist is refused', () => {
    const dir = tmp();
    expect(parseSandboxBind(dir)).toEqual({ path: dir, readOnly: false });
    expect(parseSandboxBind(`${dir}:ro`)).toEqual({ path: dir, readOnly: true });
    expect(parseSandboxBind(`${dir}:rw`)).toEqual({ path: dir, readOnly: false });
    expect(() => parseSandboxBind(path.join(dir, 'nope'))).toThrow(/does not exist/);
  });

  it('may show a folder inside --workdir; never the workdir itself, the server home, or a folder holding a spool', () => {
    const root = tmp();
    const home = path.join(root, 'home');
    const workdir = path.join(root, 'agents');
    const spool = path.join(root, 'outer', 'spool');
    for (const d of [home, path.join(workdir, 'ticks'), spool]) mkdirSync(d, { recursive: true });
    const policy = (bind: string) =>
      sandboxPolicy(
        { mode: 'bwrap', bin: 'bwrap', binds: [parseSandboxBind(bind)], passEnv: [] },
        { home, spoolDirs: [spool], launchRoot: path.join(root, 'launch'), workdir, tokenFile: null },
      );
    expect(policy(`${path.join(workdir, 'ticks')}:ro`).binds).toEqual([
      { path: path.join(workdir, 'ticks'), readOnly: true },
    ]);
    expect(() => policy(workdir)).toThrow(/would show .*agents, which the sandbox hides/);
    expect(() => policy(home)).toThrow(/would show .*home, which the sandbox hides/);
    expect(() => policy(path.join(root, 'outer'))).toThrow(/would show .*spool, which the sandbox hides/);
  });
});

describe.skipIf(probeBwrap() !== null)('bwrap', () => {
  const sandboxed = (mounts: ReturnType<typeof resolveMounts>, script: string) =>
    spawnSync('bwrap', bwrapArgs(mounts, ['/bin/sh', '-c', script]), {
      encoding: 'utf8',
      env: { PATH: '/usr/bin:/bin' },
    });

  it('/proc/sys is read-only inside, even for a root spawner: the same host name written back is refused', () => {
    const ws = tmp();
    const mounts = resolveMounts(
      { hide: [], binds: [] },
      { cwd: ws, workspaces: [ws], launchDir: tmp(), credentials: [] },
    );
    const out = sandboxed(
      mounts,
      [
        'h=$(cat /proc/sys/kernel/hostname); echo "$h" > /proc/sys/kernel/hostname 2>&1 && echo hostname-written',
        'cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern 2>&1 && echo core-pattern-written',
        'test -e /proc/sysrq-trigger && { echo s > /proc/sysrq-trigger 2>&1 || true; }; echo done',
      ].join('; '),
    );
    expect(out.stderr).toMatch(/Read-only file system/);
    expect(out.stdout).not.toContain('hostname-written');
    expect(out.stdout).not.toContain('core-pattern-written');
    expect(out.stdout).toContain('done');
  });

  it('a workspace of ~ still hides the hidden paths inside it; a read-only bind inside a workspace stays read-only', () => {
    const home = tmp();
    const launch = tmp();
    mkdirSync(path.join(home, '.beidou'));
    writeFileSync(path.join(home, '.beidou', 'secret'), 'canary-secret');
    writeFileSync(path.join(home, '.pgpass'), 'canary-pgpass');
    mkdirSync(path.join(home, 'reference'));
    const mounts = resolveMounts(
      {
        hide: [path.join(home, '.beidou'), path.join(home, '.pgpass')],
        binds: [{ path: path.join(home, 'reference'), readOnly: true }],
      },
      { cwd: home, workspaces: [home], launchDir: launch, credentials: [] },
    );
    const out = sandboxed(
      mounts,
      `cat .beidou/secret .pgpass 2>&1; touch mine && echo wrote-mine; touch reference/x 2>&1 || echo reference-read-only; touch ${launch}/x 2>&1 || echo launch-read-only`,
    );
    expect(out.stdout).not.toContain('canary');
    expect(out.stdout).toContain('wrote-mine');
    expect(out.stdout).toContain('reference-read-only');
    expect(out.stdout).toContain('launch-read-only');
    expect(existsSync(path.join(home, 'mine'))).toBe(true);
  });

  it('a git worktree commits in the sandbox, but cannot plant a hook or change the config its user will run', () => {
    const repo = tmp();
    const git = (cwd: string, ...args: string[]) =>
      execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', ...args], { cwd, encoding: 'utf8' });
    git(repo, 'init', '-q');
    writeFileSync(path.join(repo, 'a.txt'), 'a');
    git(repo, 'add', '.');
    git(repo, 'commit', '-qm', 'a');
    const worktree = path.join(tmp(), 'wt');
    git(repo, 'worktree', 'add', '-q', '-b', 'agent', worktree);
    writeFileSync(path.join(repo, 'main.txt'), 'canary-main');
    const { binds } = gitBinds(worktree);
    expect(binds).toEqual(
      expect.arrayContaining([
        { path: path.join(repo, '.git'), readOnly: false },
        { path: path.join(repo, '.git', 'hooks'), readOnly: true },
        { path: path.join(repo, '.git', 'config'), readOnly: true },
      ]),
    );
    const mounts = resolveMounts(
      { hide: [path.join(repo, 'main.txt')], binds: [] },
      { cwd: worktree, workspaces: [worktree], launchDir: tmp(), credentials: [], git: binds },
    );
    const out = sandboxed(
      mounts,
      [
        'echo b > b.txt && git add b.txt && git -c user.name=a -c user.email=a@e commit -qm b && echo committed',
        `echo 'touch /tmp/pwned' > ${repo}/.git/hooks/post-checkout 2>&1 || echo hooks-read-only`,
        'git config core.fsmonitor "touch /tmp/pwned" 2>&1 || echo config-read-only',
        `cat ${repo}/main.txt 2>&1; echo main-checkout-hidden`,
      ].join('; '),
    );
    expect(out.stdout).toContain('committed');
    expect(out.stdout).toContain('hooks-read-only');
    expect(out.stdout).toContain('config-read-only');
    expect(out.stdout).toContain('main-checkout-hidden');
    expect(out.stdout).not.toContain('canary-main');
    expect(git(repo, 'log', '--format=%s', 'agent').trim().split('\n')).toEqual(['b', 'a']);
    expect(existsSync(path.join(repo, '.git', 'hooks', 'post-checkout'))).toBe(false);
  });

  const git = (cwd: string, ...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', ...args], { cwd, encoding: 'utf8' });
  const worktreeOf = () => {
    const repo = tmp();
    git(repo, 'init', '-q');
    writeFileSync(path.join(repo, 'a.txt'), 'a');
    git(repo, 'add', '.');
    git(repo, 'commit', '-qm', 'a');
    const worktree = path.join(repo, 'wt');
    git(repo, 'worktree', 'add', '-q', '-b', 'agent', worktree);
    return { repo, worktree };
  };
  const secretHome = () => {
    const home = tmp();
    writeFileSync(path.join(home, 'admin.token'), 'canary-admin');
    return home;
  };
  const launcherHiding = (hide: string[]) =>
    new AgentLauncher({
      sandbox: { bin: 'bwrap', policy: { hide, binds: [] } },
      passEnv: [],
      launchFiles: LaunchFiles.open(`unit-${dirs.length}`, tmp()),
      env: { PATH: '/usr/bin:/bin' },
    });
  const run = (launcher: AgentLauncher, cwd: string, project: string, script: string) =>
    new Promise<string>((resolve) => {
      const child = launcher.spawn({
        dir: launcher.newDir('ag_1'),
        cwd,
        launch: { project_workspace_path: project, agent_id: 'ag_1' },
        command: ['/bin/sh', '-c', script],
        env: { runtime: [], set: {} },
      });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (out += d));
      child.on('close', () => resolve(out));
    });

  it('an agent that rewrites its .git to name the server home gets no bind of it at its restart, nor on a new spawner', async () => {
    const home = secretHome();
    const { repo, worktree } = worktreeOf();
    const launcher = launcherHiding([home]);
    const first = await run(launcher, worktree, repo, `echo "gitdir: ${home}" > .git && echo rewrote`);
    expect(first).toContain('rewrote');
    const again = await run(launcher, worktree, repo, `cat ${home}/admin.token 2>&1; echo done`);
    expect(again).toContain('done');
    expect(again).not.toContain('canary-admin');
    const fresh = await run(launcherHiding([home]), worktree, repo, `cat ${home}/admin.token 2>&1; echo done`);
    expect(fresh).not.toContain('canary-admin');
    expect(gitBinds(worktree, [home]).refused).toMatch(/not point back|overlaps the hidden/);
  });

  it('a git pointer that is a FIFO, a symlink or a folder outside git is refused at once, never read', () => {
    const { worktree, repo } = worktreeOf();
    const commondir = path.join(repo, '.git', 'worktrees', 'wt', 'commondir');
    rmSync(commondir);
    execFileSync('mkfifo', [commondir]);
    expect(gitBinds(worktree).refused).toMatch(/commondir is not a small regular file/);
    rmSync(commondir);
    symlinkSync('/etc/hostname', commondir);
    expect(gitBinds(worktree).refused).toMatch(/commondir is not a small regular file/);
    rmSync(commondir);
    writeFileSync(commondir, '/etc\n');
    expect(gitBinds(worktree).refused).toMatch(/not a git folder/);
  });

  it('a workspace swapped for a symlink to a hidden folder is not started', async () => {
    const home = secretHome();
    const project = tmp();
    const swapped = tmp();
    symlinkSync(home, path.join(swapped, 'tm_X'));
    renameSync(swapped, path.join(project, 'teams'));
    const launcher = launcherHiding([home]);
    await expect(run(launcher, path.join(project, 'teams', 'tm_X'), project, 'cat admin.token')).rejects.toThrow(
      SandboxRefusal,
    );
    const inside = path.join(project, 'inside');
    symlinkSync(home, inside);
    await expect(run(launcher, project, project, 'true')).resolves.toBeDefined();
    expect(() =>
      resolveMounts(
        { hide: [home], binds: [] },
        { cwd: inside, workspaces: [inside], launchDir: tmp(), credentials: [] },
      ),
    ).toThrow(/inside the hidden/);
  });

  it('a home reached through a relative symlink, as the workspace, still hides its server home', () => {
    const base = tmp();
    const realHome = path.join(base, 'a', 'b', 'c', 'home');
    mkdirSync(path.join(realHome, '.beidou'), { recursive: true });
    writeFileSync(path.join(realHome, '.beidou', 'secret'), 'canary-secret');
    symlinkSync(path.join('a', 'b', 'c', 'home'), path.join(base, 'l'));
    const home = path.join(base, 'l');
    const mounts = resolveMounts(
      { hide: [path.join(home, '.beidou')], binds: [] },
      { cwd: home, workspaces: [home], launchDir: tmp(), credentials: [] },
    );
    const out = sandboxed(mounts, 'cat .beidou/secret 2>&1; echo done');
    expect(out.stdout).toContain('done');
    expect(out.stdout).not.toContain('canary');
  });
});
