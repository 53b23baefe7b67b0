import http from 'node:http';

/**
 * A lean MCP client for load generation: JSON-RPC over Streamable HTTP on a keep-alive
 * socket, parsing just enough of the answer (JSON or one SSE `data:` line). The SDK client
 * spends more CPU per call than the server does, so measuring the server through it would
 * measure the client. Tests use the real SDK client; only the bench uses this.
 */
export class WireClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  private sessionId = '';
  private nextId = 1;

  constructor(
    private readonly url: URL,
    private readonly token: string,
  ) {}

  private post(body: unknown): Promise<{ headers: http.IncomingHttpHeaders; text: string }> {
    const payload = JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = http.request(
        this.url,
        {
          method: 'POST',
          agent: this.agent,
          headers: {
            authorization: `Bearer ${this.token}`,
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'content-length': Buffer.byteLength(payload),
            ...(this.sessionId ? { 'mcp-session-id': this.sessionId, 'mcp-protocol-version': '2025-06-18' } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
  }

  private static result(text: string): {
    result?: { isError?: boolean; structuredContent?: unknown };
    error?: unknown;
  } {
    const trimmed = text.trimStart();
    if (trimmed.startsWith('{')) return JSON.parse(trimmed);
    // SSE: the response is the last `data:` line carrying a JSON-RPC message with an id.
    const lines = text.split('\n').filter((l) => l.startsWith('data:'));
    for (let i = lines.length - 1; i >= 0; i--) {
      const msg = JSON.parse(lines[i]!.slice(5));
      if ('id' in msg) return msg;
    }
    throw new Error(`no JSON-RPC response in: ${text.slice(0, 200)}`);
  }

  async connect(): Promise<void> {
    const init = await this.post({
      jsonrpc: '2.0',
      id: this.nextId++,
      method: 'initialize',
      params: {
        protocolVersion: '2025-06-18',
        capabilities: {},
        clientInfo: { name: 'beidou-bench-wire', version: '0' },
      },
    });
    this.sessionId = String(init.headers['mcp-session-id'] ?? '');
    if (!this.sessionId) throw new Error(`initialize gave no session: ${init.text.slice(0, 200)}`);
    await this.post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  }

  async callTool(
    name: string,
    args: Record<string, unknown>,
  ): Promise<{ isError: boolean; structuredContent?: unknown }> {
    const { text } = await this.post({
      jsonrpc: '2.0',
      id: this.nextId++,
      method: 'tools/call',
      params: { name, arguments: args },
    });
    const msg = WireClient.result(text);
    if (msg.error) return { isError: true };
    return { isError: Boolean(msg.result?.isError), structuredContent: msg.result?.structuredContent };
  }

  close(): void {
    this.agent.destroy();
  }
}
