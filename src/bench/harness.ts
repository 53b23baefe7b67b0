import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { z } from 'zod';
import { loadConfig } from '../config.js';
import { newTask } from '../domain/agents.js';
import { definePrimitive, type AnyPrimitive } from '../primitives/define.js';
import { PRIMITIVES } from '../primitives/index.js';
import { startServer, type BeidouServer } from '../server/server.js';
import type { Figures, Job } from './clients.js';

/**
 * What the in-process sections of `npm run bench` stand on: a server in a fresh home with the
 * no-op floor in its catalogue, a team on it, and the clients child (clients.ts) that loads it.
 */

/** The floor: same input shape and the same wrapper as send_message, doing nothing. */
const noop = definePrimitive({
  name: 'bench_noop',
  title: 'no-op (bench floor)',
  description: 'Does nothing; the bench measures the stack under it.',
  inputSchema: z.strictObject({ to: z.string().min(1), content: z.string().min(1) }),
  outputSchema: z.object({ ok: z.literal(true) }),
  allowedDuringReview: true,
  async handler() {
    return { ok: true as const };
  },
});

const CLIENTS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'clients.js');

export function runClients(
  job: Job,
  onMessage?: (m: unknown, child: ReturnType<typeof fork>) => void,
): Promise<Figures> {
  return new Promise((resolve, reject) => {
    const child = fork(CLIENTS, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const cpu0 = process.cpuUsage();
    let answered = false;
    child.on('message', (m: { figures?: Figures }) => {
      if (m.figures) {
        answered = true;
        const used = process.cpuUsage(cpu0);
        resolve({
          ...m.figures,
          cpu: { server: (used.user + used.system) / 1e6, clients: m.figures.cpu?.clients ?? NaN },
        });
      } else onMessage?.(m, child);
    });
    // An exit without figures, clean or not, must end the wait rather than hang the bench.
    child.on('exit', (code, signal) => {
      if (!answered) reject(new Error(`bench clients exited (${signal ?? `code ${code}`}) without their figures`));
    });
    child.send(job);
  });
}

export async function withServer<T>(
  fn: (server: BeidouServer, home: string) => Promise<T>,
  env: Record<string, string> = {},
): Promise<T> {
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-bench-'));
  const server = await startServer(loadConfig({ port: '0', home }, { BEIDOU_INBOX_CAP: '1000000000', ...env }), {
    logger: pino({ level: 'silent' }),
    catalogue: [...PRIMITIVES, noop as unknown as AnyPrimitive],
  });
  try {
    return await fn(server, home);
  } finally {
    await server.close();
    rmSync(home, { recursive: true, force: true });
  }
}

/** A task whose root leads one team of `n` members; returns their ids and tokens. */
export async function team(server: BeidouServer, n: number) {
  const { services } = server;
  const skill = services.skills.load('worker');
  const { taskId, rootAgentId, drafts } = newTask(services.domain, {
    task: 'bench',
    skill,
    model: null,
    name: 'bench',
    workspace: null,
    spawn: false,
  });
  await services.registry.commit(drafts);
  const { createTeam } = await import('../primitives/create-team.js');
  const root = services.registry.agent(rootAgentId)!;
  const out = await createTeam.handler(
    {
      name: 'bench',
      task: 'bench',
      roles: Array.from({ length: n }, (_, i) => ({ role: `agent-${i}`, skill: 'worker', description: `member ${i}` })),
      rules: [],
      consensus: false,
    },
    { services, caller: root, signal: new AbortController().signal, progress: async () => {} },
  );
  const ids = out.members.map((m) => m.agent_id);
  const tokens = await Promise.all(ids.map((id) => services.tokens.mintAgent(id, taskId)));
  return { taskId, ids, tokens };
}
