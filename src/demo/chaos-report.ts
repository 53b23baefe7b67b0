import type { FaultRecord } from './chaos-faults.js';
import type { Ev, TeamRunResult } from './chaos.js';

/**
 * How each part recovered from each fault of a chaos run, told from the task's events: the
 * server back on its port and the first event it logged; a killed spawner's `spawner.lost` and
 * where its agents were relaunched; a killed agent's `agent_crashed` strike and its relaunch.
 */
export function recoveryLines(result: Pick<TeamRunResult, 'events' | 'faults' | 'startedAt'>): string[] {
  const names = new Map<string, string>(
    result.events.filter((e) => e.event === 'agent_spawned').map((e) => [e.agent_id, e.name]),
  );
  const at = (e: Ev) => `+${((e.ts * 1000 - result.startedAt) / 1000).toFixed(1)} s`;
  const name = (id: string) => names.get(id) ?? id;
  const after = (ms: number, match: (e: Ev) => boolean) =>
    result.events.find((e) => e.ts * 1000 - result.startedAt >= ms && match(e));
  const lines: string[] = [];
  for (const f of result.faults) {
    lines.push(`${secs(f.atMs)}  killed ${f.target} (pid ${f.pid}) with SIGKILL`);
    for (const line of recovery(f, after, at, name)) lines.push(`           ${line}`);
  }
  return lines;
}

function recovery(
  f: FaultRecord,
  after: (ms: number, match: (e: Ev) => boolean) => Ev | undefined,
  at: (e: Ev) => string,
  name: (id: string) => string,
): string[] {
  const out: string[] = [];
  if (f.kind === 'server' || f.kind === 'outage+agent') {
    out.push(
      f.backAtMs === undefined
        ? 'the server did not come back'
        : `${secs(f.backAtMs)}  the server listened again on the same home and port (replayed its log)`,
    );
    const next = after(f.backAtMs ?? f.atMs, () => true);
    out.push(
      next
        ? `${at(next)}  first event after the restart: seq ${next.seq} ${next.event}${next.agent_id ? ` ${name(next.agent_id)}` : ''}`
        : 'no event after the restart',
    );
    if (f.kind === 'server' || !f.agentId) return out;
  }
  if (f.kind === 'spawner') {
    const lost = after(
      f.atMs,
      (e) => e.event === 'spawner.lost' && (f.spawnerId === undefined || e.spawner_id === f.spawnerId),
    );
    if (!lost) return ['no spawner.lost in this task (it held none of its agents, or the server never noticed)'];
    out.push(
      `${at(lost)}  spawner.lost: its agents ${lost.agent_ids.map(name).join(', ') || '(none)'} wait for another spawner`,
    );
    for (const id of lost.agent_ids as string[]) {
      const started = after(0, (e) => e.event === 'agent_started' && e.agent_id === id && e.seq > lost.seq);
      out.push(
        started
          ? `${at(started)}  ${name(id)} relaunched on ${started.spawner_id} (resumed: ${started.resumed})`
          : `${name(id)} was never relaunched`,
      );
    }
    return out;
  }
  const id = f.agentId!;
  const crashed = after(f.atMs, (e) => e.event === 'agent_crashed' && e.caller_id === id);
  out.push(
    crashed
      ? `${at(crashed)}  agent_crashed, strike ${crashed.strike_count} (${crashed.msg})`
      : `no agent_crashed for ${name(id)} (its spawner never reported the exit)`,
  );
  const started = after(f.atMs, (e) => e.event === 'agent_started' && e.agent_id === id);
  out.push(
    started
      ? `${at(started)}  ${name(id)} relaunched on ${started.spawner_id} (resumed: ${started.resumed})`
      : `${name(id)} was never relaunched`,
  );
  return out;
}

function secs(ms: number): string {
  return `+${(ms / 1000).toFixed(1)} s`.padEnd(9);
}
