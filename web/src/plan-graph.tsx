import { Graph, layout } from '@dagrejs/dagre';
import { useMemo } from 'preact/hooks';
import type { Namer } from '../../src/events/describe.js';
import { human, when } from './format.js';
import type { Plan, PlanTask } from './types.js';

/**
 * A plan as a graph: its tasks laid out by dagre (dependencies above what waits on them), each node
 * coloured by its state, each edge from a dependency to the task that waits for it.
 */

const NODE_W = 176;
const NODE_H = 52;

interface Placed {
  task: PlanTask;
  x: number;
  y: number;
}

interface Laid {
  nodes: Placed[];
  edges: Array<{ from: string; to: string; points: Array<{ x: number; y: number }> }>;
  width: number;
  height: number;
}

function lay(plan: Plan): Laid {
  const g = new Graph();
  g.setGraph({ rankdir: 'TB', nodesep: 16, ranksep: 34, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const t of plan.tasks) g.setNode(t.id, { width: NODE_W, height: NODE_H });
  const known = new Set(plan.tasks.map((t) => t.id));
  for (const t of plan.tasks) for (const dep of t.depends_on) if (known.has(dep)) g.setEdge(dep, t.id);
  layout(g);
  const nodes = plan.tasks.map((task) => {
    const n = g.node(task.id) as { x: number; y: number };
    return { task, x: n.x, y: n.y };
  });
  const edges = g
    .edges()
    .map((e) => ({ from: e.v, to: e.w, points: (g.edge(e) as { points: Array<{ x: number; y: number }> }).points }));
  const { width = NODE_W, height = NODE_H } = g.graph() as { width?: number; height?: number };
  return { nodes, edges, width: Math.ceil(width), height: Math.ceil(height) };
}

const cut = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

function path(points: Array<{ x: number; y: number }>): string {
  return points.map((p, i) => `${i === 0 ? 'M' : 'L'}${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(' ');
}

export function PlanGraph({ plan, name }: { plan: Plan; name: Namer }) {
  // Laid out again only when a task's state or assignment changes, not on every refresh.
  const shape = plan.tasks.map((t) => `${t.id}:${t.status}:${t.agent_id ?? ''}:${t.depends_on.join(',')}`).join('|');
  const laid = useMemo(() => lay(plan), [shape]);
  const marker = `arrow-${plan.plan_id}`;
  const done = plan.tasks.filter((t) => t.status === 'done').length;
  return (
    <figure class={`plan${plan.removed_at ? ' removed' : ''}`} data-testid="plan-graph" data-plan-id={plan.plan_id}>
      <figcaption>
        <span>
          Plan of <b>{name(plan.owner_agent_id)}</b>
        </span>
        <span class="muted">
          {done}/{plan.tasks.length} done ·{' '}
          {plan.removed_at ? `removed ${when(plan.removed_at)}` : `declared ${when(plan.created_at)}`}
        </span>
      </figcaption>
      <div class="plan-scroll">
        <svg
          viewBox={`0 0 ${laid.width} ${laid.height}`}
          // As wide as the panel, never wider than drawn, never shrunk below 70% (it scrolls instead).
          style={{ width: '100%', maxWidth: `${laid.width}px`, minWidth: `${Math.round(laid.width * 0.7)}px` }}
          role="img"
          aria-label={`plan ${plan.plan_id}: ${plan.tasks.length} tasks`}
        >
          <defs>
            <marker
              id={marker}
              viewBox="0 0 10 10"
              refX="9"
              refY="5"
              markerWidth="7"
              markerHeight="7"
              orient="auto-start-reverse"
            >
              <path d="M0 0 L10 5 L0 10 z" class="arrow" />
            </marker>
          </defs>
          {laid.edges.map((e) => (
            <path
              key={`${e.from}->${e.to}`}
              class="plan-edge"
              data-testid="plan-edge"
              data-from={e.from}
              data-to={e.to}
              d={path(e.points)}
              marker-end={`url(#${marker})`}
            />
          ))}
          {laid.nodes.map(({ task, x, y }) => (
            <g
              key={task.id}
              class={`plan-node p-${task.status}`}
              data-testid="plan-node"
              data-plan-task-id={task.id}
              data-status={task.status}
              transform={`translate(${x - NODE_W / 2} ${y - NODE_H / 2})`}
            >
              <title>{`${task.id} (${human(task.status)})\n${task.role}${task.agent_id ? ` → ${name(task.agent_id)}` : ''}\n${task.task}`}</title>
              <rect width={NODE_W} height={NODE_H} rx="8" />
              <text x="12" y="21" class="node-title">
                {cut(task.id, 24)}
              </text>
              <text x="12" y="39" class="node-sub">
                {cut(`${human(task.status)} · ${task.agent_id ? name(task.agent_id) : task.role}`, 28)}
              </text>
            </g>
          ))}
        </svg>
      </div>
    </figure>
  );
}
