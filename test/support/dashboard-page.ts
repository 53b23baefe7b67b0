import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import type { BrowserContext, ElementHandle, Locator, Page } from 'playwright-core';
import { ROOT } from './cli.js';

/**
 * The dashboard as a browser shows it: the page built into `dist/web`, the DOM contract's
 * `data-testid`s, and waits that resolve on the DOM itself (`waitForFunction` runs in the
 * page on every animation frame), never on timers.
 */

export const WEB_DIST = path.join(ROOT, 'dist', 'web');
const WEB_SOURCES = [
  path.join(ROOT, 'web'),
  path.join(ROOT, 'src', 'web'),
  path.join(ROOT, 'vite.config.ts'),
  path.join(ROOT, 'index.html'),
];

function newestMtime(p: string): number {
  if (!existsSync(p)) return 0;
  const s = statSync(p);
  if (!s.isDirectory()) return s.mtimeMs;
  return Math.max(0, ...readdirSync(p).map((e) => newestMtime(path.join(p, e))));
}

/** Builds the server, and the page when the built page is missing or older than its sources (a bare `vitest run`). */
export function buildDashboard(): void {
  execFileSync('npx', ['tsc', '-b'], { cwd: ROOT, stdio: 'inherit' });
  const built = path.join(WEB_DIST, 'index.html');
  if (!existsSync(built) || newestMtime(built) < Math.max(...WEB_SOURCES.map(newestMtime))) {
    execFileSync('npx', ['vite', 'build', '--logLevel', 'warn'], { cwd: ROOT, stdio: 'inherit' });
  }
}

export const byId = (scope: Page | Locator, testId: string): Locator => scope.locator(`[data-testid="${testId}"]`);

// The functions below that go to page.evaluate / waitForFunction run in the page. The tests
// compile without the DOM library (its types clash with Node's), so they see the page's
// globals through these few declarations.
interface PageElement {
  getAttribute(name: string): string | null;
  textContent: string | null;
}
declare const document: {
  querySelector(selector: string): PageElement | null;
  querySelectorAll(selector: string): ArrayLike<PageElement>;
  documentElement: { scrollWidth: number };
  activeElement: unknown;
};
declare const window: {
  innerWidth: number;
  localStorage: { getItem(key: string): string | null; setItem(key: string, value: string): void };
  sessionStorage: { getItem(key: string): string | null; setItem(key: string, value: string): void };
};

/** A context already signed in: the token where the page keeps it (the tab's sessionStorage), before any script of the page runs. */
export async function signedIn(context: BrowserContext, token: string): Promise<void> {
  await context.addInitScript((t) => window.sessionStorage.setItem('beidou.token', t), token);
}

/** The token the page keeps for its tab. */
export function storedToken(page: Page): Promise<string | null> {
  return page.evaluate(() => window.sessionStorage.getItem('beidou.token'));
}

/** A token kept for ever (localStorage, as earlier versions did): there should be none. */
export function persistedToken(page: Page): Promise<string | null> {
  return page.evaluate(() => window.localStorage.getItem('beidou.token'));
}

/** Leaves a token in localStorage, as an earlier version of the page did. */
export function persistToken(page: Page, token: string): Promise<void> {
  return page.evaluate((t) => window.localStorage.setItem('beidou.token', t), token);
}

/** The `data-seq` of every event line, in the order shown. */
export function lineSeqs(page: Page): Promise<number[]> {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll('[data-testid="event-line"]'), (el) => Number(el.getAttribute('data-seq'))),
  );
}

/** Waits for an event line after `seq` (whose text holds `text`, when given); returns its seq. */
export async function lineAfter(page: Page, seq: number, text?: string): Promise<number> {
  const handle = await waiting(
    `an event line after seq ${seq}${text ? ` holding "${text}"` : ''}`,
    page.waitForFunction(
      ([after, want]) => {
        const hit = Array.from(document.querySelectorAll('[data-testid="event-line"]')).find(
          (el) =>
            Number(el.getAttribute('data-seq')) > after && (want === null || (el.textContent ?? '').includes(want)),
        );
        return hit ? Number(hit.getAttribute('data-seq')) : false;
      },
      [seq, text ?? null] as const,
    ),
  );
  return (await handle.jsonValue()) as number;
}

/** Waits until `count(n)` holds for the number of elements matching `selector`. */
export async function countIs(page: Page, selector: string, how: 'eq' | 'lt' | 'gt', n: number): Promise<void> {
  await waiting(
    `${how} ${n} of ${selector} (now ${await page.locator(selector).count()})`,
    page.waitForFunction(
      ([sel, op, want]) => {
        const c = document.querySelectorAll(sel).length;
        return op === 'eq' ? c === want : op === 'lt' ? c < want : c > want;
      },
      [selector, how, n] as const,
    ),
  );
}

/** Waits until the page's element for `selector` has `attribute` = `value`. */
export async function attributeIs(page: Page, selector: string, attribute: string, value: string): Promise<void> {
  const now = () =>
    page
      .locator(selector)
      .first()
      .getAttribute(attribute, { timeout: 1_000 })
      .catch(() => 'nothing');
  await waiting(
    `${selector} with ${attribute}="${value}"`,
    page.waitForFunction(([sel, attr, want]) => document.querySelector(sel)?.getAttribute(attr) === want, [
      selector,
      attribute,
      value,
    ] as const),
    now,
  );
}

/** Waits until the text of the element for `selector` is no longer `old`. */
export async function textChanges(page: Page, selector: string, old: string | null): Promise<void> {
  await waiting(
    `a change of ${selector}'s text from "${old}"`,
    page.waitForFunction(([sel, was]) => document.querySelector(sel)?.textContent !== was, [selector, old] as const),
  );
}

/** A wait that times out says what it waited for (and, with `now`, what there was instead). */
async function waiting<T>(what: string, wait: Promise<T>, now?: () => Promise<string | null>): Promise<T> {
  try {
    return await wait;
  } catch (err) {
    const seen = now ? `; it is ${await now()}` : '';
    throw new Error(`${(err as Error).message.split('\n')[0]}: waiting for ${what}${seen}`);
  }
}

/** No sideways scrolling: the page is no wider than the window. */
export function fitsWidth(page: Page): Promise<boolean> {
  return page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
}

/** Whether `handle` is still in the document and has the focus (an element re-created by a render has neither). */
export function stillFocused(handle: ElementHandle): Promise<boolean> {
  return handle.evaluate(
    (el) => (el as unknown as { isConnected: boolean }).isConnected && document.activeElement === el,
  );
}

/** CJK ideographs, kana, hangul and full-width forms: glyphs the page's fonts (DejaVu) do not have. */
export const CJK = /[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]/;
