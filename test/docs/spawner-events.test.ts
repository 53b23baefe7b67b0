import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { EVENT_FIELDS, SPAWNER_EVENTS } from '../../src/events/catalogue.js';

/**
 * docs/spawner-protocol.md's "Event fields" table is written by hand; this keeps it in step
 * with the catalogue: one row per event a spawner may post, in order, with exactly the
 * required and optional fields of its schema (the identity fields the route fills in left out).
 */

const DOC = path.resolve(import.meta.dirname, '../../docs/spawner-protocol.md');
const IDENTITY = new Set(['caller_id', 'agent_id']);

const names = (cell: string) => (cell === '—' ? [] : cell.split(',').map((c) => c.trim().replace(/^`|`$/g, '')));

function table(): Array<{ event: string; required: string[]; optional: string[] }> {
  const lines = readFileSync(DOC, 'utf8').split('\n');
  const start = lines.findIndex((l) => /^\| event \| required fields \| optional fields \|/.test(l));
  expect(start, 'the Event fields table').toBeGreaterThan(-1);
  const rows = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    const [event, required, optional] = line
      .split('|')
      .slice(1)
      .map((c) => c.trim());
    rows.push({ event: event!.replace(/`/g, ''), required: names(required!), optional: names(optional!) });
  }
  return rows;
}

function catalogue(name: (typeof SPAWNER_EVENTS)[number]) {
  // The server fills in every field of a forced termination.
  if (name === 'terminate.forced') return { required: [], optional: [] };
  const required: string[] = [];
  const optional: string[] = [];
  for (const [field, schema] of Object.entries(EVENT_FIELDS[name].shape)) {
    if (IDENTITY.has(field)) continue;
    ((schema as { safeParse(v: unknown): { success: boolean } }).safeParse(undefined).success
      ? optional
      : required
    ).push(field);
  }
  return { required, optional };
}

describe('docs/spawner-protocol.md lists the fields each posted event needs', () => {
  it("one row per spawner event, with the catalogue's required and optional fields", () => {
    const rows = table();
    expect(rows.map((r) => r.event)).toEqual([...SPAWNER_EVENTS]);
    for (const name of SPAWNER_EVENTS) {
      const row = rows.find((r) => r.event === name)!;
      expect({ event: name, ...catalogue(name) }).toEqual({
        event: name,
        required: row.required,
        optional: row.optional,
      });
    }
  });
});
