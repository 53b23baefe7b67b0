import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Adapter, AdapterHooks, AgentProcess, DrainedEvent, StartSpec } from '../adapter.js';
import { LineRing } from '../adapter.js';

/**
 * The `command` adapter (SPEC §6): any command line, through a shell. The agent learns who
 * it is from its environment, reads its inbox as JSON lines on stdin (closed when it is
 * terminated), and may print JSON objects with an `event` field on stdout to report events;
 * any other output is logged. Each event line also counts as a clean turn.
 */
export function commandAdapter(command: string, log: (agentId: string, line: string) => void): Adapter {
  return {
    name: 'command',
    start(spec: StartSpec, hooks: AdapterHooks): AgentProcess {
      const { launch } = spec;
      const child = spawn(command, {
        shell: true,
        cwd: spec.cwd,
        stdio: ['pipe', 'pipe', 'pipe'],
        env: {
          ...process.env,
          BEIDOU_URL: spec.mcpUrl,
          BEIDOU_SERVER: spec.serverUrl,
          BEIDOU_TOKEN: launch.token,
          BEIDOU_AGENT_ID: launch.agent_id,
          BEIDOU_TASK_ID: launch.task_id,
          BEIDOU_AGENT_NAME: launch.name,
          BEIDOU_TASK: launch.first_message,
          BEIDOU_SYSTEM_PROMPT: launch.prompt,
          BEIDOU_WORKSPACE: launch.workspace_path,
          BEIDOU_SESSION_ID: spec.sessionId,
          BEIDOU_RESUME: spec.resume ? '1' : '',
        },
      });
      const stderr = new LineRing();
      child.stderr.setEncoding('utf8').on('data', (d: string) => stderr.push(d));
      hooks.onSession(spec.sessionId);
      createInterface({ input: child.stdout }).on('line', (line) => {
        const event = parseEventLine(line);
        if (!event) return log(launch.agent_id, line);
        hooks.onEvent(event);
        hooks.onCleanTurn();
      });
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
        child.once('close', (code, signal) => resolve({ code, signal }));
        child.once('error', (err) => {
          stderr.push(`${err.message}\n`);
          resolve({ code: 127, signal: null });
        });
      });
      // A process that exits while we write must not crash the spawner.
      child.stdin.on('error', () => undefined);
      const write = (obj: unknown) => {
        if (!child.stdin.destroyed && child.stdin.writable) child.stdin.write(JSON.stringify(obj) + '\n');
      };
      if (spec.nudge) write({ message_id: `nudge-${Date.now()}`, from: 'beidou', from_name: 'beidou', kind: 'system', content: spec.nudge });
      return {
        pid: child.pid,
        deliver: (message) => write(message),
        end: () => child.stdin.end(),
        kill: () => child.kill('SIGKILL'),
        exited,
        stderrTail: () => stderr.text(),
      };
    },
  };
}

function parseEventLine(line: string): DrainedEvent | null {
  const trimmed = line.trim();
  if (!trimmed.startsWith('{')) return null;
  try {
    const obj = JSON.parse(trimmed) as Record<string, unknown>;
    return typeof obj.event === 'string' ? (obj as DrainedEvent) : null;
  } catch {
    return null;
  }
}
