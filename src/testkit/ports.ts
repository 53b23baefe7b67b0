// In src/ (not test/support/) so the bench, compiled from src/, finds ports the way the tests do.
import { createServer } from 'node:net';

/** A loopback port free now: bound by the OS, then closed (a server started on it next may still lose a race, and retries). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}
