import { z } from 'zod';
import type { EventDraft, InboxKind } from '../events/catalogue.js';

/**
 * The spawner wire protocol, imported by both sides: the server (`server/spawner-api.ts`,
 * `runtime/spawners/`) and the spawner process (`spawner/`). One SSE stream of commands
 * from the server; posts from the spawner for heartbeats, acknowledgements, starts and
 * drained events. docs/spawner-protocol.md describes it in full.
 */

/** Every route is under this prefix, with a spawner token and the instance header. */
export const SPAWNER_API = '/api/spawner';

/** The header carrying a spawner process's instance id; with the token's subject, its identity. */
export const INSTANCE_HEADER = 'beidou-spawner-instance';

/**
 * The header keying a report sent from a spawner's spool: its spool sequence (1, 2, …,
 * increasing per spawner). The server commits a report only above the spawner's high-water
 * mark, so a replayed one is acknowledged and ignored.
 */
export const SPOOL_SEQ_HEADER = 'beidou-spool-seq';

export interface HelloCommand {
  type: 'hello';
  spawner_id: string;
  heartbeat_s: number;
  terminate_grace_s: number;
  /** Agents this spawner should be running; any other local process is to be ended. */
  agents: string[];
}

export interface LaunchCommand {
  type: 'launch';
  agent_id: string;
  task_id: string;
  name: string;
  skill: string;
  token: string;
  prompt: string;
  first_message: string;
  model: string | null;
  workspace_path: string;
  project_workspace_path: string;
  allowed_tools: string[];
  /** The root answers to the user: its escalations go to the gateway. */
  is_root: boolean;
  resume: boolean;
  session_id: string | null;
  /**
   * The agent's strikes so far, reduced by the server from `agent_crashed` and
   * `contract_violation` (reset on a clean turn): a supervisor continues them rather than
   * starting from zero, so moving an agent to another spawner does not forgive its crashes.
   * Absent from an older server: zero.
   */
  crash_strikes?: number;
  contract_strikes?: number;
}

export interface DeliverCommand {
  type: 'deliver';
  agent_id: string;
  message_id: string;
  from: string;
  from_name: string;
  kind: InboxKind;
  /** The delivered text: `[from <name> (<agent_id>)] <content>`, prefixed `[redelivered] ` when `redelivered`. */
  content: string;
  /** Present (true) when an earlier delivery of this message (a reply cut by a server crash) may have reached the agent. */
  redelivered?: true;
}

export interface TerminateCommand {
  type: 'terminate';
  agent_id: string;
}

/**
 * The spawner runs a process for an agent that is not its own any more (terminated, given
 * to another spawner, or holding a revoked token, to be launched again with a fresh one):
 * kill it and report nothing (there is nothing to acknowledge).
 */
export interface StopCommand {
  type: 'stop';
  agent_id: string;
  reason: 'terminated' | 'reassigned' | 'unknown_agent' | 'token_revoked';
}

/** What the server sends on the command stream (SSE event `command`, JSON data). */
export type SpawnerCommand = HelloCommand | LaunchCommand | DeliverCommand | TerminateCommand | StopCommand;

/** GET /stream query: how many agents this spawner takes, and a display name. */
export const streamQuery = z.object({
  max_agents: z.coerce.number().int().min(1).max(10_000).default(16),
  name: z.string().max(200).default(''),
});

/** One agent process a spawner really runs, as its heartbeat reports it (`pid` null: between two processes). */
export const runningAgent = z.strictObject({
  agent_id: z.string().min(1).max(200),
  pid: z.number().int().positive().nullable(),
  session_id: z.string().max(200).nullable(),
});
export type RunningAgent = z.infer<typeof runningAgent>;

/**
 * POST /heartbeat: keeps the spawner's agents assigned to it and, when `agents` is present,
 * reports what it runs so the server reconciles its registry with it. `{}` (an older
 * spawner) only beats.
 */
export const heartbeatBody = z.strictObject({ agents: z.array(runningAgent).max(10_000).optional() });
export type HeartbeatBody = z.input<typeof heartbeatBody>;

/** POST /ack: a delivery written into its agent, or a terminated agent's process ended. */
export const ackBody = z.strictObject({
  type: z.enum(['deliver', 'terminate']),
  agent_id: z.string().min(1),
  message_id: z.string().min(1).optional(),
});
export type AckBody = z.input<typeof ackBody>;

/** POST /agents/:id/started: the process is up (its session id, and whether it resumed one). */
export const startedBody = z.strictObject({
  session_id: z.string().min(1).nullable().default(null),
  resumed: z.boolean().default(false),
});
export type StartedBody = z.input<typeof startedBody>;

/** POST /agents/:id/events: drained events, taken whole or not at all. */
export const eventsBody = z.strictObject({ events: z.array(z.record(z.string(), z.unknown())).min(1).max(1000) });

/** A drained event as a spawner posts it: the server fills in the agent's identity. */
export type DrainedEvent = Omit<EventDraft, 'task_id' | 'caller_id' | 'agent_id'> & Record<string, unknown>;
