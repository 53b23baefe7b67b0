import { api, printJson, type ClientOptions } from './client.js';
import { clock, table } from './table.js';

interface SpawnerView {
  spawner_id: string;
  name: string | null;
  connected: boolean;
  max_agents: number | null;
  last_heartbeat_at: number;
  agents: Array<{ agent_id: string; status: string; pid: number | null }>;
}

/** `beidou spawners`: the spawners the server knows since it started, and the agents each holds. */
export async function spawners(opts: ClientOptions & { json?: boolean }): Promise<void> {
  const listed = await api<{ spawners: SpawnerView[] }>(opts, 'GET', '/spawners');
  if (opts.json) return printJson(listed);
  if (listed.spawners.length === 0) {
    process.stdout.write('no spawner has connected since the server started: run beidou spawner\n');
    return;
  }
  const out = [
    table(
      ['SPAWNER', 'NAME', 'CONNECTED', 'AGENTS', 'LAST HEARTBEAT'],
      listed.spawners.map((s) => [
        s.spawner_id,
        s.name ?? '-',
        s.connected ? 'yes' : 'no',
        `${s.agents.length}/${s.max_agents ?? '-'}`,
        s.last_heartbeat_at ? clock(s.last_heartbeat_at) : '-',
      ]),
    ),
  ];
  const held = listed.spawners.flatMap((s) =>
    s.agents.map((a) => [s.spawner_id, a.agent_id, a.status, a.pid === null ? '-' : String(a.pid)]),
  );
  if (held.length > 0) out.push('', table(['SPAWNER', 'AGENT', 'STATUS', 'PID'], held));
  process.stdout.write(`${out.join('\n')}\n`);
}
