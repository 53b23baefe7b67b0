/**
 * Plan graphs: validation and readiness by Kahn's algorithm. Pure functions over task
 * specs, so they are tested without a server.
 */

export type PlanTaskStatus = 'blocked' | 'ready' | 'in_flight' | 'done' | 'failed';

export interface PlanTaskSpec {
  id: string;
  role: string;
  skill: string;
  task: string;
  description: string;
  model: string | null;
  depends_on: string[];
}

export type PlanGraphError =
  | { code: 'empty_plan' }
  | { code: 'duplicate_task_id'; id: string; indexes: [number, number] }
  | { code: 'self_dep'; id: string; index: number }
  | { code: 'unknown_dep'; id: string; dep: string; index: number }
  | { code: 'cycle_detected'; chain: string[] };

/** The first structural problem of a plan, or null. Skills are checked by the caller. */
export function validatePlanGraph(tasks: readonly PlanTaskSpec[]): PlanGraphError | null {
  if (tasks.length === 0) return { code: 'empty_plan' };
  const index = new Map<string, number>();
  for (const [i, t] of tasks.entries()) {
    const seen = index.get(t.id);
    if (seen !== undefined) return { code: 'duplicate_task_id', id: t.id, indexes: [seen, i] };
    index.set(t.id, i);
  }
  for (const [i, t] of tasks.entries()) {
    for (const dep of t.depends_on) if (dep === t.id) return { code: 'self_dep', id: t.id, index: i };
    for (const dep of t.depends_on) if (!index.has(dep)) return { code: 'unknown_dep', id: t.id, dep, index: i };
  }
  const chain = findCycle(tasks);
  return chain ? { code: 'cycle_detected', chain } : null;
}

/**
 * Kahn's algorithm decides whether the graph is acyclic; when it is not, a walk along the
 * unresolved nodes names one offending chain, e.g. `["a", "b", "c", "a"]`. Linear in tasks
 * plus dependencies (nodes are array indexes, the queue an array with a head), so the
 * largest plan the limits allow is checked in a few milliseconds.
 */
export function findCycle(tasks: readonly PlanTaskSpec[]): string[] | null {
  const n = tasks.length;
  const indexOf = new Map<string, number>();
  for (let i = 0; i < n; i++) if (!indexOf.has(tasks[i]!.id)) indexOf.set(tasks[i]!.id, i);
  // Distinct dependencies per node (a repeated dep counts once), and the reverse edges.
  const deps: number[][] = [];
  const dependents: number[][] = Array.from({ length: n }, () => []);
  const seenBy = new Int32Array(n).fill(-1);
  for (let i = 0; i < n; i++) {
    const mine: number[] = [];
    for (const dep of tasks[i]!.depends_on) {
      const d = indexOf.get(dep);
      if (d === undefined || seenBy[d] === i) continue;
      seenBy[d] = i;
      mine.push(d);
      dependents[d]!.push(i);
    }
    deps.push(mine);
  }
  const indegree = Int32Array.from(deps, (d) => d.length);
  const queue: number[] = [];
  for (let i = 0; i < n; i++) if (indegree[i] === 0) queue.push(i);
  for (let head = 0; head < queue.length; head++) {
    for (const next of dependents[queue[head]!]!) if (--indegree[next]! === 0) queue.push(next);
  }
  if (queue.length === n) return null;
  // Every unresolved node has an unresolved dependency: follow them until one repeats.
  const unresolved = (i: number) => indegree[i]! > 0;
  let current = indegree.findIndex((d) => d > 0);
  const path: number[] = [];
  const at = new Map<number, number>();
  while (!at.has(current)) {
    at.set(current, path.length);
    path.push(current);
    current = deps[current]!.find(unresolved)!;
  }
  // Reported in dependency order: each id depends on the one after it.
  return [...path.slice(at.get(current)!), current].map((i) => tasks[i]!.id);
}

/** Initial statuses: a task with no dependencies is ready, the rest are blocked. */
export function initialStatus(spec: PlanTaskSpec): PlanTaskStatus {
  return spec.depends_on.length === 0 ? 'ready' : 'blocked';
}

/** Blocked tasks whose dependencies are now all done. */
export function newlyReady(
  tasks: ReadonlyMap<string, { status: PlanTaskStatus; depends_on: readonly string[] }>,
): string[] {
  const out: string[] = [];
  for (const [id, t] of tasks) {
    if (t.status !== 'blocked') continue;
    if (t.depends_on.every((dep) => tasks.get(dep)?.status === 'done')) out.push(id);
  }
  return out;
}

export function unmetDeps(
  tasks: ReadonlyMap<string, { status: PlanTaskStatus }>,
  dependsOn: readonly string[],
): string[] {
  return dependsOn.filter((dep) => tasks.get(dep)?.status !== 'done');
}
