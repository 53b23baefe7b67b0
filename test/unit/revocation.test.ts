import { describe, expect, it } from 'vitest';
import {
  agentTokensRevoked,
  agentTokenStanding,
  heldAgentsRevoked,
  spawnerHeldAgents,
  spawnerTakes,
  spawnerTokenOf,
  spawnerTokenStanding,
  spawnerTokensRevoked,
} from '../../src/domain/revocation.js';
import { spawnerTokenRoom } from '../../src/domain/limits.js';
import { storedEventSchema, SYSTEM_LOG, type EventDraft, type StoredEvent } from '../../src/events/catalogue.js';
import { currentGeneration } from '../../src/identity/revocation.js';
import { TokenService } from '../../src/identity/tokens.js';
import { reduce } from '../../src/registry/reducer.js';
import { emptyState, USER, type RegistryState } from '../../src/registry/state.js';

/**
 * The generations of revocation (identity/revocation.ts), its decisions (domain/revocation.ts)
 * and its two events in the one reducer: pure code on plain numbers and hand-built events,
 * each checked against the catalogue's schema. What a client sees is in
 * test/integration/revocation*.test.ts.
 */

const T = 1_800_000_000;

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

describe('when a token counts as revoked', () => {
  it('goes by generation: only a token of the current one works, an older or a later one does not', () => {
    expect(currentGeneration(0, 0)).toBe(true);
    expect(currentGeneration(2, 2)).toBe(true);
    expect(currentGeneration(1, 2)).toBe(false);
    // One the log does not know (minted from a revocation a crash kept off the disk) fails closed.
    expect(currentGeneration(3, 2)).toBe(false);
  });

  it('mints gen and a whole-second iat from the clock (never in its future), and reads them back', async () => {
    const tokens = new TokenService('s'.repeat(32), 3600, { now: () => T + 0.9 });
    const plain = await tokens.verify(await tokens.mintAgent('ag_a', 'tsk_a'));
    expect(plain).toMatchObject({ gen: 0, iat: T, exp: T + 3600 });
    expect((await tokens.verify(await tokens.mintAgent('ag_a', 'tsk_a', { gen: 4 }))).gen).toBe(4);
    const limited = await tokens.verify(await tokens.mintSpawner('sp_a', ['tsk_a', 'tsk_b'], { gen: 1 }));
    expect(limited).toMatchObject({ kind: 'spawner', task_ids: ['tsk_a', 'tsk_b'], gen: 1 });
    expect((await tokens.verify(await tokens.mintSpawner('sp_b'))).task_ids).toBeUndefined();
  });

  it("is the same whatever the clock does: a clock stepped back or ahead changes no token's standing", async () => {
    let now = T;
    const tokens = new TokenService('s'.repeat(32), 3600, { now: () => now });
    const state = boot();
    const agent = state.agents.get('ag_a')!;
    const old = await tokens.verify(await tokens.mintAgent('ag_a', 'tsk_a', { gen: agent.tokens_gen }));
    now = T - 600; // NTP steps the clock back ten minutes
    reduce(state, stored(agentTokensRevoked(agent, now)));
    const fresh = await tokens.verify(await tokens.mintAgent('ag_a', 'tsk_a', { gen: agent.tokens_gen }));
    expect([agentTokenStanding(agent, old.gen), agentTokenStanding(agent, fresh.gen)]).toEqual([
      'token_revoked',
      'current',
    ]);
    expect(fresh.iat).toBe(T - 600);
  });

  it('refuses every spawner token while the system log is quarantined', () => {
    const state = emptyState();
    expect(spawnerTokenStanding(state, 0, false)).toBe('current');
    expect(spawnerTokenStanding(state, 0, true)).toBe('system_log_quarantined');
    reduce(state, stored(spawnerTokensRevoked(T)));
    expect(spawnerTokenStanding(state, 0, false)).toBe('token_revoked');
    expect(spawnerTokenStanding(state, 1, false)).toBe('current');
  });

  it("an agent's standing: unknown, terminated, revoked, current", () => {
    const state = boot();
    const agent = state.agents.get('ag_a')!;
    expect(agentTokenStanding(undefined, 0)).toBe('unknown_agent');
    expect(agentTokenStanding(agent, 0)).toBe('current');
    expect(agentTokenStanding(agent, 1)).toBe('token_revoked');
    agent.terminate_consumed = true;
    expect(agentTokenStanding(agent, 0)).toBe('agent_terminated');
  });
});

describe("one spawner token's instances", () => {
  it('share BEIDOU_MAX_AGENTS_PER_SPAWNER: what the others ask for counts against the next', () => {
    const config = { maxAgentsPerSpawner: 4 };
    expect(spawnerTokenRoom(config, 0, 4)).toBeNull();
    expect(spawnerTokenRoom(config, 3, 1)).toBeNull();
    const refused = spawnerTokenRoom(config, 3, 2)!;
    expect(refused.code).toBe('limit_exceeded');
    expect(refused.details).toEqual({
      limit: 'agents_per_spawner',
      max: 4,
      setting: 'BEIDOU_MAX_AGENTS_PER_SPAWNER',
      field: 'max_agents',
      other_instances: 3,
    });
    expect(refused.message).toContain('--max-agents 1 or fewer');
    expect(spawnerTokenRoom(config, 0, 5)!.message).toContain('--max-agents 4 or fewer');
  });

  it('are told apart from their token by the instance after the first dot', () => {
    expect(spawnerTokenOf('sp_abc.host:1.2')).toBe('sp_abc');
    expect(spawnerTokenOf('sp_abc')).toBe('sp_abc');
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
  it("agent.tokens_revoked sets the agent's cut-off and releases it from the spawner that held it", () => {
    const state = boot();
    const agent = state.agents.get('ag_a')!;
    agent.running = true;
    const draft = agentTokensRevoked(agent, T);
    expect(draft).toMatchObject({ before: T, spawner_id: 'sp_1.x' });
    reduce(state, stored(draft));
    // Released: no spawner holds it, so the scheduler gives its launch to one (with a fresh token).
    expect(agent).toMatchObject({ tokens_gen: 1, spawner_id: null, running: false });
    // Each one moves the generation on, whatever its time says (the same second, or earlier).
    const again = agentTokensRevoked(agent, T);
    expect(again).toMatchObject({ before: T, spawner_id: null });
    reduce(state, stored(again));
    reduce(state, stored({ ...again, before: T - 10 }));
    expect(agent.tokens_gen).toBe(3);
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
    expect(state.agents.get('ag_a')).toMatchObject({ spawner_id: 'sp_1.x', tokens_gen: 1 });
  });

  it('spawner_tokens.revoked is in the system log and moves the generation on, whatever its time', () => {
    const state = emptyState();
    const first = spawnerTokensRevoked(T);
    expect(first).toEqual({ event: 'spawner_tokens.revoked', task_id: SYSTEM_LOG, before: T });
    reduce(state, stored(first));
    reduce(state, stored(spawnerTokensRevoked(T)));
    expect(state.spawner_tokens_gen).toBe(2);
    reduce(state, stored({ ...first, before: T - 5 }));
    expect(state.spawner_tokens_gen).toBe(3);
    // No task comes of it.
    expect(state.tasks.size).toBe(0);
  });

  it('revoke-spawners: the agents a spawner held then, and holds still, have their tokens revoked, one commit per task', () => {
    const state = boot();
    const held = spawnerHeldAgents(state);
    expect([...held]).toEqual([['tsk_a', new Map([['ag_a', 'sp_1.x']])]]);
    const drafts = heldAgentsRevoked(state, held.get('tsk_a')!, T);
    expect(drafts).toEqual([
      { event: 'agent.tokens_revoked', task_id: 'tsk_a', agent_id: 'ag_a', before: T, spawner_id: 'sp_1.x' },
    ]);
    // Another spawner has it by the time its task's commit is decided: left alone.
    state.agents.get('ag_a')!.spawner_id = 'sp_2.y';
    expect(heldAgentsRevoked(state, held.get('tsk_a')!, T)).toEqual([]);
  });
});
