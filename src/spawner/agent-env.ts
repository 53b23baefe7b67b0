/**
 * An agent's environment is an allowlist (docs/security.md, "Agents are untrusted"): what
 * every process needs, what its runtime needs, the names `--pass-env` adds, and what the
 * adapter sets itself. Nothing else of the spawner's environment reaches it: not a
 * `BEIDOU_DATABASE_URL`, a `PGPASSWORD` nor any secret the spawner happens to hold.
 *
 * A name ending in `*` stands for every name with that prefix (`LC_*`).
 */

/** What any process expects to find: the locale, the terminal, and the network as before (proxies, CAs). */
export const BASE_ENV_NAMES: readonly string[] = [
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'SHELL',
  'LANG',
  'LANGUAGE',
  'LC_*',
  'TERM',
  'TZ',
  'TMPDIR',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
  'ALL_PROXY',
  'http_proxy',
  'https_proxy',
  'no_proxy',
  'all_proxy',
  'NODE_EXTRA_CA_CERTS',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
];

/** The spawner's own keys: never passed, even when named or matched by a `PREFIX*` (they would undo the list). */
export const NEVER_PASSED: readonly string[] = ['BEIDOU_ADMIN_TOKEN', 'BEIDOU_SECRET', 'BEIDOU_SPAWNER_TOKEN'];

/** The server's and PostgreSQL's secrets: `--pass-env` may not name them, nor a PREFIX* that matches one. */
const SECRET_NAMES: readonly string[] = [
  ...NEVER_PASSED,
  'BEIDOU_DATABASE_URL',
  'PGPASSWORD',
  'PGPASSFILE',
  'PGSERVICEFILE',
];

const NAME = /^[A-Za-z_][A-Za-z0-9_]*\*?$/;

/** Why `--pass-env NAME` is refused, or null when it is a name (or a `PREFIX*`) the spawner may pass. */
export function passEnvProblem(name: string): string | null {
  if (!NAME.test(name)) return `--pass-env takes an environment variable name or a PREFIX* (got "${name}")`;
  if (NEVER_PASSED.includes(name))
    return `--pass-env ${name} would hand agents the spawner's own key; agents never get ${NEVER_PASSED.join(', ')}`;
  const secret = SECRET_NAMES.find((s) => matches(name, s));
  if (secret)
    return `--pass-env ${name} would hand agents ${secret}, a secret of the server's; name the variables an agent needs one by one`;
  return null;
}

function matches(pattern: string, name: string): boolean {
  return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : pattern === name;
}

export interface AgentEnvironmentSpec {
  /** The spawner's environment, read only for the allowed names. */
  source: NodeJS.ProcessEnv;
  /** What the agent's runtime needs (the adapter's list). */
  runtime: readonly string[];
  /** `--pass-env` names. */
  passEnv: readonly string[];
  /** Set by the adapter (its BEIDOU_* names and the runtime's switches): these win. */
  set: Record<string, string>;
}

/** The environment an agent process starts with: the allowed names the spawner has, then the adapter's own. */
export function agentEnvironment(spec: AgentEnvironmentSpec): Record<string, string> {
  const patterns = [...BASE_ENV_NAMES, ...spec.runtime, ...spec.passEnv];
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(spec.source)) {
    if (value === undefined || NEVER_PASSED.includes(name)) continue;
    if (patterns.some((p) => matches(p, name))) env[name] = value;
  }
  return { ...env, ...spec.set };
}
