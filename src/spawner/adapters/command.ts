import type { DrainedEvent } from '../../protocol/spawner.js';
import type { Adapter, AdapterHooks, AgentProcess, StartSpec } from '../adapter.js';
import { wrapChild } from '../adapter.js';
import type { AgentLauncher } from '../agent-launcher.js';
import { drainedEventProblem } from '../drain.js';
import { COMMAND_LINE_MAX_BYTES, cutToBytes, type LineCut } from '../line-reader.js';
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
  /** A line longer than COMMAND_LINE_MAX_BYTES that is logged: `bytes` long, only its first `kept` bytes logged. */
  cut(agentId: string, bytes: number, kept: number): void;
}

/**
 * The `command` adapter (docs/spawner-protocol.md): any command line, through a shell. The agent learns who
 * it is from its environment (its prompt and task from files, too big for a variable at times), reads its inbox as JSON lines on stdin (closed when it is
 * terminated), and may print JSON objects with an `event` field on stdout to report events;
 * any other output is logged. Each valid event line also counts as a clean turn; an invalid
 * one (an unknown event, a missing or wrong field) is printed with the field and dropped.
 * A line is read whole up to 4 MiB (the largest request the server takes), so an event line
 * of a long text is posted whole; what is logged of a line is cut to 64 KiB (with a note of
 * its length). A line past 4 MiB is no longer JSON: it is logged, cut.
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
        (line, readCut) => {
          // A line cut at 4 MiB is no longer JSON.
          const event = readCut ? null : parseEventLine(line);
          if (!event) return out.line(launch.agent_id, forLog(launch.agent_id, line, readCut, out));
          const problem = drainedEventProblem(event);
          if (problem) return out.invalid(launch.agent_id, forLog(launch.agent_id, line, readCut, out), problem);
          hooks.onEvent(event);
          hooks.onCleanTurn();
        },
        command,
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

/** What is logged of a line read whole: its first 64 KiB, with a note of its real length when cut. */
function forLog(agentId: string, line: string, readCut: LineCut | null, out: CommandAdapterOutput): string {
  const logged = cutToBytes(line, COMMAND_LINE_MAX_BYTES);
  if (logged) out.cut(agentId, readCut?.bytes ?? logged.cut.bytes, logged.cut.kept);
  return logged?.text ?? line;
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
