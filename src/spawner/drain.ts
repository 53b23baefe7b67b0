import { EVENT_FIELDS, SPAWNER_EVENTS, type AgentErrorReason } from '../events/catalogue.js';
import type { DrainedEvent } from '../protocol/spawner.js';

/**
 * The stream-json drain: turns Claude Code's `--output-format stream-json` lines into
 * Beidou events (observability.md). Usage counts once per message id (fragments of one
 * assistant message share it); tool calls pair with their results by `tool_use_id`, with
 * the time between them; an error result's text is cut at 2,000 characters.
 */

export const ERROR_REASON_LIMIT = 2000;

interface ContentBlock {
  type: string;
  text?: string;
  id?: string;
  name?: string;
  input?: unknown;
  tool_use_id?: string;
  content?: unknown;
  is_error?: boolean;
}

interface StreamLine {
  type?: string;
  subtype?: string;
  session_id?: string;
  message?: {
    id?: string;
    model?: string;
    stop_reason?: string | null;
    content?: ContentBlock[] | string;
    usage?: Record<string, number>;
  };
  total_cost_usd?: number;
  duration_ms?: number;
  duration_api_ms?: number;
  num_turns?: number;
  usage?: Record<string, unknown>;
  modelUsage?: Record<string, unknown>;
  model_usage?: Record<string, unknown>;
  is_error?: boolean;
  result?: unknown;
  errors?: unknown;
  /** On an assistant line Claude Code made up itself: `authentication_failed`, `rate_limit`, … */
  error?: string;
}

export interface DrainOutput {
  events: DrainedEvent[];
  sessionId?: string;
  /** A `result` line: the turn is over. `clean` unless the result is an error. */
  turnEnded?: { clean: boolean };
  /** The turn ended in an error result: Claude Code is not logged in, or the API refused. */
  failure?: { reason: AgentErrorReason; detail: string };
}

/** What Claude Code says when it has no usable credentials. */
const NOT_LOGGED_IN =
  /not logged in|please run \/login|authentication_failed|invalid api key|oauth token (has )?expired|authentication required/i;

const isBlock = (b: unknown): b is ContentBlock => b !== null && typeof b === 'object';

export function truncate(text: string, limit = ERROR_REASON_LIMIT): string {
  return text.length > limit ? `${text.slice(0, limit)}…(truncated)` : text;
}

function resultText(content: unknown): string | null {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return null;
  const texts = content
    .filter((b): b is { type: 'text'; text: string } => isBlock(b) && b.type === 'text' && typeof b.text === 'string')
    .map((b) => b.text);
  return texts.length > 0 ? texts.join('') : null;
}

export class StreamJsonDrain {
  private readonly seenUsage = new Set<string>();
  private readonly pendingTools = new Map<string, number>();

  /** The `error` of the last assistant line Claude Code made up (cleared at each result). */
  private lastError: string | null = null;

  constructor(private readonly now: () => number = () => performance.now()) {}

  private failureOf(msg: StreamLine): { reason: AgentErrorReason; detail: string } {
    const text =
      typeof msg.result === 'string' && msg.result.length > 0
        ? msg.result
        : Array.isArray(msg.errors)
          ? msg.errors.join('; ')
          : (msg.subtype ?? 'error');
    const kind = this.lastError;
    this.lastError = null;
    const reason: AgentErrorReason =
      kind === 'authentication_failed' || NOT_LOGGED_IN.test(text) ? 'not_logged_in' : 'api_error';
    return { reason, detail: truncate(text.replace(/\s+/g, ' ').trim(), 500) };
  }

  /** One line of stdout; non-JSON lines produce nothing. */
  line(raw: string): DrainOutput {
    let msg: StreamLine;
    try {
      msg = JSON.parse(raw) as StreamLine;
    } catch {
      return { events: [] };
    }
    // Only objects are stream-json messages (`null`, numbers and strings parse too).
    if (msg === null || typeof msg !== 'object') return { events: [] };
    switch (msg.type) {
      case 'system':
        return msg.subtype === 'init' && msg.session_id ? { events: [], sessionId: msg.session_id } : { events: [] };
      case 'assistant':
        if (typeof msg.error === 'string') this.lastError = msg.error;
        return { events: this.assistant(msg) };
      case 'user':
        return { events: this.toolResults(msg) };
      case 'result':
        return {
          events: [
            {
              event: 'run.cost',
              total_cost_usd: msg.total_cost_usd ?? 0,
              duration_ms: msg.duration_ms ?? 0,
              duration_api_ms: msg.duration_api_ms ?? 0,
              num_turns: msg.num_turns ?? 0,
              usage: msg.usage ?? {},
              model_usage: msg.modelUsage ?? msg.model_usage ?? {},
            } as DrainedEvent,
          ],
          turnEnded: { clean: msg.subtype === 'success' && msg.is_error !== true },
          ...(msg.session_id ? { sessionId: msg.session_id } : {}),
          ...(msg.is_error === true ? { failure: this.failureOf(msg) } : {}),
        };
      default:
        return { events: [] };
    }
  }

  private assistant(msg: StreamLine): DrainedEvent[] {
    const m = msg.message;
    if (!m) return [];
    const messageId = m.id ?? '';
    const blocks = Array.isArray(m.content) ? m.content.filter(isBlock) : [];
    const out: DrainedEvent[] = [];
    if (messageId && m.usage && !this.seenUsage.has(messageId)) {
      this.seenUsage.add(messageId);
      const u = m.usage;
      out.push({
        event: 'turn.usage',
        message_id: messageId,
        model: m.model ?? null,
        stop_reason: m.stop_reason ?? null,
        input_tokens: u.input_tokens ?? 0,
        output_tokens: u.output_tokens ?? 0,
        ...(u.cache_creation_input_tokens !== undefined
          ? { cache_creation_input_tokens: u.cache_creation_input_tokens }
          : {}),
        ...(u.cache_read_input_tokens !== undefined ? { cache_read_input_tokens: u.cache_read_input_tokens } : {}),
      } as DrainedEvent);
    }
    const text = blocks
      .filter((b) => b.type === 'text' && typeof b.text === 'string')
      .map((b) => b.text)
      .join('');
    if (text.length > 0)
      out.push({
        event: 'assistant_text',
        message_id: messageId,
        text,
        stop_reason: m.stop_reason ?? null,
      } as DrainedEvent);
    for (const b of blocks) {
      if (b.type !== 'tool_use' || !b.id) continue;
      this.pendingTools.set(b.id, this.now());
      out.push({
        event: 'tool_called',
        message_id: messageId || null,
        tool_use_id: b.id,
        name: b.name ?? '',
        input: b.input ?? null,
      } as DrainedEvent);
    }
    return out;
  }

  private toolResults(msg: StreamLine): DrainedEvent[] {
    const blocks = Array.isArray(msg.message?.content) ? msg.message.content.filter(isBlock) : [];
    const out: DrainedEvent[] = [];
    for (const b of blocks) {
      if (b.type !== 'tool_result' || !b.tool_use_id) continue;
      const started = this.pendingTools.get(b.tool_use_id);
      if (started === undefined) continue; // a result without its call: not ours to pair
      this.pendingTools.delete(b.tool_use_id);
      const isError = b.is_error === true;
      const text = isError ? resultText(b.content) : null;
      out.push({
        event: 'tool_result',
        tool_use_id: b.tool_use_id,
        duration_ms: Math.max(0, Math.round(this.now() - started)),
        is_error: isError,
        error_reason: text === null ? null : truncate(text),
      } as DrainedEvent);
    }
    return out;
  }
}

/**
 * A drained event checked as the server will check it (EVENT_FIELDS, the agent's identity
 * filled in from the route): null if it will be taken, else `field: what is wrong`. One bad
 * line must not make the server refuse the batch it would travel in.
 */
export function drainedEventProblem(raw: Record<string, unknown>): string | null {
  const name = raw.event;
  if (typeof name !== 'string' || !(SPAWNER_EVENTS as readonly string[]).includes(name)) {
    return `event: must be one of ${SPAWNER_EVENTS.join(', ')} (got ${JSON.stringify(name)})`;
  }
  const schema = EVENT_FIELDS[name as (typeof SPAWNER_EVENTS)[number]];
  const identity =
    name === 'terminate.forced'
      ? { agent_id: 'x', caller_id: 'watchdog', reason: 'watchdog_grace', team_id: null }
      : 'agent_id' in schema.shape
        ? { agent_id: 'x' }
        : { caller_id: 'x' };
  const parsed = schema.safeParse({ ...raw, ...identity });
  if (parsed.success) return null;
  const issue = parsed.error.issues[0]!;
  const field = issue.path.map(String).join('.') || '(event)';
  const value = issue.path.reduce<unknown>(
    (v, k) => (v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[k] : undefined),
    raw,
  );
  return value === undefined ? `${field}: required` : `${field}: ${issue.message}`;
}
