import { existsSync } from 'node:fs';
import path from 'node:path';
import express, { Router, type Request, type Response } from 'express';

/**
 * The dashboard as served: the page `vite build` writes from `web/` into `dist/web/`
 * (docs/architecture.md). No token to load it; it asks for the admin token and reads the
 * admin API with it. The page is never cached (a new build shows at the next load); its
 * assets have content hashes in their names, so they are cached for good. The policy lets
 * the page load and talk only to this server: no inline script, nothing from elsewhere.
 */

export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const NOT_BUILT = 'the dashboard page has not been built: run `npm run build` (it writes dist/web/), then reload';

function secure(res: Response): void {
  res.setHeader('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Referrer-Policy', 'no-referrer');
}

/** A browser gets a page saying what to do; a script gets the usual JSON error. */
function notBuilt(req: Request, res: Response): void {
  secure(res);
  res.status(503).setHeader('Cache-Control', 'no-store');
  if (req.accepts(['json', 'html']) === 'html') {
    res
      .type('html')
      .send(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Beidou: dashboard not built</title></head>' +
          '<body><h1>Beidou: the dashboard is not built</h1><p>The server runs, but its dashboard page has not been built. ' +
          "In the server's folder run <code>npm run build</code> (it writes <code>dist/web/</code>), then reload this page.</p>" +
          '<p>The API works meanwhile: <a href="/api/health">/api/health</a>.</p></body></html>',
      );
  } else {
    res.json({ error: 'dashboard_not_built', message: NOT_BUILT });
  }
}

/** `webRoot`: the built page (`dist/web/` of the package unless a caller says otherwise). */
export function dashboard(webRoot: string): Router {
  const router = Router();
  const index = path.join(webRoot, 'index.html');
  const favicon = path.join(webRoot, 'favicon.svg');
  // Looked up per request: a build made while the server runs is served without a restart.
  const built = () => existsSync(index);

  router.get(['/', '/dashboard'], (req, res) => {
    if (!built()) return notBuilt(req, res);
    secure(res);
    res.sendFile(index, { headers: { 'Cache-Control': 'no-cache' } });
  });

  router.get(['/favicon.ico', '/favicon.svg'], (req, res) => {
    if (!built()) return notBuilt(req, res);
    res.type('image/svg+xml').sendFile(favicon, { headers: { 'Cache-Control': 'public, max-age=86400' } });
  });

  // Hashed names (index-3f9a1c.js): a file never changes under its name. A name not there falls through to the JSON 404.
  router.use(
    '/assets',
    (_req, res, next) => {
      secure(res);
      next();
    },
    express.static(path.join(webRoot, 'assets'), {
      index: false,
      redirect: false,
      immutable: true,
      maxAge: '365d',
      fallthrough: true,
    }),
  );
  return router;
}
