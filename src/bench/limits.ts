import { MAX_DEPENDENCIES } from '../primitives/declare-plan.js';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { newTask } from '../domain/agents.js';
import type { BeidouServer } from '../server/server.js';

/**
 * Section 5 of `npm run bench`: the largest create_team and declare_plan the default limits
 * allow, over real MCP, with the longest stretch the event loop was held meanwhile
 * (`monitorEventLoopDelay`, 1 ms resolution; the window includes the rollups' flush that
 * follows), the median of BENCH_LIMIT_RUNS runs (3). docs/performance.md records the
 * figures; the bar is about 250 ms.
 */

export interface Blocking {
  name: string;
  callMs: number;
  maxBlockMs: number;
  /** The worst run's block (the first request of a fresh process runs cold code). */
  worstBlockMs: number;
  bodyBytes: number;
}

/** Runs per shape: the machine's other work adds noise, so the median of a few is reported. */
const RUNS = Number(process.env.BENCH_LIMIT_RUNS ?? 3);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function rootClient(server: BeidouServer) {
  const { services } = server;
  const skill = services.skills.load('leader');
  const { taskId, rootAgentId, drafts } = newTask(services.domain, {
    task: 'bench limits',
    skill,
    model: null,
    name: 'limits',
    workspace: null,
    spawn: false,
  });
  await services.registry.commit(drafts);
  const token = await services.tokens.mintAgent(rootAgentId, taskId);
  const client = new Client({ name: 'beidou-bench', version: '0.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    }),
  );
  return client;
}

async function measure(client: Client, name: string, tool: string, args: Record<string, unknown>): Promise<Blocking> {
  const histogram = monitorEventLoopDelay({ resolution: 1 });
  await sleep(20);
  histogram.enable();
  const t0 = performance.now();
  const result = (await client.callTool({ name: tool, arguments: args })) as CallToolResult;
  const callMs = performance.now() - t0;
  // The rollups flush 100 ms after the first change of a batch: keep watching past it.
  await sleep(400);
  histogram.disable();
  if (result.isError) throw new Error(`${name}: ${(result.content[0] as { text: string }).text}`);
  const block = histogram.max / 1e6;
  return { name, callMs, maxBlockMs: block, worstBlockMs: block, bodyBytes: JSON.stringify(args).length };
}

const role = (i: number) => ({
  role: `member-${i}`,
  skill: 'worker',
  description: `member ${i}: its own part of the work, described in a sentence or two`,
});
const planTask = (i: number, depends_on: string[]) => ({
  id: `task-${i}`,
  role: `role-${i}`,
  skill: 'worker',
  task: `do part ${i} of the work and write it down`,
  depends_on,
});

/** Each shape on a fresh server with the default limits (`fresh` starts one). */
export async function largestRequests(
  fresh: <T>(fn: (server: BeidouServer) => Promise<T>) => Promise<T>,
  maxAgents: number,
  maxPlanTasks: number,
): Promise<Blocking[]> {
  const out: Blocking[] = [];
  const once = async (name: string, tool: string, args: Record<string, unknown>) => {
    const runs: Blocking[] = [];
    for (let r = 0; r < RUNS; r++) {
      await fresh(async (server) => {
        const client = await rootClient(server);
        try {
          runs.push(await measure(client, name, tool, args));
        } finally {
          await client.close();
        }
      });
    }
    out.push({
      name,
      bodyBytes: runs[0]!.bodyBytes,
      callMs: median(runs.map((b) => b.callMs)),
      maxBlockMs: median(runs.map((b) => b.maxBlockMs)),
      worstBlockMs: Math.max(...runs.map((b) => b.maxBlockMs)),
    });
  };
  // The root is one of the task's agents: the largest team has one member fewer than the cap.
  const roles = Math.min(maxPlanTasks, maxAgents - 1);
  await once(`create_team, ${roles} roles`, 'create_team', {
    name: 'big',
    task: 'everything',
    roles: Array.from({ length: roles }, (_, i) => role(i)),
  });
  const n = maxPlanTasks;
  await once(`declare_plan, ${n} tasks, a chain`, 'declare_plan', {
    tasks: Array.from({ length: n }, (_, i) => planTask(i, i === 0 ? [] : [`task-${i - 1}`])),
  });
  await once(`declare_plan, ${n} tasks, 10 deps each`, 'declare_plan', {
    tasks: Array.from({ length: n }, (_, i) =>
      planTask(
        i,
        Array.from({ length: Math.min(i, 10) }, (_, k) => `task-${i - 1 - k}`),
      ),
    ),
  });
  // The densest plan the input allows: each task depends on the (up to) MAX_DEPENDENCIES
  // tasks before it.
  await once(`declare_plan, ${n} tasks, ${MAX_DEPENDENCIES} deps each`, 'declare_plan', {
    tasks: Array.from({ length: n }, (_, i) =>
      planTask(
        i,
        Array.from({ length: Math.min(i, MAX_DEPENDENCIES) }, (_, k) => `task-${i - 1 - k}`),
      ),
    ),
  });
  return out;
}
