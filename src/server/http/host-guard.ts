import type { NextFunction, Request, Response } from 'express';
import type { Config } from '../../config.js';
import type { Logger } from '../../util/logger.js';
import { closeIfBodyUnread } from './body.js';

/**
 * DNS rebinding: a web page whose name the attacker points at 127.0.0.1 reaches a
 * loopback server from the victim's browser, but its requests still carry the attacker's
 * name in `Host` (and `Origin`). Bound to loopback, only loopback names are accepted;
 * bound elsewhere, loopback names and BEIDOU_ALLOWED_HOSTS; bound elsewhere without an
 * allow-list the server does not start, unless --allow-any-host (then nothing is checked, with
 * one warning at start). Refusals are 403 `forbidden_host`.
 */

export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  return h === 'localhost' || h === '::1' || h === '[::1]' || /^127(\.\d{1,3}){3}$/.test(h);
}

/** The host name of a `Host` header value (`name`, `name:port`, `[v6]`, `[v6]:port`), lower-cased. */
function hostName(value: string): string {
  const v = value.trim().toLowerCase();
  if (v.startsWith('[')) return v.slice(0, v.indexOf(']') + 1);
  const colon = v.indexOf(':');
  return colon === -1 ? v : v.slice(0, colon);
}

function originHost(origin: string): string | null {
  try {
    return new URL(origin).host.toLowerCase();
  } catch {
    return null; // "null" (a sandboxed or file page) or garbage: not a name we can trust
  }
}

/**
 * Why a server must not start on this address, for the person who started it: bound off
 * loopback with no BEIDOU_ALLOWED_HOSTS, any page a browser on the network opens could use
 * it under a name of its own. Null when it may start (loopback, a list, or --allow-any-host).
 */
export function openBindRefusal(config: Config): string | null {
  if (isLoopbackHost(config.host) || config.allowedHosts.length > 0 || config.allowAnyHost) return null;
  return (
    `not listening on ${config.host} without BEIDOU_ALLOWED_HOSTS: bound off loopback, the server would answer ` +
    'requests under any name, so a web page could reach it through a name it points at this machine (DNS rebinding). ' +
    'Either set BEIDOU_ALLOWED_HOSTS to the names clients use (e.g. BEIDOU_ALLOWED_HOSTS=beidou.internal,beidou.internal:7777), ' +
    'or start with --allow-any-host (BEIDOU_ALLOW_ANY_HOST=1) to accept any name, behind a proxy that checks it'
  );
}

/** The middleware, or null when no check applies (and then it says so once). */
export function hostGuard(
  config: Config,
  logger: Logger,
): ((req: Request, res: Response, next: NextFunction) => void) | null {
  const loopbackOnly = isLoopbackHost(config.host);
  const allowed = new Set(config.allowedHosts);
  if (!loopbackOnly && allowed.size === 0) {
    logger.warn(
      { host: config.host },
      'listening on a non-loopback address without BEIDOU_ALLOWED_HOSTS: Host and Origin are not checked (DNS rebinding); set it to the names clients use',
    );
    return null;
  }
  // An allow-list entry names a host, with or without its port.
  const accepts = (hostWithPort: string) =>
    isLoopbackHost(hostName(hostWithPort)) || allowed.has(hostWithPort) || allowed.has(hostName(hostWithPort));

  return (req, res, next) => {
    // A request without Host is not from a browser (browsers always send it): nothing to rebind.
    const host = req.headers.host;
    const origin = req.headers.origin;
    const bad = host !== undefined && !accepts(host.toLowerCase()) ? { header: 'host', value: host } : null;
    const badOrigin =
      !bad && origin !== undefined && !accepts(originHost(origin) ?? '\0') ? { header: 'origin', value: origin } : null;
    const refused = bad ?? badOrigin;
    if (!refused) return next();
    closeIfBodyUnread(req, res);
    res.status(403).json({
      error: 'forbidden_host',
      message: `${refused.header === 'host' ? 'Host' : 'Origin'} "${refused.value.slice(0, 200)}" is not ${loopbackOnly ? 'a loopback name' : 'in BEIDOU_ALLOWED_HOSTS'}; this server answers only requests addressed to it by an accepted name`,
      details: { header: refused.header },
    });
  };
}
