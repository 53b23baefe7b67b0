import { adminToken, api, CliError, printJson, type ClientOptions } from './client.js';

/**
 * `beidou token`: the admin token; `--agent ID` a fresh agent token (`--revoke-previous`: its
 * earlier ones refused); `--spawner` a spawner token (`--task T`, repeated: limited to those
 * tasks). `beidou token revoke-spawners`: every spawner token minted until now refused.
 */

export interface TokenOptions extends ClientOptions {
  agent?: string;
  revokePrevious?: boolean;
  spawner?: boolean;
  task?: string[];
}

export async function token(opts: TokenOptions): Promise<void> {
  if (opts.agent && opts.spawner) throw new CliError('give either --agent ID or --spawner, not both', 2);
  if (opts.revokePrevious && !opts.agent)
    throw new CliError('--revoke-previous goes with --agent ID (the agent whose earlier tokens stop working)', 2);
  if (opts.task && !opts.spawner)
    throw new CliError('--task limits a spawner token to a task: give it with --spawner', 2);
  if (opts.agent) {
    const { token } = await api<{ token: string }>(
      opts,
      'POST',
      `/agents/${encodeURIComponent(opts.agent)}/token`,
      opts.revokePrevious ? { revoke_previous: true } : {},
    );
    process.stdout.write(`${token}\n`);
    return;
  }
  if (opts.spawner) {
    const { token } = await api<{ token: string }>(
      opts,
      'POST',
      '/spawner-tokens',
      opts.task ? { task_ids: opts.task } : {},
      (field) => (field.startsWith('task_ids') ? '--task' : undefined),
    );
    process.stdout.write(`${token}\n`);
    return;
  }
  process.stdout.write(`${adminToken(opts)}\n`);
}

export async function revokeSpawners(opts: ClientOptions & { json?: boolean }): Promise<void> {
  const revoked = await api<{ ok: true; before: number; gen: number; streams_closed: number; agents_revoked: number }>(
    opts,
    'POST',
    '/spawner-tokens/revoke',
    {},
  );
  if (opts.json) return printJson(revoked);
  const n = revoked.streams_closed;
  const a = revoked.agents_revoked;
  process.stdout.write(
    `every spawner token minted until now is refused (${n} spawner stream${n === 1 ? '' : 's'} closed; the tokens of the ${a} agent${a === 1 ? '' : 's'} they held revoked too); mint a new one with beidou token --spawner\n`,
  );
}
