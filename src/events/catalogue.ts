import { z } from 'zod';

/**
 * The event catalogue: one zod schema per event, the fields the seed's observability
 * catalogue names (plus the standalone events SPEC §3–§5 adds). Every stored event also
 * carries the envelope `{seq, ts, event, task_id}`. Names and fields follow the seed so the
 * code can be held against `shared/seeds/observability.md` line by line.
 *
 * Internal producers are typed by these schemas at compile time; events that arrive from
 * outside (a spawner's drain) are validated against them at run time.
 */

const id = z.string().min(1);
const nullableId = id.nullable();

export const EVENT_FIELDS = {
  /** Standalone: a task and its root agent came into being. */
  task_created: z.object({
    root_agent_id: id,
    text: z.string(),
    name: z.string().nullable(),
    skill: z.string(),
    model: z.string().nullable(),
    workspace: z.string(),
    spawn: z.boolean(),
  }),
  /** Standalone: the task reached a terminal state. */
  task_ended: z.object({
    status: z.enum(['done', 'terminated', 'failed']),
    reason: z.string(),
  }),
  /** An agent was registered (task creation, create_team, spawn_agent). */
  agent_spawned: z.object({
    agent_id: id,
    name: z.string(),
    role: z.string().nullable(),
    skill: z.string(),
    description: z.string(),
    model: z.string().nullable(),
    team_id: nullableId,
    leader_id: id,
    plan_task_id: nullableId,
    workspace_path: z.string(),
    project_workspace_path: z.string(),
  }),
  /** Standalone: a launch request queued for a spawner (the assembled prompt and first turn). */
  'launch.requested': z.object({
    agent_id: id,
    prompt: z.string(),
    first_message: z.string(),
    model: z.string().nullable(),
    workspace_path: z.string(),
    project_workspace_path: z.string(),
  }),
  team_created: z.object({
    team_id: id,
    name: z.string(),
    leader_id: id,
    parent_team_id: nullableId,
    depth: z.number().int(),
    task: z.string(),
    rules: z.array(z.string()),
    via: z.enum(['create_team', 'spawn_agent']),
  }),
  /** Standalone: a team was created deeper than the warning depth (SPEC §4). */
  'depth.warning': z.object({
    team_id: id,
    depth: z.number().int(),
    max_depth: z.number().int(),
  }),
  /** Action side of a message: it entered the recipient's inbox. `caller_id` is an agent or "user". */
  send_message: z.object({
    caller_id: id,
    to: id,
    content: z.string(),
    message_id: id,
  }),
  /** Delivery side: the recipient consumed the message (exactly once). */
  agent_input: z.object({
    caller_id: id,
    from: id,
    message_kind: z.enum(['user', 'system', 'initial']),
    source: z.enum(['initial', 'queue']),
    content: z.string(),
    message_id: id,
    via: z.enum(['read_inbox', 'spawner', 'hook']),
  }),
  /** Standalone: a terminate sentinel was posted to an agent's inbox. */
  'terminate.posted': z.object({
    caller_id: id,
    agent_id: id,
    reason: z.enum(['admin', 'cascade', 'leader', 'leader_force', 'root_approved']),
  }),
  /** Standalone: the sentinel was consumed; the agent's token stops working. */
  'terminate.consumed': z.object({
    agent_id: id,
    via: z.enum(['server', 'spawner']),
  }),
} as const;

export type EventName = keyof typeof EVENT_FIELDS;
export const EVENT_NAMES = Object.keys(EVENT_FIELDS) as EventName[];

export type EventFields<N extends EventName> = z.infer<(typeof EVENT_FIELDS)[N]>;

/** What a producer hands to the log: the name, the task and the fields. */
export type EventDraft = {
  [N in EventName]: { event: N; task_id: string } & EventFields<N>;
}[EventName];

/** What the log stores and returns: the draft plus its place in the task's sequence. */
export type StoredEvent = EventDraft & { seq: number; ts: number };

export type StoredEventOf<N extends EventName> = Extract<StoredEvent, { event: N }>;

export const eventEnvelope = z.object({
  seq: z.number().int().positive(),
  ts: z.number(),
  event: z.string(),
  task_id: id,
});

/** The full stored shape of one event, for schemas/ and run-time validation. */
export function storedEventSchema(name: EventName) {
  return eventEnvelope.extend({ event: z.literal(name) }).extend(EVENT_FIELDS[name].shape);
}
