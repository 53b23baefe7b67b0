import express, { type NextFunction, type Request, type Response } from 'express';
import type { Services } from '../runtime/services.js';
import type { AdminStreams } from './api/admin-streams.js';
import { adminApi } from './api/admin.js';
import { closeIfBodyUnread } from './http/body.js';
import { dashboard } from './http/dashboard.js';
import { hookApi } from './api/hook.js';
import { hostGuard } from './http/host-guard.js';
import { spawnerApi } from './api/spawner.js';
import { tokensApi } from './api/tokens.js';
import { AuthRefusal, refuse, type Authenticator } from './http/auth.js';
import { ApiError, sendError, toApiError } from './http/errors.js';
import type { McpSessions } from './mcp/index.js';
import type { TasksFeed } from './api/tasks-stream.js';

/**
 * The HTTP surface: OAuth discovery 404s, the MCP endpoint, the admin API. Thin by design.
 * No body parser here: each authenticated route parses its body after its token is checked
 * (`Authenticator.admit`), so a request without a valid token costs no body read.
 */
export interface AppParts {
  auth: Authenticator;
  mcp: McpSessions;
  /** The admin token's SSE streams and their cap. */
  adminStreams: AdminStreams;
  /** What the task-list streams follow. */
  tasksFeed: TasksFeed;
  /** The built dashboard (dist/web/). */
  webRoot: string;
}

export function buildApp(
  services: Services,
  { auth, mcp, adminStreams, tasksFeed, webRoot }: AppParts,
  stopping: AbortSignal,
): express.Express {
  const { logger } = services;
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);

  const guard = hostGuard(services.config, logger);
  if (guard) app.use(guard);

  // Every request at trace level (headers included: the logger redacts credentials).
  if (logger.isLevelEnabled('trace')) {
    app.use((req, res, next) => {
      const started = performance.now();
      res.once('finish', () =>
        logger.trace(
          {
            req: { method: req.method, url: req.originalUrl, headers: req.headers },
            status: res.statusCode,
            ms: Math.round(performance.now() - started),
          },
          'request',
        ),
      );
      next();
    });
  }

  // No route reads a body on GET or HEAD: one that comes with a body ends its connection
  // after the answer (the health check and the dashboard take no token).
  app.use((req, res, next) => {
    const declaresBody =
      Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
    if (declaresBody && (req.method === 'GET' || req.method === 'HEAD')) closeIfBodyUnread(req, res);
    next();
  });

  // Claude Code probes OAuth discovery; a JSON 404 tells it this server uses bearer tokens.
  app.get(/^\/\.well-known\/oauth-(authorization-server|protected-resource)(\/.*)?$/, (_req, res) => {
    res
      .status(404)
      .json({ error: 'not_found', message: 'this server does not use OAuth; send Authorization: Bearer <token>' });
  });

  // The dashboard: the page built from web/ (it asks for the token itself).
  app.use(dashboard(webRoot));

  mcp.mount(app, auth);
  app.use('/api/spawner', spawnerApi(services, auth, stopping));
  app.use('/api/hook', hookApi(services, auth, mcp, stopping));
  app.use('/api', tokensApi(services, auth));
  app.use('/api', adminApi(services, auth, adminStreams, tasksFeed));

  app.use((req: Request, res: Response) => {
    closeIfBodyUnread(req, res);
    sendError(res, new ApiError(404, 'not_found', `no route for ${req.method} ${req.path}`));
  });

  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    // A token that stopped standing while its request waited (Authenticator.assertStanding).
    if (err instanceof AuthRefusal && !res.headersSent) return refuse(res, err);
    const known = toApiError(err) ?? paramError(err);
    if (!known) logger.error({ err, method: req.method, path: req.path }, 'request failed');
    if (res.headersSent) return void res.end();
    closeIfBodyUnread(req, res);
    sendError(res, known ?? new ApiError(500, 'internal_error', 'the server hit an unexpected error'));
  });
  return app;
}

/** A path parameter that is not valid percent-encoding (`/api/tasks/%ff`): the router throws a URIError. */
function paramError(err: unknown): ApiError | null {
  if (!(err instanceof URIError)) return null;
  return new ApiError(
    400,
    'invalid_input',
    'the path holds invalid percent-encoding (a parameter must decode as UTF-8)',
  );
}
