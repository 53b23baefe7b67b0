import { adminToken, api, CliError, type ClientOptions } from './client.js';

export interface TokenOptions extends ClientOptions {
  agent?: string;
  spawner?: boolean;
}

/** `beidou token`: the admin token; `--agent ID` a fresh agent token; `--spawner` a spawner token. */
export async function token(opts: TokenOptions): Promise<void> {
  if (opts.agent && opts.spawner) throw new CliError('give either --agent ID or --spawner, not both', 2);
  if (opts.agent) {
    const { token } = await api<{ token: string }>(opts, 'POST', `/agents/${encodeURIComponent(opts.agent)}/token`, {});
    process.stdout.write(`${token}\n`);
    return;
  }
  if (opts.spawner) {
    const { token } = await api<{ token: string }>(opts, 'POST', '/spawner-tokens', {});
    process.stdout.write(`${token}\n`);
    return;
  }
  process.stdout.write(`${adminToken(opts)}\n`);
}
