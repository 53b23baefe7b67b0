import type { Express } from 'express';
import type { AnyPrimitive } from '../../primitives/define.js';
import type { Services } from '../../runtime/services.js';
import type { Authenticator } from '../http/auth.js';
import { mountMcpRoutes } from './routes.js';
import { sessionServerFactory, type SessionServerFactory } from './session-server.js';
import { SessionRegistry } from './sessions.js';

/**
 * The MCP endpoint as the server holds it: the session registry (sessions.ts) that also
 * mounts the routes (routes.ts), which give each session its own SDK server (session-server.ts).
 * Here rather than in sessions.ts so that the routes can use the registry without a cycle.
 */
export class McpSessions extends SessionRegistry {
  private readonly newServer: SessionServerFactory;

  constructor(services: Services, catalogue: readonly AnyPrimitive[], auth: Authenticator) {
    super(services, auth);
    this.newServer = sessionServerFactory(services, catalogue);
  }

  /** Routes for /mcp, /sse and /messages (auth has already run and set req.principal). */
  mount(app: Express, auth: Authenticator): void {
    mountMcpRoutes(app, auth, this.services, this, this.newServer);
  }
}
