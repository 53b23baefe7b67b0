import net from 'node:net';

/**
 * A loopback TCP proxy in front of the test run's PostgreSQL that can make connections go
 * silent: `freeze(app)` stops forwarding, both ways, on every open connection whose startup
 * message names `application_name` app, without closing it (no FIN, no RST), as a NAT or a
 * firewall that forgot the connection does. New connections pass as before.
 */
export interface TcpProxy {
  /** `url` with its host and port replaced by the proxy's. */
  url: string;
  freeze(app: string): number;
  close(): Promise<void>;
}

export async function startTcpProxy(target: string): Promise<TcpProxy> {
  const to = new URL(target);
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket; startup: string; frozen: boolean }>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(to.port), to.hostname);
    const pair = { client, upstream, startup: '', frozen: false };
    pairs.add(pair);
    client.on('data', (chunk) => {
      if (pair.startup.length < 4096) pair.startup += chunk.toString('latin1');
      if (!pair.frozen) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!pair.frozen) client.write(chunk);
    });
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    freeze(app) {
      let n = 0;
      for (const p of pairs) {
        if (p.startup.includes(`application_name\0${app}\0`)) {
          p.frozen = true;
          n++;
        }
      }
      return n;
    },
    async close() {
      for (const p of pairs) {
        p.client.destroy();
        p.upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
