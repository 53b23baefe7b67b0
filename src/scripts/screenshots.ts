import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import type { Page } from 'playwright-core';
import { loadConfig } from '../config.js';
import type { StoredEvent } from '../events/catalogue.js';
import { startServer } from '../server/server.js';
import { launchChromium } from '../testkit/chromium.js';
import { PACKAGE_ROOT } from '../util/version.js';

/**
 * `npm run screenshots`: the demo's team (examples/demo-script.json, paced as `npm run demo
 * -- --slow` paces it, only faster) on a server of its own, and the dashboard's task page
 * photographed in headless Chromium when the root hands its work to the user (the demo's
 * one question that reaches the user): the team tree, the plan graph, the events and the
 * root's review question are all on the page. Writes the whole page as
 * docs/images/dashboard-task.png (1280 wide) and docs/images/dashboard-narrow.png (420
 * wide), then approves the review so the run ends as the demo does.
 */

const STEP_DELAY_MS = 300;
const OUT = path.join(PACKAGE_ROOT, 'docs', 'images');
/** The window each is laid out in first; the picture is the whole page, as tall as it lays out. */
const SHOTS = [
  { file: 'dashboard-task.png', width: 1280, height: 900 },
  { file: 'dashboard-narrow.png', width: 420, height: 900 },
] as const;

async function main(): Promise<void> {
  const home = mkdtempSync(path.join(os.tmpdir(), 'beidou-screenshots-'));
  const server = await startServer(loadConfig({ port: '0', home }, { BEIDOU_SPAWNER_HEARTBEAT_S: '1' }), {
    logger: pino({ level: 'warn' }),
  });
  // T: the fields of the JSON reply this call reads.
  const api = async <T = unknown>(method: string, route: string, body?: unknown): Promise<T> => {
    const res = await fetch(`${server.url}/api${route}`, {
      method,
      headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<T>;
  };
  const { token } = await api<{ token: string }>('POST', '/spawner-tokens', {});
  const agentCmd = `"${process.execPath}" "${path.join(PACKAGE_ROOT, 'examples', 'scripted-agent.mjs')}"`;
  const spawner = spawn(
    process.execPath,
    [
      path.join(PACKAGE_ROOT, 'dist', 'cli', 'main.js'),
      'spawner',
      '--server',
      server.url,
      '--token',
      token,
      '--adapter',
      'command',
      '--command',
      agentCmd,
      '--workdir',
      path.join(home, 'agents'),
      '--spool-dir',
      path.join(home, 'spool'),
      // Agents get only the variables the spawner allows: the script's are named.
      '--pass-env',
      'BEIDOU_SCRIPT',
      '--pass-env',
      'BEIDOU_SCRIPT_DELAY_MS',
    ],
    {
      env: {
        ...process.env,
        BEIDOU_SCRIPT: path.join(PACKAGE_ROOT, 'examples', 'demo-script.json'),
        BEIDOU_SCRIPT_DELAY_MS: String(STEP_DELAY_MS),
        BEIDOU_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  const browser = await launchChromium();
  try {
    const task = await api<{ task_id: string }>('POST', '/tasks', {
      task: 'Write a short report on Polaris, the North Star.',
      name: 'polaris report',
    });
    const review = await new Promise<StoredEvent & { qid: string }>((resolve) => {
      const check = (events: readonly StoredEvent[]) => {
        const hit = events.find((e) => e.event === 'question_asked' && e.origin === 'root_review');
        if (hit) {
          unsubscribe();
          resolve(hit as StoredEvent & { qid: string });
        }
      };
      const unsubscribe = server.services.registry.log.subscribe(task.task_id, check);
      check(server.services.registry.log.read(task.task_id, 0, 100_000));
    });
    const detail = await api<TaskDetail>('GET', `/tasks/${task.task_id}`);
    mkdirSync(OUT, { recursive: true });
    for (const shot of SHOTS) {
      const context = await browser.newContext({
        viewport: { width: shot.width, height: shot.height },
        deviceScaleFactor: 1,
      });
      await context.addInitScript((t) => window.sessionStorage.setItem('beidou.token', t), server.adminToken);
      const page = await context.newPage();
      await page.goto(`${server.url}/#/tasks/${task.task_id}`);
      await settled(page, task.task_id, review.qid, detail);
      // A window as tall as the page, so what is sized to the window (the sidebar) spans the picture.
      const height = await page.evaluate(
        () => (document as unknown as { documentElement: { scrollHeight: number } }).documentElement.scrollHeight,
      );
      await page.setViewportSize({ width: shot.width, height });
      await settled(page, task.task_id, review.qid, detail);
      const file = path.join(OUT, shot.file);
      await page.screenshot({ path: file, fullPage: true });
      // A PNG's width and height are the first two fields of its IHDR chunk.
      const png = readFileSync(file);
      console.log(
        `${path.relative(PACKAGE_ROOT, file)}  ${png.readUInt32BE(16)}x${png.readUInt32BE(20)}  ${Math.round(statSync(file).size / 1024)} KB`,
      );
      await context.close();
    }
    await api('POST', `/questions/${review.qid}/answer`, { answers: [{ selected_labels: ['Approve'], text: null }] });
  } finally {
    await browser.close();
    // The spawner first, so it does not report the server gone.
    if (spawner.exitCode === null && spawner.signalCode === null) {
      const exited = new Promise((resolve) => spawner.once('exit', resolve));
      spawner.kill('SIGTERM');
      await exited;
    }
    await server.close();
    rmSync(home, { recursive: true, force: true });
  }
}

/** The fields of GET /api/tasks/:id that `settled` waits for on the page. */
interface TaskDetail {
  task: { event_count: number };
  agents: Array<{ agent_id: string }>;
  plans: Array<{ tasks: Array<{ id: string; status: string }> }>;
}

/** The page shows the whole task: every agent, every plan node in its state, every event, the review question. */
async function settled(page: Page, taskId: string, qid: string, detail: TaskDetail): Promise<void> {
  const sel = (id: string) => `[data-testid="${id}"]`;
  await page.locator(`${sel('task-page')}[data-task-id="${taskId}"]`).waitFor();
  await page.locator(`${sel('question-card')}[data-qid="${qid}"]`).waitFor();
  for (const t of detail.plans.flatMap((p) => p.tasks)) {
    await page.locator(`${sel('plan-node')}[data-plan-task-id="${t.id}"][data-status="${t.status}"]`).waitFor();
  }
  for (const a of detail.agents) await page.locator(`${sel('agent-node')}[data-agent-id="${a.agent_id}"]`).waitFor();
  await page.locator(`${sel('event-line')}[data-seq="${detail.task.event_count}"]`).waitFor();
  // Web fonts and the graph's layout have settled once nothing is pending.
  await page.evaluate(() => (document as unknown as { fonts: { ready: Promise<unknown> } }).fonts.ready);
}

declare const window: { sessionStorage: { setItem(key: string, value: string): void } };
declare const document: unknown;

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
