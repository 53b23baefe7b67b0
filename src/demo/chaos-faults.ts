/**
 * The faults of a chaos run: what can be killed, when each is planned, and what was done.
 * The plan comes from the run's seed, so a failing run can be replayed; runTeam (chaos.ts)
 * injects it and records each fault as it lands.
 */

/** `outage+agent`: an agent process is killed while the server is down (its crash happens in the outage). */
export type FaultKind = 'server' | 'spawner' | 'agent' | 'outage+agent';
export interface FaultPlan {
  /** Wait after the previous fault (or the task's creation). */
  afterMs: number;
  kind: FaultKind;
}
export interface FaultRecord {
  kind: FaultKind;
  /** When it was injected, in ms since the task was created. */
  atMs: number;
  target: string;
  pid: number;
  agentId?: string;
  spawnerId?: string;
  /** The server: when it listened again. */
  backAtMs?: number;
}

/**
 * Faults in a seeded order, each `minGapMs`..`maxGapMs` (seeded) after the previous one has
 * done its harm (the server back, the spawner's loss noticed), so every fault lands while the
 * team still works whatever the machine's pace.
 */
export function planFaults(random: () => number, kinds: FaultKind[], minGapMs: number, maxGapMs: number): FaultPlan[] {
  const order = [...kinds];
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order.map((kind) => ({ kind, afterMs: Math.round(minGapMs + random() * (maxGapMs - minGapMs)) }));
}
