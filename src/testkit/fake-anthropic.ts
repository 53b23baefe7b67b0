// In src/ (not test/support/) so the bench, compiled from src/, runs Claude Code against it as the tests do.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeReply } from './fake-anthropic-reply.js';

/**
 * A scripted stand-in for the Anthropic Messages API, for running the real Claude Code
 * binary against (`ANTHROPIC_BASE_URL=fake.url`). It listens on a free loopback port and
 * answers `POST /v1/messages` with streaming SSE (or JSON when `stream` is false), and
 * everything else Claude Code asks harmlessly (`count_tokens`, probes).
 *
 * The script is an ordered list of turns: text, or tool calls (several in one turn are
 * parallel calls). A request takes the next turn when its last user message answers the
 * previous turn: the tool_result of every tool_use of a tool turn, or new user text after a
 * text turn. A request that repeats a trigger already seen (a retry) gets the same turn
 * again; a request that answers nothing the script expects, or comes after the script's
 * end, is answered with plain text and consumes nothing. So are side requests (no tools:
 * titles, summaries, classifiers; Claude Code 2.1.332 in `-p` mode made none in our runs,
 * and with nonessential traffic allowed it only adds a `HEAD /api/hello` probe).
 *
 * Every request is recorded, so tests assert what Claude Code sent, and wait on it.
 */

export interface ToolCall {
  name: string;
  input: Record<string, unknown>;
  /** Defaults to `toolu_fake_<n>`. */
  id?: string;
}

export type ScriptTurn = { text: string } | { tools: ToolCall[]; text?: string };

export interface ContentBlock {
  type: string;
  text?: string;
  id?: string;
  name?: string;
  input?: unknown;
  tool_use_id?: string;
  content?: unknown;
  is_error?: boolean;
  [key: string]: unknown;
}

export interface Message {
  role: string;
  content: string | ContentBlock[];
}

export interface MessagesBody {
  model: string;
  stream?: boolean;
  tools?: Array<{ name: string; [key: string]: unknown }>;
  messages: Message[];
  system?: unknown;
  [key: string]: unknown;
}

export interface RecordedRequest {
  /** When it arrived (`performance.now()` of this process), before its body was read: what latency is measured to. */
  at: number;
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  /** The parsed JSON body, or null. */
  body: any;
  /** For `POST /v1/messages`: how it was answered. */
  kind?: 'scripted' | 'side' | 'unscripted';
  /** For a scripted answer: the index of the turn in the script. */
  turn?: number;
  /** For `POST /v1/messages`: the id of the message it was answered with, and its tool_use ids. */
  messageId?: string;
  toolUseIds?: string[];
}

export interface FakeAnthropic {
  url: string;
  /** Every request, in arrival order. */
  readonly requests: RecordedRequest[];
  /** The `POST /v1/messages` requests that the script answered (retries included). */
  scripted(): RecordedRequest[];
  /** Appends turns to the script. */
  push(...turns: ScriptTurn[]): void;
  /** How many turns have been handed out. */
  readonly consumed: number;
  /** Resolves with the first request (already recorded or still to come) matching `match`. */
  waitForRequest(
    match: (r: RecordedRequest) => boolean,
    opts?: { timeoutMs?: number; what?: string },
  ): Promise<RecordedRequest>;
  /** The request that took turn `index` (waits for it). */
  waitForTurn(index: number, opts?: { timeoutMs?: number }): Promise<RecordedRequest>;
  close(): Promise<void>;
}

/** The blocks of a message, a plain string content read as one text block. */
export function blocks(message: Message | undefined): ContentBlock[] {
  if (!message) return [];
  return typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content;
}

/** The last message with role `user` (Claude Code may put other roles after it). */
export function lastUserMessage(body: MessagesBody): Message | undefined {
  return [...(body.messages ?? [])].reverse().find((m) => m.role === 'user');
}

/** Every tool_result block of the last user message. */
export function toolResults(body: MessagesBody): ContentBlock[] {
  return blocks(lastUserMessage(body)).filter((b) => b.type === 'tool_result');
}

/** The text of a tool_result's content (a string or text blocks). */
export function resultText(result: ContentBlock): string {
  const c = result.content;
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((b: ContentBlock) => (b.type === 'text' ? (b.text ?? '') : '')).join('');
  return '';
}

/** All the text of the last user message (text blocks, and tool_result texts). */
export function lastUserText(body: MessagesBody): string {
  return blocks(lastUserMessage(body))
    .map((b) => (b.type === 'text' ? (b.text ?? '') : b.type === 'tool_result' ? resultText(b) : ''))
    .join('\n');
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export async function startFakeAnthropic(script: ScriptTurn[] = []): Promise<FakeAnthropic> {
  const turns = [...script];
  const requests: RecordedRequest[] = [];
  const waiters = new Set<() => void>();
  /** Trigger signature (the last user message) → the turn it took. */
  const triggers = new Map<string, number>();
  let next = 0;
  let ids = 0;
  let toolIds = 0;
  /** The tool_use ids the last handed-out turn is waiting results for (empty after a text turn). */
  let expecting: string[] = [];
  /** Tool ids given to each turn, so a retried turn keeps them. */
  const turnToolIds = new Map<number, string[]>();

  const record = (r: RecordedRequest) => {
    requests.push(r);
    for (const w of [...waiters]) w();
  };

  /** Which turn answers this main request, or null (answer with plain text). */
  const pick = (body: MessagesBody): number | null => {
    const last = lastUserMessage(body);
    const signature = JSON.stringify(last ?? null);
    const seen = triggers.get(signature);
    if (seen !== undefined) return seen;
    if (next >= turns.length) return null;
    const results = new Set(
      blocks(last)
        .filter((b) => b.type === 'tool_result')
        .map((b) => b.tool_use_id),
    );
    const hasText = blocks(last).some((b) => b.type === 'text' && (b.text ?? '').trim().length > 0);
    const answers = expecting.length > 0 ? expecting.every((id) => results.has(id)) : hasText && results.size === 0;
    if (!answers) return null;
    const index = next++;
    triggers.set(signature, index);
    const turn = turns[index]!;
    const idsOfTurn = 'tools' in turn ? turn.tools.map((t) => t.id ?? `toolu_fake_${++toolIds}`) : [];
    turnToolIds.set(index, idsOfTurn);
    expecting = idsOfTurn;
    return index;
  };

  const contentOf = (index: number | null): ContentBlock[] => {
    if (index === null) return [{ type: 'text', text: 'OK.' }];
    const turn = turns[index]!;
    if (!('tools' in turn)) return [{ type: 'text', text: turn.text }];
    const idsOfTurn = turnToolIds.get(index)!;
    return [
      ...(turn.text ? [{ type: 'text', text: turn.text }] : []),
      ...turn.tools.map((t, i) => ({ type: 'tool_use', id: idsOfTurn[i]!, name: t.name, input: t.input })),
    ];
  };

  const answerMessages = (body: MessagesBody, res: ServerResponse, recorded: RecordedRequest) => {
    const side = !body.tools || body.tools.length === 0;
    const index = side ? null : pick(body);
    recorded.kind = side ? 'side' : index === null ? 'unscripted' : 'scripted';
    if (index !== null) recorded.turn = index;
    const content = contentOf(index);
    const id = `msg_fake_${++ids}`;
    recorded.messageId = id;
    recorded.toolUseIds = content.filter((b) => b.type === 'tool_use').map((b) => b.id!);
    const usage = {
      input_tokens: 100 + ids,
      output_tokens: 10 + content.length,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 50,
    };
    writeReply(res, { id, model: body.model, content, usage }, body.stream);
  };

  const server = createServer((req, res) => {
    const at = performance.now();
    void (async () => {
      const raw = await readBody(req);
      let body: any = null;
      try {
        body = raw ? JSON.parse(raw) : null;
      } catch {
        body = null;
      }
      const path = (req.url ?? '/').split('?')[0]!;
      const recorded: RecordedRequest = { at, method: req.method ?? 'GET', path, headers: req.headers, body };
      const json = (status: number, obj: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(obj));
      };
      if (req.method === 'POST' && path === '/v1/messages' && body && Array.isArray(body.messages)) {
        answerMessages(body as MessagesBody, res, recorded);
      } else if (req.method === 'POST' && path === '/v1/messages/count_tokens') {
        json(200, { input_tokens: Math.ceil(raw.length / 4) });
      } else if (req.method === 'HEAD' || req.method === 'GET') {
        if (req.method === 'HEAD') res.writeHead(200).end();
        else json(200, {});
      } else {
        json(404, {
          type: 'error',
          error: { type: 'not_found_error', message: `fake-anthropic: no ${req.method} ${path}` },
        });
      }
      record(recorded);
    })().catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ type: 'error', error: { type: 'api_error', message: String(err) } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const waitForRequest: FakeAnthropic['waitForRequest'] = (match, opts = {}) => {
    const timeoutMs = opts.timeoutMs ?? 60_000;
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = requests.find(match);
        if (!found) return;
        done();
        resolve(found);
      };
      const timer = setTimeout(() => {
        done();
        const seen = requests
          .map((r) => `${r.method} ${r.path}${r.kind ? ` (${r.kind}${r.turn !== undefined ? ` ${r.turn}` : ''})` : ''}`)
          .join(', ');
        reject(
          new Error(
            `fake-anthropic: timed out after ${timeoutMs} ms waiting for ${opts.what ?? 'a request'}; got: ${seen || 'nothing'}`,
          ),
        );
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  };

  return {
    url,
    requests,
    scripted: () => requests.filter((r) => r.kind === 'scripted'),
    push: (...more) => void turns.push(...more),
    get consumed() {
      return next;
    },
    waitForRequest,
    waitForTurn: (index, opts = {}) =>
      waitForRequest((r) => r.kind === 'scripted' && r.turn === index, { ...opts, what: `scripted turn ${index}` }),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
