// In src/ (not test/support/) so `npm run screenshots`, compiled from src/, drives the browser the way the tests do.
import { accessSync, constants } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/**
 * Debian's Chromium (the `chromium` package), headless, driven by playwright-core: the
 * dashboard's end-to-end tests and its screenshots. No browser is downloaded: playwright-core
 * is pointed at the system binary, `BEIDOU_CHROMIUM` when set.
 */
export const CHROMIUM = process.env.BEIDOU_CHROMIUM || '/usr/bin/chromium';

/**
 * What Chromium needs here: root in a container has no user namespaces for its sandbox, there
 * is no GPU, the network is loopback only (so no QUIC, no background fetches, no component or
 * sync updates), and no first-run dialog. playwright adds `--headless` itself and gives each
 * launch a fresh `--user-data-dir`, removed on close.
 */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
] as const;

/** Throws a message that says how to get the browser when `executablePath` cannot be run. */
export function checkChromium(executablePath = CHROMIUM): void {
  try {
    accessSync(executablePath, constants.X_OK);
  } catch {
    throw new Error(
      `Chromium is not installed at ${executablePath}: the dashboard's browser tests and screenshots need it ` +
        `(apt-get install chromium fonts-dejavu-core; .ci/run does), or set BEIDOU_CHROMIUM to a Chromium binary`,
    );
  }
}

export async function launchChromium(opts: { executablePath?: string } = {}): Promise<Browser> {
  const executablePath = opts.executablePath ?? CHROMIUM;
  checkChromium(executablePath);
  return chromium.launch({ executablePath, headless: true, args: [...CHROMIUM_ARGS], timeout: 30_000 });
}
