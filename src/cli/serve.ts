import { ConfigError, loadConfig, type Config, type ConfigFlags } from '../config.js';
import { HomeLockedError } from '../store/embedded/home-lock.js';
import { DatabaseInUseError, DatabaseUnreachableError } from '../store/postgres/connect.js';
import { MigrationError, SchemaTooNewError } from '../store/postgres/schema.js';
import { startServer, type BeidouServer } from '../server/server.js';
import { createLogger, resolveLogFormat, type LogFormat } from '../util/logger.js';

/** `beidou serve`: start, print where it listens, stop cleanly on SIGINT/SIGTERM. */
export async function serve(flags: ConfigFlags & { logFormat?: string }): Promise<void> {
  let config: Config;
  let format: LogFormat;
  try {
    config = loadConfig(flags);
    format = resolveLogFormat(flags.logFormat);
  } catch (err) {
    if (err instanceof ConfigError) fail(err.message, 2);
    fail((err as Error).message, 2);
  }
  let server: BeidouServer;
  try {
    server = await startServer(config, { logger: createLogger(config.logLevel, undefined, format) });
  } catch (err) {
    if (err instanceof ConfigError) fail(err.message, 2);
    if (err instanceof HomeLockedError)
      fail(`${err.home} is in use by another beidou server (pid ${err.pid ?? 'unknown'}); one server per home`, 2);
    if (
      err instanceof DatabaseInUseError ||
      err instanceof DatabaseUnreachableError ||
      err instanceof SchemaTooNewError ||
      err instanceof MigrationError
    ) {
      fail(err.message, 2);
    }
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') fail(`port ${config.port} on ${config.host} is already in use`, 2);
    if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND') fail(`cannot listen on host ${config.host} (${code})`, 2);
    fail(`cannot start: ${(err as Error).message}`, 1);
  }
  // Before the line that says it is ready: a supervisor (or a test) that stops it as soon as it
  // reads that line must find the handler there, not the default action that kills it uncleanly.
  const stop = () => {
    server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`beidou: error while stopping: ${(err as Error).message}\n`);
        process.exit(1);
      },
    );
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  process.stdout.write(`beidou listening on ${server.url}\n`);
  process.stdout.write(
    server.adminTokenFile ? `admin token in ${server.adminTokenFile}\n` : 'admin token from BEIDOU_ADMIN_TOKEN\n',
  );
  if (server.store.kind === 'postgres') {
    // A third line, after the two every server prints: which replica of several this one is now (changes are logged).
    const { holder, epoch } = server.lease();
    process.stdout.write(
      server.role() === 'active'
        ? `role: active (lease epoch ${epoch}, as ${server.holder})\n`
        : `role: standby (the lease is held by ${holder ?? 'another replica'}; taking over when it expires)\n`,
    );
  }
}

function fail(message: string, exitCode: number): never {
  process.stderr.write(`beidou: ${message}\n`);
  process.exit(exitCode);
}
