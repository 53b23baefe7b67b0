import { clock, human } from './format.js';
import type { Agent, Team } from './types.js';

/**
 * The team as a tree under the root: each leader's members inside it, with role, status and
 * badges (review pending, escalated, terminated, error with its reason, running or not).
 */
export function TeamTree({ agents, teams }: { agents: Agent[]; teams: Team[] }) {
  const ids = new Set(agents.map((a) => a.agent_id));
  const kidsOf = new Map<string, Agent[]>();
  const tops: Agent[] = [];
  for (const a of agents) {
    if (ids.has(a.leader_id) && a.leader_id !== a.agent_id)
      kidsOf.set(a.leader_id, [...(kidsOf.get(a.leader_id) ?? []), a]);
    else tops.push(a);
  }
  const teamNames = new Map(teams.map((t) => [t.team_id, t.name]));
  if (agents.length === 0) return <p class="muted">No agents.</p>;
  return (
    <ul class="tree" data-testid="team-tree">
      {tops.map((a) => (
        <AgentNode key={a.agent_id} agent={a} kidsOf={kidsOf} teamNames={teamNames} />
      ))}
    </ul>
  );
}

function AgentNode({
  agent: a,
  kidsOf,
  teamNames,
}: {
  agent: Agent;
  kidsOf: Map<string, Agent[]>;
  teamNames: Map<string, string>;
}) {
  const kids = kidsOf.get(a.agent_id) ?? [];
  const pending = a.review ?? a.termination_request;
  const process = a.running
    ? 'running'
    : a.status === 'terminated'
      ? 'ended'
      : !a.launch
        ? 'connects itself'
        : a.launch.state === 'queued'
          ? 'queued for a spawner'
          : 'not running';
  return (
    <li
      class="agent-node"
      data-testid="agent-node"
      data-agent-id={a.agent_id}
      data-status={a.status}
      data-running={String(a.running)}
    >
      <div class={`agent-card a-${a.status}`}>
        <div class="agent-line">
          <span class={`dot${a.running ? ' on' : ''}`} title={process} aria-hidden="true" />
          <span class="agent-name" data-testid="agent-name" title={a.agent_id}>
            {a.name}
          </span>
          <span class="agent-role" data-testid="agent-role">
            {a.role ?? (a.leader_id === 'user' ? 'root' : '')}
          </span>
          <span class={`pill s-${a.status}`} data-testid="agent-status">
            {human(a.status)}
          </span>
        </div>
        <div class="badges">
          {a.running && (
            <span class="badge running" data-testid="badge-running" title="its process runs">
              running
            </span>
          )}
          {a.review && (
            <span class="badge review" data-testid="badge-review" title={a.review.detail}>
              hand-off since {clock(a.review.since)}
            </span>
          )}
          {a.termination_request && !a.review && (
            <span class="badge review" title={a.termination_request.detail}>
              asks to end since {clock(a.termination_request.since)}
            </span>
          )}
          {pending?.escalated && (
            <span
              class="badge escalated"
              data-testid="badge-escalated"
              title="its leader did not answer: the question went to you"
            >
              escalated
            </span>
          )}
          {a.status === 'terminated' && (
            <span class="badge terminated" data-testid="badge-terminated" title="terminated">
              ended {a.terminated_at !== null ? clock(a.terminated_at) : ''}
            </span>
          )}
          {a.error && (
            <span class="badge error" data-testid="badge-error" title={`${a.error.reason}: ${a.error.msg}`}>
              error: {a.error.reason}
            </span>
          )}
          <span class="agent-meta">
            {a.team_id ? (teamNames.get(a.team_id) ?? a.team_id) : a.leader_id === 'user' ? 'leads the task' : ''}
            {!a.running && a.status !== 'terminated' ? ` · ${process}` : ''}
          </span>
        </div>
        {a.error && <p class="agent-error">{a.error.msg}</p>}
      </div>
      {kids.length > 0 && (
        <ul>
          {kids.map((k) => (
            <AgentNode key={k.agent_id} agent={k} kidsOf={kidsOf} teamNames={teamNames} />
          ))}
        </ul>
      )}
    </li>
  );
}
