import { describe, expect, it } from 'vitest';
import { findCycle, newlyReady, validatePlanGraph, type PlanTaskSpec } from '../../src/registry/plan-graph.js';

const t = (id: string, depends_on: string[] = []): PlanTaskSpec => ({
  id,
  role: id,
  skill: 'worker',
  task: id,
  description: '',
  model: null,
  depends_on,
});

describe('plan graph', () => {
  it('accepts a DAG', () => {
    expect(validatePlanGraph([t('a'), t('b', ['a']), t('c', ['a', 'b'])])).toBeNull();
  });

  it('names the first structural problem', () => {
    expect(validatePlanGraph([])).toEqual({ code: 'empty_plan' });
    expect(validatePlanGraph([t('a'), t('a')])).toEqual({ code: 'duplicate_task_id', id: 'a', indexes: [0, 1] });
    expect(validatePlanGraph([t('a', ['a'])])).toEqual({ code: 'self_dep', id: 'a', index: 0 });
    expect(validatePlanGraph([t('a', ['zz'])])).toEqual({ code: 'unknown_dep', id: 'a', dep: 'zz', index: 0 });
  });

  it('returns a closed chain of exactly the cycle, leaving out nodes that merely depend on it', () => {
    const chain = findCycle([t('root'), t('a', ['c', 'root']), t('b', ['a']), t('c', ['b']), t('tail', ['a'])])!;
    expect(chain[0]).toBe(chain.at(-1));
    expect(new Set(chain)).toEqual(new Set(['a', 'b', 'c']));
    // Each id depends on the next one in the chain.
    const deps = new Map([
      ['a', ['c', 'root']],
      ['b', ['a']],
      ['c', ['b']],
    ]);
    for (let i = 0; i + 1 < chain.length; i++) expect(deps.get(chain[i]!)).toContain(chain[i + 1]);
    expect(validatePlanGraph([t('x', ['y']), t('y', ['x'])])).toMatchObject({ code: 'cycle_detected' });
  });

  it('readies blocked tasks whose dependencies are all done, and only those', () => {
    const tasks = new Map([
      ['a', { status: 'done' as const, depends_on: [] }],
      ['b', { status: 'failed' as const, depends_on: [] }],
      ['c', { status: 'blocked' as const, depends_on: ['a'] }],
      ['d', { status: 'blocked' as const, depends_on: ['a', 'b'] }],
      ['e', { status: 'ready' as const, depends_on: [] }],
    ]);
    expect(newlyReady(tasks)).toEqual(['c']);
  });
});
