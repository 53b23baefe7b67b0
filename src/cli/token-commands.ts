import type { Command } from 'commander';

/**
 * The CLI commands that mint and revoke tokens: `beidou token` (and `token revoke-spawners`),
 * `beidou agent revoke-tokens`. Declared here, loaded when run (token.ts, agent.ts), so that
 * main.ts stays the list of commands it is.
 */

const collect = (v: string, prev: string[] = []) => [...prev, v];

type WithClientOptions = (cmd: Command) => Command;

/** `beidou token [--agent ID [--revoke-previous] | --spawner [--task T]...]` and `beidou token revoke-spawners`. */
export function tokenCommand(program: Command, clientOptions: WithClientOptions): void {
  const token = clientOptions(
    program
      .command('token')
      .description(
        'print the admin token, or mint an agent (--agent ID) or spawner (--spawner) token; revoke-spawners ends every spawner token',
      )
      .option('--agent <agent_id>', 'mint a fresh token for this agent')
      .option('--revoke-previous', "with --agent: the agent's earlier tokens stop working")
      .option('--spawner', 'mint a spawner token')
      .option('--task <task_id>', "with --spawner: take only this task's launches (repeatable)", collect),
  ).action(async (opts) => (await import('./token.js')).token(opts));

  clientOptions(
    token
      .command('revoke-spawners')
      .description('refuse every spawner token minted until now; their spawners are disconnected')
      .option('--json', "print the API's JSON"),
  ).action(async (opts) => (await import('./token.js')).revokeSpawners(opts));
}

/** `beidou agent revoke-tokens AGENT`. */
export function agentRevokeCommand(agent: Command, clientOptions: WithClientOptions): void {
  clientOptions(
    agent
      .command('revoke-tokens')
      .description('refuse every token of an agent minted until now; its spawner restarts it with a fresh one')
      .argument('<agent>', 'an agent id, or with --task a name or role')
      .option('--task <task_id>', 'look AGENT up by name or role in this task')
      .option('--json', "print the API's JSON"),
  ).action(async (ref: string, opts) => (await import('./agent.js')).agentRevokeTokens(ref, opts));
}
