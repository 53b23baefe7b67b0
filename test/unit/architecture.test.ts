import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../src/util/version.js';

/**
 * The import rule of docs/architecture.md, checked over the real import graph of `src/`:
 * a layer imports only layers below it (and itself); the spawner process imports only what
 * it shares with the server; decisions and state know no transport and do no I/O; and no
 * file imports itself round a circle. Type-only imports count: a type cycle is a cycle.
 */

/** Lowest first. A file may import its own layer or one listed before it. */
const LAYERS = [
  'util',
  'config',
  'identity',
  'events',
  'protocol',
  'registry',
  'domain',
  'skills',
  'store',
  'runtime',
  'primitives',
  'server',
] as const;
/** Entry points: above everything, and never imported by a layer. */
const ENTRY_POINTS = ['cli', 'demo', 'bench', 'scripts'] as const;
/**
 * Tooling for tests, the bench and the scripts, compiled with the product so `npm run bench`
 * (from dist/) can run Claude Code against the scripted Anthropic stand-in as the tests do,
 * and `npm run screenshots` can drive Chromium as the dashboard's tests do. Beside server,
 * like the spawner: only `bench` and `scripts` (and tests) may import it; the product never does.
 */
const TESTKIT_USERS = new Set(['bench', 'scripts']);
/** The spawner process: its own stack, sharing only these with the server. */
const SPAWNER_MAY_IMPORT = new Set(['spawner', 'protocol', 'events/catalogue', 'skills', 'util']);
/** Packages that belong to the transport and process edges, never to decisions or state. */
const EDGE_PACKAGES = ['express', '@modelcontextprotocol/sdk', 'pino', 'better-sse'];
/** Decisions are pure: no file system, no processes, no database. */
const IO_MODULES = [
  'node:fs',
  'node:fs/promises',
  'node:child_process',
  'node:net',
  'node:http',
  'better-sqlite3',
  'pg',
];
/** The pure core: the event types and the state they reduce to. Its stores live in store/, one folder per backend. */
const PURE_CORE = new Set(['events', 'registry', 'domain']);
/** Only the store speaks to PostgreSQL: the server reaches it through the Store interface (store/index.ts). */
const DATABASE_PACKAGES = ['pg', 'better-sqlite3'];
const DATABASE_USERS = new Set(['store', 'cli', 'bench', 'scripts', 'testkit']);

type Graph = Map<string, { local: string[]; packages: string[] }>;

const SRC = path.join(PACKAGE_ROOT, 'src');
const WEB = path.join(PACKAGE_ROOT, 'web');
/**
 * The dashboard (web/, bundled by Vite) is an entry point of its own that runs in a browser:
 * from src/ it may take only these pure modules (so `beidou tail` and the page say the same
 * sentence), and types of anything (erased from the bundle).
 */
const WEB_MAY_IMPORT = new Set(['src/events/describe.ts', 'src/util/text.ts']);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(full);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [full] : [];
  });
}

/** Every `import … from 'x'`, `export … from 'x'`, `import 'x'` and `import('x')` of a file. */
export function importSpecifiers(text: string): string[] {
  const out: string[] = [];
  const patterns = [
    /\b(?:import|export)\s[^;]*?\sfrom\s*['"]([^'"]+)['"]/g,
    /\bimport\s*['"]([^'"]+)['"]/g,
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  for (const re of patterns) for (const m of text.matchAll(re)) out.push(m[1]!);
  return out;
}

function buildGraph(): Graph {
  const graph: Graph = new Map();
  for (const file of sourceFiles(SRC)) {
    const from = path.relative(SRC, file).split(path.sep).join('/');
    const local: string[] = [];
    const packages: string[] = [];
    for (const spec of importSpecifiers(readFileSync(file, 'utf8'))) {
      if (spec.startsWith('.'))
        local.push(path.posix.normalize(path.posix.join(path.posix.dirname(from), spec)).replace(/\.js$/, '.ts'));
      else packages.push(spec);
    }
    graph.set(from, { local, packages });
  }
  return graph;
}

/** `domain/questions.ts` → `domain`; `config.ts` → `config`. */
function layerOf(file: string): string {
  const first = file.split('/')[0]!;
  return first.replace(/\.ts$/, '');
}

function rank(layer: string): number {
  const i = (LAYERS as readonly string[]).indexOf(layer);
  if (i >= 0) return i;
  if ((ENTRY_POINTS as readonly string[]).includes(layer)) return LAYERS.length + 1;
  if (layer === 'spawner' || layer === 'testkit') return LAYERS.length; // beside server: only entry points may use it
  return -1;
}

/** What breaks the rule, one line each (empty when the graph keeps it). */
export function violations(graph: Graph): string[] {
  const out: string[] = [];
  for (const [from, { local, packages }] of graph) {
    const layer = layerOf(from);
    if (rank(layer) < 0)
      out.push(`${from}: in no layer (add its folder to the rule in docs/architecture.md and this test)`);
    for (const to of local) {
      if (!graph.has(to)) {
        out.push(`${from} imports ${to}, which does not exist`);
        continue;
      }
      const target = layerOf(to);
      if (target === layer) continue;
      if (layer === 'spawner') {
        const allowed = SPAWNER_MAY_IMPORT.has(target) || SPAWNER_MAY_IMPORT.has(to.replace(/\.ts$/, ''));
        if (!allowed)
          out.push(
            `${from} imports ${to}: the spawner process shares only ${[...SPAWNER_MAY_IMPORT].join(', ')} with the server`,
          );
        continue;
      }
      if (target === 'testkit' && !TESTKIT_USERS.has(layer)) {
        out.push(`${from} imports ${to}: only ${[...TESTKIT_USERS].join(', ')} may use the test tooling in testkit`);
        continue;
      }
      const isEntry = (ENTRY_POINTS as readonly string[]).includes(target);
      if (isEntry || rank(target) >= rank(layer))
        out.push(
          `${from} imports ${to}: ${layer} may not import ${target} (imports point down: ${LAYERS.join(' < ')} < entry points)`,
        );
    }
    if (layer === 'registry' || layer === 'domain' || layer === 'events' || layer === 'protocol') {
      for (const p of packages)
        if (EDGE_PACKAGES.some((e) => p === e || p.startsWith(`${e}/`)))
          out.push(`${from} imports ${p}: ${layer} knows no transport and no logger`);
    }
    if (PURE_CORE.has(layer)) {
      for (const p of packages)
        if (IO_MODULES.includes(p))
          out.push(
            `${from} imports ${p}: ${layer} does no I/O (the stores in store/ read and write; the caller commits and waits)`,
          );
    } else if (!DATABASE_USERS.has(layer)) {
      for (const p of packages)
        if (DATABASE_PACKAGES.includes(p))
          out.push(
            `${from} imports ${p}: only store/ speaks to a database (${layer} goes through the Store interface)`,
          );
    }
  }
  return out;
}

/** Every import of a file with whether it is type-only (`import type`, `export type`): erased when bundled. */
export function typedImports(text: string): Array<{ spec: string; typeOnly: boolean }> {
  const out: Array<{ spec: string; typeOnly: boolean }> = [];
  for (const m of text.matchAll(/\b(?:import|export)\s+(type\s+)?[^;'"]*?\sfrom\s*['"]([^'"]+)['"]/g))
    out.push({ spec: m[2]!, typeOnly: m[1] !== undefined });
  for (const m of text.matchAll(/\bimport\s*['"]([^'"]+)['"]/g)) out.push({ spec: m[1]!, typeOnly: false });
  for (const m of text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) out.push({ spec: m[1]!, typeOnly: false });
  return out;
}

/** web/ and what it reaches in src/, by path from the package root: each file's imports, type-only ones marked. */
type WebGraph = Map<string, Array<{ target: string; typeOnly: boolean; local: boolean }>>;

function buildWebGraph(): WebGraph {
  const graph: WebGraph = new Map();
  const read = (rel: string) => {
    if (graph.has(rel)) return;
    const imports = typedImports(readFileSync(path.join(PACKAGE_ROOT, rel), 'utf8')).map(({ spec, typeOnly }) => {
      if (!spec.startsWith('.')) return { target: spec, typeOnly, local: false };
      return {
        target: path.posix.normalize(path.posix.join(path.posix.dirname(rel), spec)).replace(/\.js$/, '.ts'),
        typeOnly,
        local: true,
      };
    });
    graph.set(rel, imports);
    // Follow what the bundle takes from src/ (value imports), to check it stays pure.
    for (const i of imports) if (i.local && !i.typeOnly && i.target.startsWith('src/')) read(i.target);
  };
  const walk = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
      const full = path.join(dir, e.name);
      if (e.isDirectory()) return walk(full);
      return /\.(ts|tsx)$/.test(e.name) ? [path.relative(PACKAGE_ROOT, full).split(path.sep).join('/')] : [];
    });
  for (const file of walk(path.join(WEB, 'src'))) read(file);
  return graph;
}

/** What breaks the page's rule: a value import of src/ beyond WEB_MAY_IMPORT, or a Node or server package in the bundle. */
export function webViolations(graph: WebGraph): string[] {
  const out: string[] = [];
  for (const [from, imports] of graph) {
    for (const { target, typeOnly, local } of imports) {
      if (typeOnly) continue;
      if (!local) {
        if (
          target.startsWith('node:') ||
          EDGE_PACKAGES.some((e) => target === e || target.startsWith(`${e}/`)) ||
          IO_MODULES.includes(target)
        ) {
          out.push(`${from} imports ${target}: the page runs in a browser (no Node, server or I/O packages)`);
        }
        continue;
      }
      if (target.startsWith('src/') && !WEB_MAY_IMPORT.has(target)) {
        out.push(
          `${from} imports ${target}: the page may take from src/ only ${[...WEB_MAY_IMPORT].join(', ')} (and types, with import type)`,
        );
      }
    }
  }
  return out;
}

/** Every circle of files (each reported once, from its smallest member). */
export function cycles(graph: Graph): string[][] {
  const found: string[][] = [];
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  let next = 0;
  // Tarjan: a strongly connected component of more than one file (or a file importing itself) is a circle.
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v)?.local ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      const selfLoop = component.length === 1 && (graph.get(v)?.local ?? []).includes(v);
      if (component.length > 1 || selfLoop) found.push(component.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return found.sort((a, b) => a[0]!.localeCompare(b[0]!));
}

describe('the import rule (docs/architecture.md)', () => {
  const graph = buildGraph();

  it('reads the real tree: every layer is there and imports were found', () => {
    const layers = new Set([...graph.keys()].map(layerOf));
    for (const layer of [...LAYERS, 'spawner', 'testkit', 'cli'])
      expect(layers, `no files in src/${layer}`).toContain(layer);
    const edges = [...graph.values()].reduce((n, f) => n + f.local.length, 0);
    expect(edges).toBeGreaterThan(100);
  });

  it('no layer imports upward, the spawner shares only what it must, decisions know no transport', () => {
    expect(violations(graph)).toEqual([]);
  });

  it('no circle of imports, type-only ones included', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('the checks catch what they are for (a planted upward import, a planted circle)', () => {
    const planted: Graph = new Map([
      ['registry/state.ts', { local: ['domain/agents.ts'], packages: [] }],
      ['domain/agents.ts', { local: ['registry/state.ts', 'runtime/inbox.ts'], packages: ['express', 'node:fs'] }],
      ['runtime/inbox.ts', { local: [], packages: [] }],
      [
        'spawner/spawner.ts',
        { local: ['server/server.ts', 'protocol/spawner.ts', 'events/catalogue.ts'], packages: [] },
      ],
      ['server/server.ts', { local: ['cli/main.ts'], packages: [] }],
      ['protocol/spawner.ts', { local: [], packages: [] }],
      ['events/catalogue.ts', { local: [], packages: [] }],
      ['cli/main.ts', { local: ['spawner/spawner.ts'], packages: [] }],
      ['cli/wake/attach.ts', { local: ['testkit/fake-anthropic.ts'], packages: [] }],
      ['testkit/fake-anthropic.ts', { local: ['util/version.ts'], packages: ['node:http'] }],
      ['bench/main.ts', { local: ['testkit/fake-anthropic.ts', 'server/server.ts'], packages: [] }],
      ['scripts/screenshots.ts', { local: ['testkit/fake-anthropic.ts'], packages: [] }],
      ['util/version.ts', { local: [], packages: [] }],
    ]);
    const found = violations(planted);
    expect(found.some((v) => v.startsWith('registry/state.ts imports domain/agents.ts'))).toBe(true);
    expect(found.some((v) => v.startsWith('domain/agents.ts imports runtime/inbox.ts'))).toBe(true);
    expect(found.some((v) => v.startsWith('domain/agents.ts imports express'))).toBe(true);
    expect(found.some((v) => v.startsWith('domain/agents.ts imports node:fs'))).toBe(true);
    expect(found.some((v) => v.startsWith('spawner/spawner.ts imports server/server.ts'))).toBe(true);
    expect(found.some((v) => v.startsWith('server/server.ts imports cli/main.ts'))).toBe(true);
    expect(found.some((v) => v.startsWith('cli/wake/attach.ts imports testkit/fake-anthropic.ts'))).toBe(true);
    // What is allowed is not reported.
    expect(
      found.some((v) => v.includes('imports protocol/spawner.ts') || v.includes('imports events/catalogue.ts')),
    ).toBe(false);
    expect(found.some((v) => v.startsWith('cli/main.ts'))).toBe(false);
    expect(
      found.some((v) => v.startsWith('bench/main.ts') || v.startsWith('scripts/') || v.startsWith('testkit/')),
    ).toBe(false);
    expect(cycles(planted)).toEqual([
      ['cli/main.ts', 'server/server.ts', 'spawner/spawner.ts'],
      ['domain/agents.ts', 'registry/state.ts'],
    ]);
  });

  it('the stores keep the I/O: a planted file system or database import outside store/ is caught', () => {
    const planted: Graph = new Map([
      ['events/jsonl-log.ts', { local: ['events/event-log.ts'], packages: ['node:fs'] }],
      ['events/event-log.ts', { local: [], packages: [] }],
      ['registry/rollups.ts', { local: [], packages: ['better-sqlite3'] }],
      ['registry/registry.ts', { local: ['store/index.ts'], packages: [] }],
      ['domain/plans.ts', { local: [], packages: ['node:fs/promises'] }],
      ['runtime/archiver.ts', { local: [], packages: ['pg'] }],
      ['server/server.ts', { local: ['store/index.ts'], packages: ['pg'] }],
      ['store/index.ts', { local: ['events/event-log.ts', 'store/embedded/jsonl-log.ts'], packages: [] }],
      ['store/embedded/jsonl-log.ts', { local: ['registry/rollups.ts'], packages: ['node:fs', 'better-sqlite3'] }],
      ['store/postgres/log.ts', { local: ['server/server.ts'], packages: ['pg'] }],
      ['cli/stats.ts', { local: ['store/index.ts'], packages: ['pg'] }],
    ]);
    const found = violations(planted);
    const caught = (prefix: string) => found.some((v) => v.startsWith(prefix));
    expect(caught('events/jsonl-log.ts imports node:fs')).toBe(true);
    expect(caught('registry/rollups.ts imports better-sqlite3')).toBe(true);
    expect(caught('domain/plans.ts imports node:fs/promises')).toBe(true);
    expect(caught('server/server.ts imports pg')).toBe(true);
    expect(caught('runtime/archiver.ts imports pg')).toBe(true);
    // store sits above registry and below server: neither may reach past it the wrong way.
    expect(caught('registry/registry.ts imports store/index.ts')).toBe(true);
    expect(caught('store/postgres/log.ts imports server/server.ts')).toBe(true);
    // The stores themselves, and entry points, may.
    expect(caught('store/embedded/jsonl-log.ts')).toBe(false);
    expect(found.filter((v) => v.startsWith('store/postgres/log.ts'))).toHaveLength(1);
    expect(caught('cli/stats.ts')).toBe(false);
    expect(caught('server/server.ts imports store/index.ts')).toBe(false);
  });

  it('the dashboard (web/) takes from src/ only describe.ts and text.ts, and types; what it takes stays pure', () => {
    const web = buildWebGraph();
    const files = [...web.keys()];
    expect(files.filter((f) => f.startsWith('web/src/')).length, 'web/src files found').toBeGreaterThan(10);
    // It does use both, and types from the server's views: the rule is exercised, not vacuous.
    const edges = [...web.values()].flat();
    expect(edges.some((e) => e.target === 'src/events/describe.ts' && !e.typeOnly)).toBe(true);
    expect(edges.some((e) => e.target === 'src/server/api/views.ts' && e.typeOnly)).toBe(true);
    expect(webViolations(web)).toEqual([]);
  });

  it('the web check catches a value import of the server, and a Node module in the bundle', () => {
    const planted: WebGraph = new Map([
      [
        'web/src/app.tsx',
        [
          { target: 'src/server/api/views.ts', typeOnly: false, local: true },
          { target: 'src/server/api/admin.ts', typeOnly: true, local: true },
          { target: 'src/events/describe.ts', typeOnly: false, local: true },
          { target: 'web/src/api.ts', typeOnly: false, local: true },
          { target: 'preact', typeOnly: false, local: false },
          { target: 'node:fs', typeOnly: false, local: false },
        ],
      ],
      ['src/events/describe.ts', [{ target: 'src/registry/state.ts', typeOnly: false, local: true }]],
    ]);
    const found = webViolations(planted);
    expect(found.some((v) => v.startsWith('web/src/app.tsx imports src/server/api/views.ts'))).toBe(true);
    expect(found.some((v) => v.startsWith('web/src/app.tsx imports node:fs'))).toBe(true);
    expect(found.some((v) => v.startsWith('src/events/describe.ts imports src/registry/state.ts'))).toBe(true);
    expect(found).toHaveLength(3);
    expect(
      typedImports(
        "import type { A } from '../../src/a.js';\nimport { b, type C } from './b.js';\nimport './s.css';",
      ).map((i) => [i.spec, i.typeOnly]),
    ).toEqual([
      ['../../src/a.js', true],
      ['./b.js', false],
      ['./s.css', false],
    ]);
  });

  it('finds every kind of import statement', () => {
    const text = [
      "import { a } from './a.js';",
      "import type { B } from '../b.js';",
      "import {\n  c,\n  d,\n} from './cd.js';",
      "export { e } from './e.js';",
      "export type { F } from './f.js';",
      "import './side-effect.js';",
      "const g = await import('./g.js');",
      "import express from 'express';",
    ].join('\n');
    expect(importSpecifiers(text).sort()).toEqual(
      ['../b.js', './a.js', './cd.js', './e.js', './f.js', './g.js', './side-effect.js', 'express'].sort(),
    );
  });
});
