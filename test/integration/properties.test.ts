import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { ERROR_CODES } from '../../src/domain/errors.js';
import { PRIMITIVES } from '../../src/primitives/index.js';
import { waitForEvent } from '../support/events.js';
import { connectAgent, createTask, startTestServer, type TestAgent, type TestServer } from '../support/server.js';

/**
 * Property tests over every tool's input and every REST body: whatever a client sends, the
 * server answers with a structured error or a success, never a 500, a protocol error, a stack
 * trace or a crash; and a refusal changes nothing (the log gains at most an audit event).
 */

/** Events a refusal may write: they record the refusal itself. */
const AUDIT_EVENTS = new Set(['review_gate.denied', 'disallowed_alias.denied', 'ask_user_question.redirected']);
/** Tools that block on valid input (for a question's answer, or a message): their success paths are tested elsewhere. */
const BLOCKING = new Set(['ask_user', 'read_inbox']);
const CODES = new Set<string>(ERROR_CODES);
const RUNS = 60;

let ts: TestServer;

/** Every task's durable head, to see what a call wrote. */
function heads(): Map<string, number> {
  const log = ts.server.services.registry.log;
  return new Map([...ts.server.services.registry.state.tasks.keys()].map((id) => [id, log.durableSeq(id)]));
}

/** Names of the events written since `before`, across every task (new tasks included). */
function writtenSince(before: Map<string, number>): string[] {
  const log = ts.server.services.registry.log;
  const names: string[] = [];
  for (const [id, seq] of heads()) {
    const from = before.get(id) ?? 0;
    if (seq > from) names.push(...log.read(id, from, seq - from).map((e) => e.event));
  }
  return names;
}

const stackTrace = /\n\s+at .+:\d+/;

/** Hostile values: anything, plus strings that have broken servers before. */
const nasty = fc.oneof(
  fc.anything({ maxDepth: 3 }),
  fc.constantFrom(
    '',
    '__proto__',
    'constructor',
    'toString',
    '../../../../etc/cron.d/x',
    '%ff',
    'a'.repeat(300),
    '\u0000',
    '\ud800',
  ),
  fc.string(),
  fc.integer(),
  fc.double(),
);

/** An object shaped like a tool's input: its own field names (and a few forbidden ones) with hostile values. */
function shaped(keys: string[]): fc.Arbitrary<unknown> {
  const names = fc.constantFrom(...keys, '__proto__', 'caller_id', 'task_id', 'leader_id', 'extra');
  return fc.oneof(
    fc.dictionary(names, nasty, { maxKeys: 5 }),
    fc.dictionary(fc.constantFrom(...keys), nasty, { minKeys: keys.length, maxKeys: keys.length }),
    fc.anything({ maxDepth: 3 }),
  );
}

function inputKeys(schema: unknown): string[] {
  const shape = (schema as { shape?: Record<string, unknown> }).shape;
  const keys = shape ? Object.keys(shape) : [];
  return keys.length > 0 ? keys : ['x'];
}

describe('any tool input', () => {
  let root: TestAgent;
  beforeAll(async () => {
    ts = await startTestServer();
  });
  afterAll(async () => {
    await root?.close();
    await ts.close();
  });

  for (const primitive of PRIMITIVES) {
    it(`${primitive.name}: a structured result or error, never a protocol error; a refusal writes nothing`, async () => {
      // A task per tool, so one tool's successes (a review signalled, a team made) do not
      // shape what the next tool sees.
      const task = await createTask(ts);
      await root?.close();
      root = await connectAgent(ts.url, task.token);
      const args = shaped(inputKeys(primitive.inputSchema)).filter(
        // A valid input to a blocking tool would wait for an answer; refusals are what is under test.
        (input) => !BLOCKING.has(primitive.name) || !primitive.inputSchema.safeParse(input).success,
      );
      await fc.assert(
        fc.asyncProperty(args, async (input) => {
          const before = heads();
          let raw: CallToolResult;
          try {
            raw = (await root.client.callTool({
              name: primitive.name,
              arguments: input as Record<string, unknown>,
            })) as CallToolResult;
          } catch (err) {
            // A domain failure is a tool error, never a JSON-RPC error.
            throw new Error(
              `${primitive.name}(${safeJson(input)}) threw ${err instanceof McpError ? `JSON-RPC ${err.code}` : ''} ${String(err)}`,
            );
          }
          const text = (raw.content[0] as { text?: string } | undefined)?.text ?? '';
          expect(text).not.toMatch(stackTrace);
          if (!raw.isError) return;
          const error = JSON.parse(text) as { error: unknown; message: unknown; details: unknown };
          expect(CODES.has(String(error.error)), `unknown code ${String(error.error)}`).toBe(true);
          expect(error.error).not.toBe('internal_error');
          expect(typeof error.message).toBe('string');
          expect(typeof error.details).toBe('object');
          expect(writtenSince(before).filter((e) => !AUDIT_EVENTS.has(e))).toEqual([]);
        }),
        { numRuns: RUNS },
      );
    });
  }

  it('a tools/call whose arguments is not an object is an invalid_input tool error', async () => {
    const task = await createTask(ts);
    const agent = await connectAgent(ts.url, task.token);
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...PRIMITIVES.map((p) => p.name)),
          fc.oneof(fc.constant(null), fc.array(fc.anything()), fc.string(), fc.integer(), fc.boolean()),
          async (name, args) => {
            const raw = (await agent.client.callTool({
              name,
              arguments: args as unknown as Record<string, unknown>,
            })) as CallToolResult;
            expect(raw.isError).toBe(true);
            expect(JSON.parse((raw.content[0] as { text: string }).text).error).toBe('invalid_input');
          },
        ),
        { numRuns: 30 },
      );
    } finally {
      await agent.close();
    }
  });
});

describe('any REST body', () => {
  let task: { task_id: string; root_agent_id: string; token: string };
  let spawnerToken = '';
  let qid = '';
  beforeAll(async () => {
    ts = await startTestServer();
    task = await createTask(ts);
    spawnerToken = (await ts.api('POST', '/spawner-tokens', {})).body.token;
    // A question waiting for the user, so the answer route reaches its body checks.
    const asker = await connectAgent(ts.url, task.token);
    void asker
      .call('ask_user', {
        questions: [
          {
            question: 'Which?',
            header: 'Pick',
            options: [
              { label: 'A', description: 'a' },
              { label: 'B', description: 'b' },
            ],
            multiSelect: false,
          },
        ],
      })
      .catch(() => undefined);
    qid = (await waitForEvent(ts, task.task_id, (e) => e.event === 'question_asked', { what: 'the question' }))
      .qid as string;
  });
  afterAll(async () => {
    await ts.close();
  });

  /** [method, route, token] for every route that takes a body or a path parameter. */
  const routes = (id: string): Array<[string, string, () => string]> => [
    ['POST', '/api/tasks', () => ts.adminToken],
    ['POST', `/api/tasks/${id}/terminate`, () => ts.adminToken],
    ['POST', `/api/agents/${id}/send`, () => ts.adminToken],
    ['POST', `/api/agents/${id}/token`, () => ts.adminToken],
    ['POST', `/api/questions/${id}/answer`, () => ts.adminToken],
    ['POST', `/api/questions/${id}/decline`, () => ts.adminToken],
    ['POST', '/api/spawner-tokens', () => ts.adminToken],
    ['POST', '/api/hook/pre-tool-use', () => task.token],
    ['POST', '/api/spawner/ack', () => spawnerToken],
    ['POST', `/api/spawner/agents/${id}/started`, () => spawnerToken],
    ['POST', `/api/spawner/agents/${id}/events`, () => spawnerToken],
  ];

  const body = fc.oneof(
    fc.anything({ maxDepth: 4 }).map((v) => ({ raw: JSON.stringify(v) ?? 'null', type: 'application/json' })),
    fc.string().map((s) => ({ raw: s, type: 'application/json' })),
    fc
      .dictionary(
        fc.constantFrom(
          'task',
          'content',
          'answers',
          'events',
          'type',
          'agent_id',
          'message_id',
          'session_id',
          'tool_name',
          '__proto__',
          'spawn',
          'skill',
        ),
        nasty,
        { maxKeys: 4 },
      )
      .map((v) => ({
        raw: JSON.stringify(v),
        type: 'application/json',
      })),
    fc.constantFrom(
      { raw: '\x1f\x8b\x08\x00garbage', type: 'application/json', encoding: 'gzip' },
      { raw: 'not deflate', type: 'application/json', encoding: 'deflate' },
      { raw: '{"a":1}', type: 'text/plain' },
    ),
  );
  const param = fc.oneof(
    fc.string({ minLength: 1 }).map(encodeURIComponent),
    fc.constantFrom('%ff', '%', '%E0%A4%A', '..', '__proto__', 'constructor'),
  );

  it('answers every route with a success or a structured 4xx, never a 500; a refusal writes nothing', async () => {
    await fc.assert(
      fc.asyncProperty(param, body, fc.nat(), async (id, b, pick) => {
        const all = routes(pick % 3 === 0 ? qid : pick % 3 === 1 ? task.root_agent_id : id);
        const [method, route, token] = all[pick % all.length]!;
        const before = heads();
        const res = await fetch(`${ts.url}${route}`, {
          method,
          headers: {
            authorization: `Bearer ${token()}`,
            'content-type': b.type,
            ...('encoding' in b && b.encoding ? { 'content-encoding': b.encoding } : {}),
          },
          body: b.raw,
        });
        const text = await res.text();
        expect(res.status, `${method} ${route} ${b.raw.slice(0, 200)} → ${text.slice(0, 300)}`).toBeLessThan(500);
        expect(text).not.toMatch(stackTrace);
        if (res.status >= 400) {
          const parsed = JSON.parse(text) as { error: unknown; message: unknown };
          expect(typeof parsed.error).toBe('string');
          expect(typeof parsed.message).toBe('string');
          expect(writtenSince(before).filter((e) => !AUDIT_EVENTS.has(e))).toEqual([]);
        }
      }),
      { numRuns: 300 },
    );
    expect((await ts.api('GET', '/health')).status).toBe(200);
  });
});

function safeJson(value: unknown): string {
  try {
    return (JSON.stringify(value) ?? String(value)).slice(0, 300);
  } catch {
    return String(value);
  }
}
