import { loadConfig } from '../config.js';

/**
 * Where to look, printed by both demos (`npm run demo`, with or without `--chaos`): with
 * `--slow`, the live dashboard; with `--keep`, the exact commands that serve the kept home
 * again; otherwise how to get either.
 */

/** `--slow`: the dashboard of the running demo, with the token to sign in with. */
export function watchLines(url: string, adminToken: string): string[] {
  return [`dashboard ${url}/ (sign in with the admin token ${adminToken})`];
}

/** The address `beidou serve --home DIR` would listen on, from the same settings it reads. */
function servedAt(home: string): string {
  try {
    const { host, port } = loadConfig({ home }, process.env);
    return `http://${host.includes(':') ? `[${host}]` : host}:${port}/`;
  } catch {
    return 'http://127.0.0.1:7777/';
  }
}

/** What comes after the story: the kept home and how to browse it, or how to keep or watch one. */
export function nextLines(opts: { home: string; kept: boolean; taskId: string; chaos?: boolean }): string[] {
  if (!opts.kept) {
    const demo = opts.chaos ? 'npm run demo -- --chaos' : 'npm run demo --';
    return [
      'next',
      `  this run's home is deleted; keep it to browse afterwards:  ${demo} --keep`,
      `  watch a run live in the dashboard (one step every 1.5 s):  ${demo} --slow`,
      opts.chaos
        ? '  the same task without faults:                               npm run demo'
        : '  the same task while its processes are killed:               npm run demo -- --chaos',
      '  what each command and event means: docs/cli.md, docs/events.md',
    ];
  }
  const url = servedAt(opts.home);
  return [
    'next',
    `  the home is kept: ${opts.home}`,
    `  browse it:   beidou serve --home ${opts.home}`,
    `  then open:   ${url} and sign in with the token that beidou token --home ${opts.home} prints`,
    `  or read it:  beidou tail ${opts.taskId} --since 0 --no-follow --home ${opts.home}`,
    '  (beidou is node dist/cli/main.js in this checkout; see docs/cli.md)',
  ];
}
