import type { DrainedEvent } from '../../protocol/spawner.js';
import type { Adapter, AdapterHooks, AgentProcess, StartSpec } from '../adapter.js';
import { wrapChild } from '../adapter.js';
import type { AgentLauncher } from '../agent-launcher.js';
import { drainedEventProblem } from '../drain.js';
import { COMMAND_LINE_MAX_BYTES } from '../line-reader.js';
import type { AgentLaunchDir } from '../launch-files.js';

/** A text also given as an environment variable only up to this size (bytes): Linux caps one at 128 KiB (E2BIG). */
export const ENV_TEXT_MAX_BYTES = 64 * 1024;

/** The prompt and the task in files of the launch folder, and as variables too when they fit. */
function launchTexts(dir: AgentLaunchDir, launch: StartSpec['launch']): Record<string, string> {
  const fits = (text: string) => Buffer.byteLength(text, 'utf8') <= ENV_TEXT_MAX_BYTES;
  return {
    BEIDOU_SYSTEM_PROMPT_FILE: dir.write('system-prompt.md', launch.prompt),
    BEIDOU_TASK_FILE: dir.write('task.md', launch.first_message),
    ...(fits(launch.prompt) ? { BEIDOU_SYSTEM_PROMPT: launch.prompt } : {}),
    ...(fits(launch.first_message) ? { BEIDOU_TASK: launch.first_message } : {}),
  };
}

export interface CommandAdapterOutput {
  /** A line of the agent's own output (not an event). */
  line(agentId: string, line: string): void;
  /** An event line the server would refuse: `problem` names the field. It is not posted. */
  invalid(agentId: string, line: string, problem: string): void;
  /** A line longer than COMMAND_LINE_MAX_BYTES: `bytes` long, only its first `kept` bytes read (then logged or parsed as any line). */
  cut(agentId: string, bytes: number, kept: number): void;
}

/**
 * The `command` adapter (docs/spawner-protocol.md): any command line, through a shell. The agent learns who
 * it is from its environment (its prompt and task from files, too big for a variable at times), reads its inbox as JSON lines on stdin (closed when it is
 * terminated), and may print JSON objects with an `event` field on stdout to report events;
 * any other output is logged. Each valid event line also counts as a clean turn; an invalid
 * one (an unknown event, a missing or wrong field) is printed with the field and dropped.
 * A line longer than 64 KiB is cut there (with a note of its length): an event line that long
 * is dropped, being no longer JSON.
 */
export function commandAdapter(command: string, out: CommandAdapterOutput, launcher: AgentLauncher): Adapter {
  return {
    name: 'command',
    start(spec: StartSpec, hooks: AdapterHooks): AgentProcess {
      const { launch } = spec;
      const dir = launcher.newDir(launch.agent_id);
      let texts: Record<string, string>;
      try {
        texts = launchTexts(dir, launch);
      } catch (err) {
        dir.remove();
        throw err;
      }
      const child = launcher.spawn({
        dir,
        cwd: spec.cwd,
        launch,
        command: ['/bin/sh', '-c', command],
        // A command is any program: it gets the common names, and what --pass-env adds.
        env: {
          runtime: [],
          set: {
            ...texts,
            BEIDOU_URL: spec.mcpUrl,
            BEIDOU_SERVER: spec.serverUrl,
            BEIDOU_TOKEN: launch.token,
            BEIDOU_AGENT_ID: launch.agent_id,
            BEIDOU_TASK_ID: launch.task_id,
            BEIDOU_AGENT_NAME: launch.name,
            BEIDOU_WORKSPACE: launch.workspace_path,
            BEIDOU_SESSION_ID: spec.sessionId,
            BEIDOU_RESUME: spec.resume ? '1' : '',
          },
        },
      });
      hooks.onSession(spec.sessionId);
      const { writeLine, ...proc } = wrapChild(
        child,
        (line, cut) => {
          if (cut) out.cut(launch.agent_id, cut.bytes, cut.kept);
          const event = parseEventLine(line);
          if (!event) return out.line(launch.agent_id, line);
          const problem = drainedEventProblem(event);
          if (problem) return out.invalid(launch.agent_id, line, problem);
          hooks.onEvent(event);
          hooks.onCleanTurn();
        },
        command,
        COMMAND_LINE_MAX_BYTES,
      );
      const write = (obj: unknown) => writeLine(JSON.stringify(obj));
      if (spec.nudge)
        write({
          message_id: `nudge-${Date.now()}`,
          from: 'beidou',
          from_name: 'beidou',
          kind: 'system',
          content: spec.nudge,
        });
      return { ...proc, deliver: (message) => write(message) };
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
