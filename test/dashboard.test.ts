import { afterEach, describe, expect, it } from 'vitest';
import { removeHome, startTestServer, type TestServer } from './support/server.js';

describe('dashboard', () => {
  let ts: TestServer;
  afterEach(async () => {
    await ts.close();
    removeHome(ts.home);
  });

  it('serves its static page without a token', async () => {
    ts = await startTestServer();
    for (const route of ['/', '/dashboard']) {
      const res = await fetch(`${ts.url}${route}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/text\/html/);
      const html = await res.text();
      expect(html).toContain('<title>Beidou</title>');
    }
  });
});
