// A type here; the driver itself is loaded by the first connection, so a server without a
// database URL never loads it (docs/performance.md, "What a start loads").
import type pg from 'pg';

/**
 * Connections to the PostgreSQL store. Each part of the server has its own, named by
 * `application_name` so `pg_stat_activity` (and an operator) can tell them apart:
 * `beidou-log` commits the events and holds the lease, `beidou` serves the rollups
 * and plans. The URL may carry a password: it is never logged; `describeDatabaseUrl`
 * is what a log line or an error may show.
 */

export const LOG_APPLICATION = 'beidou-log';
export const SIDE_APPLICATION = 'beidou';

const CONNECT_TIMEOUT_MS = 10_000;

export function clientConfig(url: string, applicationName: string): pg.ClientConfig {
  return {
    connectionString: url,
    application_name: applicationName,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    // A dead peer (a lost machine, a cut network) is noticed, not waited on forever.
    keepAlive: true,
  };
}

/** A connected client; its `error` events are passed to `onError` (unhandled, they would end the process). */
export async function connectClient(
  url: string,
  applicationName: string,
  onError: (err: Error) => void = () => undefined,
): Promise<pg.Client> {
  const { default: driver } = await import('pg');
  const client = new driver.Client(clientConfig(url, applicationName));
  client.on('error', onError);
  try {
    await client.connect();
  } catch (err) {
    throw new DatabaseUnreachableError(url, err);
  }
  return client;
}

/** The URL without its password (and without query parameters, which may hold one too). */
export function describeDatabaseUrl(url: string): string {
  try {
    const u = new URL(url);
    const user = u.username ? `${decodeURIComponent(u.username)}@` : '';
    return `${u.protocol}//${user}${u.host}${u.pathname}`;
  } catch {
    return 'a PostgreSQL URL that does not parse';
  }
}

export class DatabaseUnreachableError extends Error {
  constructor(url: string, cause: unknown) {
    super(`cannot connect to the database ${describeDatabaseUrl(url)}: ${(cause as Error)?.message ?? String(cause)}`);
  }
}

/** Another server holds the database's lease: one writer per database, as one per home. */
export class DatabaseInUseError extends Error {
  constructor(
    readonly database: string,
    /** Who holds it, in words (its lease and connection). */
    readonly holder: string | null,
    /** The holder's name in the lease row. */
    readonly holderName: string | null = null,
  ) {
    super(
      `the database ${database} is in use by another beidou server${holder ? ` (${holder})` : ''}; one server per database`,
    );
  }
}
