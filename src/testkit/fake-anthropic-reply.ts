import type { ServerResponse } from 'node:http';

/**
 * How the fake Anthropic API (fake-anthropic.ts) writes an answer to `POST /v1/messages`: one
 * JSON message, or, when the request asked to stream, the SSE events of the Messages API in
 * the order Claude Code reads them.
 */

/** An assistant message as the fake answers it. */
export interface AssistantReply {
  id: string;
  model: string;
  content: Array<{ type: string; text?: string; id?: string; name?: string; input?: unknown }>;
  usage: {
    input_tokens: number;
    output_tokens: number;
    cache_creation_input_tokens: number;
    cache_read_input_tokens: number;
  };
}

export function writeReply(res: ServerResponse, reply: AssistantReply, stream: boolean | undefined): void {
  const { id, model, content, usage } = reply;
  const stopReason = content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn';
  if (!stream) {
    res.writeHead(200, { 'content-type': 'application/json', 'request-id': `req_${id}` });
    res.end(
      JSON.stringify({
        id,
        type: 'message',
        role: 'assistant',
        model,
        content,
        stop_reason: stopReason,
        stop_sequence: null,
        usage,
      }),
    );
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'request-id': `req_${id}` });
  const send = (type: string, data: Record<string, unknown>) =>
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  send('message_start', {
    message: {
      id,
      type: 'message',
      role: 'assistant',
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { ...usage, output_tokens: 1 },
    },
  });
  content.forEach((block, index) => {
    if (block.type === 'text') {
      send('content_block_start', { index, content_block: { type: 'text', text: '' } });
      send('content_block_delta', { index, delta: { type: 'text_delta', text: block.text } });
    } else {
      send('content_block_start', {
        index,
        content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} },
      });
      const json = JSON.stringify(block.input);
      // Two fragments, as the real API streams partial JSON.
      const cut = Math.floor(json.length / 2);
      send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: json.slice(0, cut) } });
      send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: json.slice(cut) } });
    }
    send('content_block_stop', { index });
  });
  send('message_delta', {
    delta: { stop_reason: stopReason, stop_sequence: null },
    usage: { output_tokens: usage.output_tokens },
  });
  send('message_stop', {});
  res.end();
}
