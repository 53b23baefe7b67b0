import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { EVENT_NAMES, storedEventSchema } from '../events/catalogue.js';
import { PRIMITIVES } from '../primitives/index.js';
import { toolJsonSchema } from '../server/mcp/tool-listing.js';
import { PACKAGE_ROOT } from '../util/version.js';

/**
 * Generates schemas/: one JSON Schema per tool input, tool output and event, from the zod
 * definitions. `npm run schemas` writes them; test/unit/schemas.test.ts fails when the checked-in
 * files drift from the code.
 */

const BASE_ID = 'https://beidou.dev/schemas/';
const DRAFT = 'https://json-schema.org/draft/2020-12/schema';

const README = `# schemas/

JSON Schemas for every Beidou tool's input and output (\`tools/<tool>.input.json\`,
\`tools/<tool>.output.json\`) and for every stored event (\`events/<event>.json\`, including
the envelope \`seq\`, \`ts\`, \`event\`, \`task_id\`).

These files are generated from the zod definitions by \`npm run schemas\`
(src/scripts/generate-schemas.ts). Do not edit them by hand: change the code and regenerate.
A test fails when they drift from the code.
`;

/** Puts $schema, $id and title first so every file opens the same way. */
function document(rel: string, title: string, schema: Record<string, unknown>): string {
  const { $schema: _ignored, ...rest } = schema;
  const doc = { $schema: DRAFT, $id: BASE_ID + rel, title, ...rest };
  return `${JSON.stringify(doc, null, 2)}\n`;
}

/** Every generated file: path relative to schemas/ → file text. Pure; no I/O. */
export function renderSchemas(): Map<string, string> {
  const files = new Map<string, string>();
  for (const p of PRIMITIVES) {
    // Same function the MCP endpoint lists with, so these files equal what clients see.
    for (const io of ['input', 'output'] as const) {
      const rel = `tools/${p.name}.${io}.json`;
      const schema = io === 'input' ? p.inputSchema : p.outputSchema;
      files.set(rel, document(rel, `${p.name} ${io}`, toolJsonSchema(schema, io)));
    }
  }
  for (const name of EVENT_NAMES) {
    const rel = `events/${name}.json`;
    // Events are read by consumers of the log, so describe them as stored (output side).
    const schema = z.toJSONSchema(storedEventSchema(name), { io: 'output', target: 'draft-2020-12' }) as Record<
      string,
      unknown
    >;
    files.set(rel, document(rel, `${name} event`, schema));
  }
  files.set('README.md', README);
  return files;
}

/** Relative paths (with "/") of every .json file under dir, at any depth. */
export function jsonFilesUnder(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(path.join(dir, prefix), { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) out.push(...jsonFilesUnder(dir, rel));
    else if (entry.name.endsWith('.json')) out.push(rel);
  }
  return out;
}

/** Writes the files into dir and removes .json files there that are no longer generated. */
export function writeSchemas(dir: string): number {
  const files = renderSchemas();
  mkdirSync(dir, { recursive: true });
  for (const rel of jsonFilesUnder(dir)) if (!files.has(rel)) rmSync(path.join(dir, rel));
  for (const [rel, text] of files) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), text);
  }
  return files.size;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const dir = path.join(PACKAGE_ROOT, 'schemas');
  console.log(`wrote ${writeSchemas(dir)} files to ${dir}`);
}
