import http from 'node:http';
import net from 'node:net';
import { until } from '../../src/testkit/poll.js';
import type { TestServer } from './server.js';

/**
 * A request on a raw socket whose headers and all of its body but the last byte are sent at
 * once, the last byte when the test says (`finish`): what a client does to hold a request
 * between the server's check of its token and the reading of its body. `response()` waits for
 * the whole answer (its Content-Length, or the connection's end); `closed` settles when the
 * server ends the connection; `text()` is everything received so far.
 */
export function slowRequest(
  ts: TestServer,
  method: string,
  route: string,
  headers: Record<string, string>,
  body: string,
) {
  const url = new URL(ts.url);
  const socket = net.connect(Number(url.port), url.hostname);
  let got = '';
  socket.setEncoding('utf8');
  socket.on('data', (d: string) => (got += d));
  socket.on('error', () => undefined);
  let ended = false;
  const closed = new Promise<void>((resolve) =>
    socket.once('close', () => {
      ended = true;
      resolve();
    }),
  );
  const head = [
    `${method} ${route} HTTP/1.1`,
    `Host: ${url.host}`,
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    'Content-Type: application/json',
    `Content-Length: ${Buffer.byteLength(body)}`,
    '',
    '',
  ].join('\r\n');
  const sent = new Promise<void>((resolve) =>
    socket.once('connect', () => socket.write(head + body.slice(0, -1), () => resolve())),
  );
  /** The answer once whole: status, headers (lower-case names) and body text. */
  const response = () =>
    until(`the answer to ${method} ${route}`, () => {
      const split = got.indexOf('\r\n\r\n');
      if (split === -1) return ended ? { status: 0, headers: {}, body: '' } : undefined;
      const [statusLine, ...lines] = got.slice(0, split).split('\r\n');
      const fields = Object.fromEntries(
        lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
      ) as Record<string, string>;
      const rest = got.slice(split + 4);
      const length = fields['content-length'];
      if (length !== undefined ? Buffer.byteLength(rest) < Number(length) : !ended) return undefined;
      return { status: Number(statusLine!.split(' ')[1]), headers: fields, body: rest };
    });
  return {
    sent,
    finish: () => socket.write(body.slice(-1)),
    response,
    closed,
    text: () => got,
    destroy: () => socket.destroy(),
  };
}

/**
 * Resolves once the server has handled everything already sent to it, on every connection:
 * three requests, one after another, each on a fresh connection. The event loop serves every
 * socket ready when it polls, so by the answer to the third the loop has passed at least one
 * poll since the bytes sent before the first were readable (with a token already verified,
 * its request has passed authentication then: that takes no more than that turn).
 */
export async function serverCaughtUp(ts: TestServer): Promise<void> {
  for (let i = 0; i < 3; i++) {
    await new Promise<void>((resolve, reject) => {
      http
        .get(`${ts.url}/api/health`, { agent: false }, (res) => {
          res.resume();
          res.once('end', () => resolve());
        })
        .once('error', reject);
    });
  }
}
