import http from 'node:http';
import type { RequestListener } from 'node:http';
import type { Config } from '../../config.js';
import type { Clock } from '../../util/clock.js';
import type { Logger } from '../../util/logger.js';

/**
 * The HTTP server with its time and connection limits (docs/security.md).
 *
 * - `requestTimeout` (BEIDOU_BODY_TIMEOUT_S): headers and whole body must arrive within
 *   it, else 408 and the connection ends. In Node 20 it stops counting once the request
 *   is fully received, so the long-lived responses (MCP GET and SSE streams, the events
 *   stream, the spawner stream, a blocked `ask_user` POST) are exempt by design: their
 *   requests are complete, only their responses last.
 * - `headersTimeout`: the headers alone (also cuts a connection that sends nothing).
 * - `keepAliveTimeout`: an idle kept-alive connection between requests.
 * - `maxConnections` (BEIDOU_MAX_CONNECTIONS): past it Node closes a new connection at
 *   once; the drops are logged at most once a minute.
 * `server.timeout` (socket inactivity) stays 0: it would cut quiet streams.
 */

const HEADERS_TIMEOUT_MS = 20_000;
const KEEP_ALIVE_MS = 65_000;
const DROP_LOG_INTERVAL_S = 60;

export function createHttpServer(app: RequestListener, config: Config, logger: Logger, clock: Clock): http.Server {
  const bodyMs = config.bodyTimeoutS * 1000;
  const server = http.createServer(
    {
      requestTimeout: bodyMs,
      headersTimeout: Math.min(HEADERS_TIMEOUT_MS, bodyMs), // Node requires headers ≤ request
      keepAliveTimeout: KEEP_ALIVE_MS,
      // How often expired requests are looked for: the limit's precision.
      connectionsCheckingInterval: Math.min(5_000, Math.max(100, bodyMs / 4)),
    },
    app,
  );
  server.maxConnections = config.maxConnections;

  let lastLogged = -Infinity;
  let dropped = 0;
  server.on('drop', () => {
    dropped++;
    const now = clock.now();
    if (now - lastLogged < DROP_LOG_INTERVAL_S) return;
    logger.warn(
      { dropped, max: config.maxConnections, setting: 'BEIDOU_MAX_CONNECTIONS' },
      'connection cap reached: new connections are closed at once',
    );
    lastLogged = now;
    dropped = 0;
  });
  return server;
}
