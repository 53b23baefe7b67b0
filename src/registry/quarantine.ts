import type { Quarantine } from '../events/event-log.js';
import { emptyState, type RegistryState } from './state.js';

/**
 * A task whose event log failed verification at start. Its events before the fault are
 * reduced into a state of its own, apart from the live registry: the admin sees what the
 * task was doing (and what `beidou doctor --repair` would keep), while no decision, timer,
 * spawner or token of the running server can reach it, so nothing writes to it.
 */
export interface QuarantinedTask {
  task_id: string;
  quarantine: Quarantine;
  state: RegistryState;
}

/** Moves every record of one task out of `state` into a state of its own. */
export function extractTask(state: RegistryState, taskId: string): RegistryState {
  const out = emptyState();
  const move = <T extends { task_id: string }>(from: Map<string, T>, to: Map<string, T>) => {
    for (const [id, record] of from) {
      if (record.task_id !== taskId) continue;
      to.set(id, record);
      from.delete(id);
    }
  };
  move(state.tasks, out.tasks);
  move(state.agents, out.agents);
  move(state.teams, out.teams);
  move(state.plans, out.plans);
  move(state.questions, out.questions);
  return out;
}
