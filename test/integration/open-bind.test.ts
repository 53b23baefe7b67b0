import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { buildCli, CliChild, ROOT } from '../support/cli.js';
import { removeHome, tempHome } from '../support/server.js';
import { storeEnv } from '../support/store.js';

/**
 * A server bound off loopback answers requests under any name unless it is told the names
 * (BEIDOU_ALLOWED_HOSTS): `beidou serve` refuses that start, saying both ways out, unless
 * --allow-any-host (BEIDOU_ALLOW_ANY_HOST=1). Through the real CLI; requests go to
 * 127.0.0.1 with the Host header a browser would send. The Dockerfile's own settings start.
 */

beforeAll(() => buildCli(false), 120_000);

const LISTENING = /^beidou listening on http:\/\/0\.0\.0\.0:(\d+)$/;

function homeFor({ onTestFinished }: TestContext): string {
  const home = tempHome();
  onTestFinished(() => removeHome(home));
  return home;
}

/** `beidou serve` to its end (a refusal) or to its listening line (then stopped at the test's end). */
async function serve(ctx: TestContext, home: string, args: string[], env: Record<string, string> = {}) {
  const child = new CliChild(['serve', '--port', '0', '--home', home, ...args], {
    ...(await storeEnv(home)),
    ...env,
  });
  ctx.onTestFinished(async () => void (await child.stop('SIGKILL')));
  return child;
}

/**
 * The variables the ENV instructions of a Dockerfile set (`ENV K=V K2=V2`, continued with `\`
 * over lines): comment lines are no instruction, and a continued instruction's comment
 * lines are skipped as Docker skips them.
 */
function dockerEnv(dockerfile: string): Record<string, string> {
  const instructions: string[] = [];
  let current = '';
  for (const raw of dockerfile.split('\n')) {
    if (/^\s*#/.test(raw)) continue;
    const continued = /\\\s*$/.test(raw);
    current += ` ${raw.replace(/\\\s*$/, '')}`;
    if (continued) continue;
    instructions.push(current.trim());
    current = '';
  }
  if (current.trim()) instructions.push(current.trim());
  const env: Record<string, string> = {};
  for (const line of instructions) {
    const m = /^ENV\s+(.*)$/i.exec(line);
    if (!m) continue;
    for (const pair of m[1]!.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(\S*)/g)) env[pair[1]!] = pair[2]!;
  }
  return env;
}

function get(port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path: '/api/health', headers: { host }, agent: false },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('beidou serve bound off loopback', () => {
  it('without BEIDOU_ALLOWED_HOSTS refuses to start (exit 2), says both ways out, and leaves the home untouched', async (ctx) => {
    for (const [args, env] of [
      [['--host', '0.0.0.0'], {}],
      [[], { BEIDOU_HOST: '0.0.0.0' }],
      [['--host', '::'], {}],
      [['--host', '0.0.0.0'], { BEIDOU_ALLOW_ANY_HOST: '0' }],
    ] as Array<[string[], Record<string, string>]>) {
      const home = path.join(homeFor(ctx), 'home');
      const child = await serve(ctx, home, args, env);
      const exit = await child.exited;
      const what = JSON.stringify({ args, env });
      expect(exit, what).toEqual({ code: 2, signal: null });
      expect(child.lines, what).toEqual([]);
      const lines = child.stderr.split('\n').filter((l) => l.length > 0);
      expect(lines, what).toHaveLength(1);
      expect(lines[0]).toMatch(/^beidou: not listening on (0\.0\.0\.0|::) without BEIDOU_ALLOWED_HOSTS: /);
      expect(lines[0]).toContain('DNS rebinding');
      expect(lines[0]).toContain('set BEIDOU_ALLOWED_HOSTS to the names clients use');
      expect(lines[0]).toContain('--allow-any-host (BEIDOU_ALLOW_ANY_HOST=1)');
      expect(existsSync(home), `${what}: the home was created`).toBe(false);
    }
  });

  it('with --allow-any-host (or BEIDOU_ALLOW_ANY_HOST=1) starts, checks no name, and warns once', async (ctx) => {
    for (const [args, env] of [
      [['--allow-any-host'], { BEIDOU_HOST: '0.0.0.0' }],
      [['--host', '0.0.0.0'], { BEIDOU_ALLOW_ANY_HOST: '1' }],
    ] as Array<[string[], Record<string, string>]>) {
      const child = await serve(ctx, homeFor(ctx), args, {
        ...env,
        BEIDOU_LOG_LEVEL: 'warn',
        BEIDOU_LOG_FORMAT: 'json',
      });
      const port = Number(LISTENING.exec(await child.waitForLine((l) => LISTENING.test(l)))![1]);
      expect(await get(port, 'anything.example')).toBe(200);
      const warnings = child.stderr.split('\n').filter((l) => l.includes('Host and Origin are not checked'));
      expect(warnings).toHaveLength(1);
      expect(await child.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    }
  });

  it('a BEIDOU_ALLOW_ANY_HOST that is neither 1 nor 0 is refused, naming the setting', async (ctx) => {
    const child = await serve(ctx, homeFor(ctx), ['--host', '0.0.0.0'], { BEIDOU_ALLOW_ANY_HOST: 'sure' });
    expect(await child.exited).toEqual({ code: 2, signal: null });
    expect(child.stderr.trim()).toBe(
      'beidou: invalid --allow-any-host / BEIDOU_ALLOW_ANY_HOST: must be 1 or 0 (got "sure")',
    );
  });

  it("starts with the Dockerfile's settings, answering localhost and refusing other names", async (ctx) => {
    // The ENV instructions of the runtime stage: BEIDOU_HOST=0.0.0.0 and the names it answers to
    // (a comment naming a setting sets nothing).
    expect(
      dockerEnv('# run with -e BEIDOU_ALLOWED_HOSTS=x\nENV BEIDOU_HOST=0.0.0.0 \\\n    NODE_ENV=production\n'),
    ).toEqual({
      BEIDOU_HOST: '0.0.0.0',
      NODE_ENV: 'production',
    });
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    const env = dockerEnv(dockerfile.slice(dockerfile.lastIndexOf('\nFROM ')));
    expect(env).toMatchObject({ BEIDOU_HOST: '0.0.0.0', BEIDOU_ALLOWED_HOSTS: expect.any(String) });
    delete env.BEIDOU_HOME;
    const child = await serve(ctx, homeFor(ctx), [], env);
    const port = Number(LISTENING.exec(await child.waitForLine((l) => LISTENING.test(l)))![1]);
    expect(await get(port, `localhost:${port}`)).toBe(200);
    expect(await get(port, `127.0.0.1:${port}`)).toBe(200);
    expect(await get(port, 'evil.example')).toBe(403);
  });
});
