import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { EVENT_NAMES } from '../../src/events/catalogue.js';
import { PRIMITIVES } from '../../src/primitives/index.js';
import { jsonFilesUnder, renderSchemas } from '../../src/scripts/generate-schemas.js';
import { PACKAGE_ROOT } from '../../src/util/version.js';

const DIR = path.join(PACKAGE_ROOT, 'schemas');
const HINT = 'schemas/ is out of date with the zod definitions: run `npm run schemas` and commit the result';

describe('schemas/', () => {
  const files = renderSchemas();

  it('holds exactly the generated files, unchanged', () => {
    for (const [rel, text] of files) {
      const file = path.join(DIR, rel);
      expect(existsSync(file), `${rel} is missing. ${HINT}`).toBe(true);
      expect(readFileSync(file, 'utf8'), `${rel} differs. ${HINT}`).toBe(text);
    }
    const extra = jsonFilesUnder(DIR).filter((rel) => !files.has(rel));
    expect(extra, `stale files in schemas/. ${HINT}`).toEqual([]);
  });

  it('covers every tool and every event', () => {
    for (const p of PRIMITIVES) {
      expect(files.has(`tools/${p.name}.input.json`)).toBe(true);
      expect(files.has(`tools/${p.name}.output.json`)).toBe(true);
    }
    for (const name of EVENT_NAMES) expect(files.has(`events/${name}.json`)).toBe(true);
  });

  it('makes tool inputs strict objects', () => {
    for (const p of PRIMITIVES) {
      const schema = JSON.parse(files.get(`tools/${p.name}.input.json`)!) as Record<string, unknown>;
      expect(schema.type, p.name).toBe('object');
      expect(schema.additionalProperties, p.name).toBe(false);
    }
  });

  it('requires the envelope on every event', () => {
    for (const name of EVENT_NAMES) {
      const schema = JSON.parse(files.get(`events/${name}.json`)!) as {
        required?: string[];
        properties?: { event?: unknown };
      };
      expect(schema.required, name).toEqual(expect.arrayContaining(['seq', 'ts', 'event', 'task_id']));
      expect(schema.properties?.event, name).toMatchObject({ const: name });
    }
  });
});
