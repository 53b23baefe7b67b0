import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_REASON_LIMIT, StreamJsonDrain, truncate, type DrainOutput } from '../../src/spawner/drain.js';

/**
 * The stream-json drain on recorded Claude Code output (test/fixtures/stream-json: two
 * captures of Claude Code 2.1.332 run by test/claude-code/claude.test.ts's setup against the fake API,
 * and one hand-written file for the shapes those runs do not produce), with an injected
 * clock so tool durations are exact.
 */

const FIXTURES = path.resolve(import.meta.dirname, '../fixtures/stream-json');
const fixture = (name: string) =>
  readFileSync(path.join(FIXTURES, name), 'utf8')
    .split('\n')
    .filter((l) => l.length > 0);

type Ev = Record<string, any>;

/** Feeds every line, the clock reading `i * step` ms while line i is drained. */
function drainAll(lines: string[], step = 100): { events: Ev[]; outputs: DrainOutput[] } {
  let now = 0;
  const drain = new StreamJsonDrain(() => now);
  const outputs = lines.map((line, i) => {
    now = i * step;
    return drain.line(line);
  });
  return { events: outputs.flatMap((o) => o.events as Ev[]), outputs };
}

const named = (events: Ev[], name: string) => events.filter((e) => e.event === name);

describe('StreamJsonDrain on a recorded Claude Code session (two turns, parallel calls, errors)', () => {
  const lines = fixture('claude-code-2.1.332-two-turns.jsonl');
  const { events, outputs } = drainAll(lines);

  it('reports the session id from the init line', () => {
    expect(outputs[0]).toEqual({ events: [], sessionId: JSON.parse(lines[0]!).session_id });
    const sessions = new Set(outputs.map((o) => o.sessionId).filter(Boolean));
    expect(sessions.size).toBe(1);
  });

  it('counts usage once per message id, although each content block comes as its own line', () => {
    // msg_fake_1 comes as 2 lines (text, tool_use), msg_fake_2 as 3 (three tool_use).
    const ids = lines
      .map((l) => JSON.parse(l))
      .filter((l) => l.type === 'assistant')
      .map((l) => l.message.id);
    expect(ids).toEqual([
      'msg_fake_1',
      'msg_fake_1',
      'msg_fake_2',
      'msg_fake_2',
      'msg_fake_2',
      'msg_fake_3',
      'msg_fake_4',
    ]);
    const usage = named(events, 'turn.usage');
    expect(usage.map((e) => e.message_id)).toEqual(['msg_fake_1', 'msg_fake_2', 'msg_fake_3', 'msg_fake_4']);
    expect(usage[0]).toEqual({
      event: 'turn.usage',
      message_id: 'msg_fake_1',
      model: 'claude-opus-5-5',
      stop_reason: null,
      input_tokens: 101,
      output_tokens: 1,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 50,
    });
    // Input tokens reconcile with the turn's result; output tokens cannot: Claude Code's
    // stream-json assistant lines carry the usage of message_start (output_tokens 1) and a
    // null stop_reason, so run.cost is the only exact output figure.
    const firstCost = named(events, 'run.cost')[0]!;
    expect(usage.slice(0, 3).reduce((n, e) => n + e.input_tokens, 0)).toBe(firstCost.usage.input_tokens);
  });

  it('emits assistant_text for the text blocks, with their message id', () => {
    expect(named(events, 'assistant_text').map((e) => [e.message_id, e.text])).toEqual([
      ['msg_fake_1', 'Checking the team first.'],
      ['msg_fake_3', 'Done for now.'],
      ['msg_fake_4', 'All quiet.'],
    ]);
  });

  it('pairs each tool_called with its tool_result by tool_use_id, timing them with the injected clock', () => {
    const called = named(events, 'tool_called');
    expect(called.map((e) => [e.message_id, e.tool_use_id, e.name])).toEqual([
      ['msg_fake_1', 'toolu_fake_1', 'mcp__beidou__list_peers'],
      // the parallel calls: one message, three tool_use blocks
      ['msg_fake_2', 'toolu_fake_2', 'mcp__beidou__list_ready'],
      ['msg_fake_2', 'toolu_fake_3', 'mcp__beidou__send_message'],
      ['msg_fake_2', 'toolu_fake_4', 'Bash'],
    ]);
    expect(called[2]!.input).toEqual({ to: 'nobody', content: 'hi', caller_id: 'me' });
    const results = named(events, 'tool_result');
    // Lines: list_peers called on line 2 and answered on line 3; the parallel calls on lines
    // 4-6, their results on lines 7-9: each result comes 300 ms (three lines) after its call.
    expect(results.map((e) => [e.tool_use_id, e.duration_ms, e.is_error])).toEqual([
      ['toolu_fake_1', 100, false],
      ['toolu_fake_2', 300, true],
      ['toolu_fake_3', 300, true],
      ['toolu_fake_4', 300, true],
    ]);
    expect(results[0]!.error_reason).toBeNull();
  });

  it('keeps the text of an error result: our JSON for a Beidou tool, the raw text cut at 2,000 chars for a builtin', () => {
    const byId = new Map(named(events, 'tool_result').map((e) => [e.tool_use_id, e]));
    expect(byId.get('toolu_fake_2')!.error_reason).toMatch(
      /^\{"error":"no_active_plan","message":"you have no active plan/,
    );
    const invalid = byId.get('toolu_fake_3')!.error_reason as string;
    expect(invalid).toMatch(/^\{"error":"invalid_input",/);
    expect(JSON.parse(invalid.split('\n\n')[0]!)).toEqual({
      error: 'invalid_input',
      message: 'caller_id: identity comes from your token and cannot be supplied in the input',
      details: { field: 'caller_id' },
    });
    // Bash printed 2,600 x's and exited 3: Claude Code reports 2,612 characters.
    const raw = JSON.parse(lines[9]!).message.content[0].content as string;
    expect(raw.length).toBeGreaterThan(ERROR_REASON_LIMIT);
    const bash = byId.get('toolu_fake_4')!.error_reason as string;
    expect(bash).toBe(`${raw.slice(0, ERROR_REASON_LIMIT)}…(truncated)`);
    expect(bash.startsWith('Exit code 3\nxxx')).toBe(true);
  });

  it('turns each result line into run.cost and ends the turn cleanly', () => {
    const costs = named(events, 'run.cost');
    expect(costs).toHaveLength(2);
    const first = JSON.parse(lines[11]!);
    expect(costs[0]).toEqual({
      event: 'run.cost',
      total_cost_usd: first.total_cost_usd,
      duration_ms: first.duration_ms,
      duration_api_ms: first.duration_api_ms,
      num_turns: first.num_turns,
      usage: first.usage,
      model_usage: first.modelUsage,
    });
    expect(costs[0]!.total_cost_usd).toBeGreaterThan(0);
    expect(Object.keys(costs[1]!.model_usage)).toEqual(['claude-opus-5-5']);
    expect(outputs.filter((o) => o.turnEnded).map((o) => o.turnEnded)).toEqual([{ clean: true }, { clean: true }]);
  });

  it('emits events in the order of the lines, and nothing for the init lines', () => {
    expect(events.map((e) => e.event)).toEqual([
      'turn.usage',
      'assistant_text',
      'tool_called',
      'tool_result',
      'turn.usage',
      'tool_called',
      'tool_called',
      'tool_called',
      'tool_result',
      'tool_result',
      'tool_result',
      'turn.usage',
      'assistant_text',
      'run.cost',
      'turn.usage',
      'assistant_text',
      'run.cost',
    ]);
  });
});

describe('StreamJsonDrain on a recorded hook denial', () => {
  const lines = fixture('claude-code-2.1.332-hook-denied.jsonl');
  const { events, outputs } = drainAll(lines, 50);

  it('reports the denied tool as an error result carrying the hook reason', () => {
    expect(named(events, 'tool_called').map((e) => [e.tool_use_id, e.name])).toEqual([['toolu_fake_1', 'Write']]);
    const [result] = named(events, 'tool_result');
    expect(result).toMatchObject({ tool_use_id: 'toolu_fake_1', is_error: true, duration_ms: 50 });
    expect(result!.error_reason).toMatch(
      /^PreToolUse:Write hook error: .* signalled review and waits on you\. Approve with mcp__beidou__terminate_child/,
    );
  });

  it('ignores the Stop hook feedback turn and the notification, and still counts every message', () => {
    expect(JSON.parse(lines[4]!).message.content[0].text).toMatch(/^Stop hook feedback:/);
    expect(outputs[4]!.events).toEqual([]);
    expect(outputs[5]!.events).toEqual([]);
    expect(named(events, 'turn.usage').map((e) => e.message_id)).toEqual(['msg_fake_1', 'msg_fake_2', 'msg_fake_3']);
    expect(named(events, 'assistant_text').map((e) => e.text)).toEqual(['I will review the draft first.', 'OK.']);
    expect(named(events, 'run.cost')).toHaveLength(1);
    expect(outputs.at(-1)!.turnEnded).toEqual({ clean: true });
  });
});

describe('StreamJsonDrain on hand-written shapes', () => {
  const lines = fixture('hand-written-edge-cases.jsonl');
  const { events, outputs } = drainAll(lines, 10);

  it('counts usage once for a message of five fragments (thinking, text, tool, text, tool)', () => {
    const usage = named(events, 'turn.usage');
    expect(usage.map((e) => e.message_id)).toEqual(['msg_edge_1', 'msg_edge_2']);
    expect(usage[0]).toMatchObject({
      input_tokens: 1200,
      output_tokens: 3,
      cache_creation_input_tokens: 400,
      cache_read_input_tokens: 800,
    });
    // No cache figures in the line: none in the event.
    expect(usage[1]).toEqual({
      event: 'turn.usage',
      message_id: 'msg_edge_2',
      model: 'claude-sonnet-4-5',
      stop_reason: 'max_tokens',
      input_tokens: 1500,
      output_tokens: 4,
    });
  });

  it('emits one assistant_text per text fragment (each stream-json line is one assistant message)', () => {
    expect(named(events, 'assistant_text').map((e) => [e.message_id, e.text])).toEqual([
      ['msg_edge_1', 'Reading the spec, '],
      ['msg_edge_1', 'and searching for TODOs.'],
      ['msg_edge_2', 'Out of turns.'],
    ]);
  });

  it('joins the text blocks of an error result and skips the others; a result without is_error is a success', () => {
    const results = named(events, 'tool_result');
    expect(results.map((e) => [e.tool_use_id, e.is_error, e.error_reason, e.duration_ms])).toEqual([
      ['toolu_edge_grep', true, 'ripgrep failed: permission denied', 10],
      ['toolu_edge_read', false, null, 40],
    ]);
  });

  it('ignores a result whose call it never saw (a call made by an earlier process)', () => {
    expect(outputs[8]!.events).toEqual([]);
  });

  it('reads model_usage in either spelling and marks an error result as an unclean end of turn', () => {
    expect(named(events, 'run.cost')).toEqual([
      {
        event: 'run.cost',
        total_cost_usd: 0.0421,
        duration_ms: 5100,
        duration_api_ms: 4200,
        num_turns: 2,
        usage: { input_tokens: 2700, output_tokens: 7, cache_creation_input_tokens: 400, cache_read_input_tokens: 800 },
        model_usage: { 'claude-sonnet-4-5': { inputTokens: 2700, outputTokens: 7, costUSD: 0.0421 } },
      },
    ]);
    expect(outputs.at(-1)).toMatchObject({ turnEnded: { clean: false }, sessionId: 'sess-edge' });
  });
});

describe('StreamJsonDrain on anything else', () => {
  it('produces nothing for non-JSON output, unknown line types and an init without a session id', () => {
    const drain = new StreamJsonDrain(() => 0);
    for (const line of [
      '',
      'Loading MCP servers...',
      '{"type":"stream_event","event":{"type":"message_delta"}}',
      '{"type":"system","subtype":"init"}',
      '{"type":"system","subtype":"compact_boundary","session_id":"s"}',
      '[1,2]',
      '42',
      '"text"',
    ]) {
      expect(drain.line(line)).toEqual({ events: [] });
    }
  });

  // The adapter calls line() from a readline listener, where a throw would end the whole
  // spawner: JSON that is not a stream-json message is ignored.
  it('produces nothing for JSON that is not an object, or a null content block', () => {
    const drain = new StreamJsonDrain(() => 0);
    expect(drain.line('null')).toEqual({ events: [] });
    expect(drain.line('{"type":"assistant","message":{"id":"m","content":[null]}}')).toEqual({ events: [] });
    expect(drain.line('{"type":"user","message":{"content":[null]}}')).toEqual({ events: [] });
  });

  it('fills defaults for a result without figures, and never reports a negative duration', () => {
    let now = 1_000;
    const drain = new StreamJsonDrain(() => now);
    drain.line(
      JSON.stringify({
        type: 'assistant',
        message: { id: 'm1', content: [{ type: 'tool_use', id: 't1', name: 'Read', input: {} }] },
      }),
    );
    now = 400; // a clock that went back (another process's reading, a test's clock)
    expect(
      drain.line(
        JSON.stringify({
          type: 'user',
          message: { content: [{ type: 'tool_result', tool_use_id: 't1', content: 'ok' }] },
        }),
      ).events,
    ).toEqual([{ event: 'tool_result', tool_use_id: 't1', duration_ms: 0, is_error: false, error_reason: null }]);
    // The same result twice: the second has no call left to pair with.
    expect(
      drain.line(
        JSON.stringify({
          type: 'user',
          message: { content: [{ type: 'tool_result', tool_use_id: 't1', content: 'ok' }] },
        }),
      ).events,
    ).toEqual([]);
    expect(drain.line('{"type":"result","subtype":"success"}')).toEqual({
      events: [
        {
          event: 'run.cost',
          total_cost_usd: 0,
          duration_ms: 0,
          duration_api_ms: 0,
          num_turns: 0,
          usage: {},
          model_usage: {},
        },
      ],
      turnEnded: { clean: true },
    });
  });

  it('an error result with no text (only an image) has a null error_reason', () => {
    const drain = new StreamJsonDrain(() => 0);
    drain.line(
      JSON.stringify({
        type: 'assistant',
        message: { id: 'm', content: [{ type: 'tool_use', id: 't', name: 'Screenshot', input: {} }] },
      }),
    );
    const out = drain.line(
      JSON.stringify({
        type: 'user',
        message: {
          content: [
            { type: 'tool_result', tool_use_id: 't', is_error: true, content: [{ type: 'image', source: {} }] },
          ],
        },
      }),
    );
    expect(out.events).toEqual([
      { event: 'tool_result', tool_use_id: 't', duration_ms: 0, is_error: true, error_reason: null },
    ]);
  });

  it('truncate cuts at 2,000 characters exactly, with the suffix only when it cut', () => {
    expect(ERROR_REASON_LIMIT).toBe(2000);
    const exact = 'e'.repeat(2000);
    expect(truncate(exact)).toBe(exact);
    expect(truncate(`${exact}!`)).toBe(`${exact}…(truncated)`);
    expect(truncate('short')).toBe('short');
  });
});
