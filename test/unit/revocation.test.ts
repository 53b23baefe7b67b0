import { describe, expect, it } from 'vitest';
import { agentTokensRevoked, spawnerTakes, spawnerTokensRevoked } from '../../src/domain/revocation.js';
import { storedEventSchema, SYSTEM_LOG, type EventDraft, type StoredEvent } from '../../src/events/catalogue.js';
import { issuedAt, revocationCutoff, revokedBy } from '../../src/identity/revocation.js';
import { TokenService } from '../../src/identity/tokens.js';
import { reduce } from '../../src/registry/reducer.js';
import { emptyState, USER, type RegistryState } from '../../src/registry/state.js';

/**
 * The arithmetic of revocation (identity/revocation.ts), its decisions (domain/revocation.ts)
 * and its two events in the one reducer: pure code on plain numbers and hand-built events,
 * each checked against the catalogue's schema. What a client sees is in
 * test/integration/revocation.test.ts.
 */

const T = 1_800_000_000;

describe('when a token counts as revoked', () => {
  it('is inclusive to the millisecond: minted at or before `before`, refused; a millisecond later, not', () => {
    expect(revokedBy(T, T)).toBe(true);
    expect(revokedBy(T + 0.001, T)).toBe(false);
    expect(revokedBy(T - 0.001, T)).toBe(true);
    // Whole-second tokens (minted before iat carried milliseconds) compare the same way.
    expect(revokedBy(T, T + 0.5)).toBe(true);
    expect(revokedBy(T + 1, T + 0.5)).toBe(false);
    expect(revokedBy(T, null)).toBe(false);
    expect(revokedBy(T, undefined)).toBe(false);
  });

  it('dates a token minted after a revocation strictly later, even under a clock that has not moved', () => {
    expect(issuedAt(T, null)).toBe(T);
    expect(issuedAt(T + 0.25, T)).toBe(T + 0.25);
    expect(revokedBy(issuedAt(T, T), T)).toBe(false);
    // A second revocation in the same millisecond still refuses what was minted after the first.
    const first = revocationCutoff(T, null);
    const between = issuedAt(T, first);
    const second = revocationCutoff(T, first);
    expect([revokedBy(between, first), revokedBy(between, second)]).toEqual([false, true]);
    expect(revokedBy(issuedAt(T, second), second)).toBe(false);
  });

  it('mints iat to the millisecond, after the revocation it is told of, and reads it back', async () => {
    const tokens = new TokenService('s'.repeat(32), 3600, { now: () => T + 0.1234 });
    const plain = await tokens.verify(await tokens.mintAgent('ag_a', 'tsk_a'));
    expect(plain.iat).toBe(T + 0.123);
    const after = await tokens.verify(await tokens.mintAgent('ag_a', 'tsk_a', { after: T + 0.5 }));
    expect(after.iat).toBe(T + 0.501);
    const limited = await tokens.verify(await tokens.mintSpawner('sp_a', ['tsk_a', 'tsk_b']));
    expect(limited).toMatchObject({ kind: 'spawner', task_ids: ['tsk_a', 'tsk_b'] });
    expect((await tokens.verify(await tokens.mintSpawner('sp_b'))).task_ids).toBeUndefined();
  });
});

describe('a spawner limited to tasks', () => {
  it('takes its tasks only; an unlimited one takes any', () => {
    expect(spawnerTakes(['tsk_a'], 'tsk_a')).toBe(true);
    expect(spawnerTakes(['tsk_a'], 'tsk_b')).toBe(false);
    expect(spawnerTakes(null, 'tsk_b')).toBe(true);
  });
});

describe('the revocation events in the reducer', () => {
  let seq = 0;
  const stored = (draft: EventDraft): StoredEvent => {
    const e = { seq: ++seq, ts: T, ...draft } as StoredEvent;
    storedEventSchema(e.event).strict().parse(e);
    return e;
  };
  const boot = (): RegistryState => {
    const state = emptyState();
    const base = { task_id: 'tsk_a' };
    for (const draft of [
      {
        event: 'task_created',
        ...base,
        root_agent_id: 'ag_a',
        text: 't',
        name: null,
        skill: 'leader',
        model: null,
        workspace: '/ws',
        spawn: true,
      },
      {
        event: 'agent_spawned',
        ...base,
        agent_id: 'ag_a',
        name: 'root-a',
        role: null,
        skill: 'leader',
        description: '',
        model: null,
        team_id: null,
        leader_id: USER,
        plan_id: null,
        plan_task_id: null,
        workspace_path: '/ws',
        project_workspace_path: '/ws',
      },
      { event: 'launch.assigned', ...base, agent_id: 'ag_a', spawner_id: 'sp_1.x', resume: false, session_id: null },
    ] as EventDraft[])
      reduce(state, stored(draft));
    return state;
  };

  it("agent.tokens_revoked sets the agent's cut-off and releases it from the spawner that held it", () => {
    const state = boot();
    const agent = state.agents.get('ag_a')!;
    agent.running = true;
    const draft = agentTokensRevoked(agent, T);
    expect(draft).toMatchObject({ before: T, spawner_id: 'sp_1.x' });
    reduce(state, stored(draft));
    // Released: no spawner holds it, so the scheduler gives its launch to one (with a fresh token).
    expect(agent).toMatchObject({ tokens_revoked_before: T, spawner_id: null, running: false });
    // A second one in the same millisecond moves the cut-off past the first; an older one never lowers it.
    const again = agentTokensRevoked(agent, T);
    expect(again).toMatchObject({ before: T + 0.001, spawner_id: null });
    reduce(state, stored(again));
    reduce(state, stored({ ...again, before: T - 10 }));
    expect(agent.tokens_revoked_before).toBe(T + 0.001);
  });

  it('an agent being terminated keeps its spawner, which ends it', () => {
    const state = boot();
    const agent = state.agents.get('ag_a')!;
    agent.terminate_posted = true;
    const draft = agentTokensRevoked(agent, T);
    expect(draft.spawner_id).toBeNull();
    reduce(state, stored(draft));
    expect(agent.spawner_id).toBe('sp_1.x');
  });

  it('a release names the spawner: one naming another spawner leaves the agent where it is', () => {
    const state = boot();
    reduce(
      state,
      stored({ event: 'agent.tokens_revoked', task_id: 'tsk_a', agent_id: 'ag_a', before: T, spawner_id: 'sp_2.y' }),
    );
    expect(state.agents.get('ag_a')).toMatchObject({ spawner_id: 'sp_1.x', tokens_revoked_before: T });
  });

  it('spawner_tokens.revoked is in the system log and only ever moves the cut-off forward', () => {
    const state = emptyState();
    const first = spawnerTokensRevoked(state, T);
    expect(first).toEqual({ event: 'spawner_tokens.revoked', task_id: SYSTEM_LOG, before: T });
    reduce(state, stored(first));
    reduce(state, stored(spawnerTokensRevoked(state, T)));
    expect(state.spawner_tokens_revoked_before).toBe(T + 0.001);
    reduce(state, stored({ ...first, before: T - 5 }));
    expect(state.spawner_tokens_revoked_before).toBe(T + 0.001);
    // No task comes of it.
    expect(state.tasks.size).toBe(0);
  });
});
