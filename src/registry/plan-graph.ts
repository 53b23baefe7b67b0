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
    if (t.depends_on.includes(t.id)) return { code: 'self_dep', id: t.id, index: i };
    for (const dep of t.depends_on) if (!index.has(dep)) return { code: 'unknown_dep', id: t.id, dep, index: i };
  }
  const chain = findCycle(tasks);
  return chain ? { code: 'cycle_detected', chain } : null;
}

/**
 * Kahn's algorithm decides whether the graph is acyclic; when it is not, a walk along the
 * unresolved nodes names one offending chain, e.g. `["a", "b", "c", "a"]`.
 */
export function findCycle(tasks: readonly PlanTaskSpec[]): string[] | null {
  const indegree = new Map<string, number>(tasks.map((t) => [t.id, new Set(t.depends_on).size]));
  const dependents = new Map<string, string[]>(tasks.map((t) => [t.id, []]));
  for (const t of tasks) for (const dep of new Set(t.depends_on)) dependents.get(dep)?.push(t.id);
  const queue = tasks.filter((t) => indegree.get(t.id) === 0).map((t) => t.id);
  let resolved = 0;
  while (queue.length > 0) {
    const id = queue.shift()!;
    resolved++;
    for (const next of dependents.get(id) ?? []) {
      const d = indegree.get(next)! - 1;
      indegree.set(next, d);
      if (d === 0) queue.push(next);
    }
  }
  if (resolved === tasks.length) return null;
  // Every unresolved node has an unresolved dependency: follow them until one repeats.
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const unresolved = (id: string) => (indegree.get(id) ?? 0) > 0;
  let current = tasks.find((t) => unresolved(t.id))!.id;
  const path: string[] = [];
  const at = new Map<string, number>();
  while (!at.has(current)) {
    at.set(current, path.length);
    path.push(current);
    current = byId.get(current)!.depends_on.find(unresolved)!;
  }
  // Reported in dependency order: each id depends on the one after it.
  return [...path.slice(at.get(current)!), current];
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
