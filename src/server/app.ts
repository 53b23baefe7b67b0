import path from 'node:path';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Services } from '../runtime/services.js';
import { adminApi } from './api.js';
import { hookApi } from './hook-api.js';
import { spawnerApi } from './spawner-api.js';
import type { Authenticator } from './auth.js';
import { ApiError, sendError, toApiError } from './http-errors.js';
import type { McpSessions } from './mcp.js';
import { PACKAGE_ROOT } from '../util/version.js';

const BODY_LIMIT = '4mb';

/** The HTTP surface: OAuth discovery 404s, the MCP endpoint, the admin API. Thin by design. */
export function buildApp(services: Services, auth: Authenticator, mcp: McpSessions, stopping: AbortSignal): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);

  // Claude Code probes OAuth discovery; a JSON 404 tells it this server uses bearer tokens.
  app.get(/^\/\.well-known\/oauth-(authorization-server|protected-resource)(\/.*)?$/, (_req, res) => {
    res.status(404).json({ error: 'not_found', message: 'this server does not use OAuth; send Authorization: Bearer <token>' });
  });

  // The dashboard: one static page reading the admin API (it asks for the token itself).
  const dashboard = path.join(PACKAGE_ROOT, 'public', 'index.html');
  app.get(['/', '/dashboard'], (_req, res) => res.sendFile(dashboard));

  app.use(express.json({ limit: BODY_LIMIT, strict: false }));
  mcp.mount(app, auth);
  app.use('/api/spawner', spawnerApi(services, auth, stopping));
  app.use('/api/hook', hookApi(services, auth));
  app.use('/api', adminApi(services, auth, stopping));

  app.use((req: Request, res: Response) => {
    sendError(res, new ApiError(404, 'not_found', `no route for ${req.method} ${req.path}`));
  });

  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const known = toApiError(err) ?? bodyParserError(err);
    if (!known) services.logger.error({ err, method: req.method, path: req.path }, 'request failed');
    if (res.headersSent) return void res.end();
    sendError(res, known ?? new ApiError(500, 'internal_error', 'the server hit an unexpected error'));
  });
  return app;
}

function bodyParserError(err: unknown): ApiError | null {
  const type = (err as { type?: string } | null)?.type;
  if (type === 'entity.parse.failed') return new ApiError(400, 'invalid_json', 'the request body is not valid JSON');
  if (type === 'entity.too.large') return new ApiError(413, 'payload_too_large', `the request body is over ${BODY_LIMIT}`);
  if (type === 'encoding.unsupported' || type === 'charset.unsupported') {
    return new ApiError(415, 'unsupported_encoding', 'send the body as UTF-8 JSON');
  }
  return null;
}
