import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { AnyPrimitive } from '../../src/primitives/define.js';
import { PRIMITIVES } from '../../src/primitives/index.js';
import { PACKAGE_ROOT } from '../../src/util/version.js';
import { ERROR_CODES } from '../../src/domain/errors.js';

/**
 * docs/tools.md's tool table is written by hand; this keeps it in step with the catalogue
 * (PRIMITIVES): the tools and their order, the review gate, every top-level input and output
 * field, and the error codes. Each check collects its problems as sentences naming the tool
 * and the missing item, and expects none.
 */

const DOC = 'docs/tools.md';
const HINT = `${DOC}'s tool table has drifted from the catalogue in src/primitives/: fix the table`;
const COLUMNS = { tool: 'tool', io: 'input → output', errors: 'errors', gate: 'gate' } as const;
const KNOWN_CODES: ReadonlySet<string> = new Set(ERROR_CODES);

interface Row {
  /** 1-based line in the file, for messages. */
  line: number;
  /** The tool cell without its backticks. */
  tool: string;
  io: string;
  errors: string;
  gate: string;
}

/** The cells of one table line, trimmed; `\|` is a pipe inside a cell, not a separator. */
function splitRow(line: string): string[] {
  const cells: string[] = [];
  let cell = '';
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (ch === '\\' && i + 1 < line.length) {
      const next = line[++i];
      cell += next === '|' ? '|' : ch + next;
    } else if (ch === '|') {
      cells.push(cell);
      cell = '';
    } else {
      cell += ch;
    }
  }
  cells.push(cell);
  // A row starts and ends with a pipe: drop the empty cells outside them.
  if (cells[0].trim() === '') cells.shift();
  if (cells.length > 0 && cells[cells.length - 1].trim() === '') cells.pop();
  return cells.map((c) => c.trim());
}

/** The table whose header is tool | what it does | input → output | errors | gate, and any problems reading it. */
function parseToolTable(markdown: string): { rows: Row[]; problems: string[] } {
  const lines = markdown.split(/\r?\n/);
  const start = lines.findIndex((l) => {
    if (!l.trim().startsWith('|')) return false;
    const header = splitRow(l).map((c) => c.toLowerCase());
    return header[0] === COLUMNS.tool && Object.values(COLUMNS).every((c) => header.includes(c));
  });
  if (start < 0) {
    return { rows: [], problems: [`no table with the columns ${Object.values(COLUMNS).join(', ')}`] };
  }
  const header = splitRow(lines[start]).map((c) => c.toLowerCase());
  const at = (name: string) => header.indexOf(name);
  const problems: string[] = [];
  if (!/^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/.test(lines[start + 1] ?? '')) {
    problems.push(`line ${start + 2}: the tool table's header is not followed by a delimiter row`);
  }
  const rows: Row[] = [];
  for (let i = start + 2; i < lines.length && lines[i].trim().startsWith('|'); i++) {
    const cells = splitRow(lines[i]);
    const label = `line ${i + 1}${cells[0] ? ` (${cells[0]})` : ''}`;
    if (cells.length !== header.length) {
      problems.push(`${label}: has ${cells.length} cells, the header has ${header.length} (an unescaped | in a cell?)`);
      continue;
    }
    const tool = /^`([^`]+)`$/.exec(cells[at(COLUMNS.tool)]);
    if (!tool) {
      problems.push(`${label}: the tool cell should be one backticked tool name`);
      continue;
    }
    rows.push({
      line: i + 1,
      tool: tool[1],
      io: cells[at(COLUMNS.io)],
      errors: cells[at(COLUMNS.errors)],
      gate: cells[at(COLUMNS.gate)],
    });
  }
  return { rows, problems };
}

/** The identifiers in a piece of text, so `to` counts only as a whole word and `message_id` as one. */
const words = (text: string): Set<string> => new Set(text.match(/[A-Za-z_][A-Za-z0-9_]*/g) ?? []);

/**
 * The error codes an errors cell lists: its comma-separated items outside parentheses, each one
 * backticked code (or `—` for none). Backticked text inside parentheses is an annotation
 * (`details.chain`, `detail_empty`), not a listed code.
 */
function listedCodes(cell: string): { codes: string[]; malformed: string[] } {
  let top = '';
  let depth = 0;
  let inCode = false;
  for (const ch of cell) {
    if (ch === '`') inCode = !inCode;
    if (!inCode && ch === '(') depth++;
    if (depth === 0) top += ch;
    if (!inCode && ch === ')' && depth > 0) depth--;
  }
  const codes: string[] = [];
  const malformed: string[] = [];
  const items = top.split(',').map((s) => s.trim());
  if (items.length === 1 && ['—', '-', ''].includes(items[0])) return { codes, malformed };
  for (const item of items) {
    const m = /^`([a-z][a-z0-9_]*)`$/.exec(item);
    if (m) codes.push(m[1]);
    else malformed.push(item);
  }
  return { codes, malformed };
}

/** The known error codes a description names after "Error:" / "Errors:" (or "Errors (...):"). */
function describedCodes(description: string): string[] {
  const m = /\bErrors?\b(?:\s*\([^)]*\))?\s*:/.exec(description);
  if (!m) return [];
  return [...words(description.slice(m.index + m[0].length))].filter((w) => KNOWN_CODES.has(w));
}

const doc = readFileSync(path.join(PACKAGE_ROOT, DOC), 'utf8');
const table = parseToolTable(doc);
const rowFor = new Map(table.rows.map((r) => [r.tool, r]));

/** Runs check on every catalogue tool that has a row (a missing row is the first test's failure). */
function eachTool(check: (p: AnyPrimitive, row: Row, problems: string[]) => void): string[] {
  const problems: string[] = [];
  for (const p of PRIMITIVES) {
    const row = rowFor.get(p.name);
    if (row) check(p, row, problems);
  }
  return problems;
}

describe(`${DOC} tool table`, () => {
  it('is readable: one row per tool, five cells each', () => {
    expect(table.problems, HINT).toEqual([]);
    expect(table.rows.length, `${HINT}: no tool rows found`).toBeGreaterThan(0);
  });

  it('lists exactly the catalogue tools, in catalogue order', () => {
    const listed = table.rows.map((r) => r.tool);
    const catalogue = PRIMITIVES.map((p) => p.name);
    const problems = [
      ...catalogue.filter((n) => !listed.includes(n)).map((n) => `${n}: in the catalogue but has no row`),
      ...listed.filter((n) => !catalogue.includes(n)).map((n) => `${n}: has a row but is not in the catalogue`),
      ...listed.filter((n, i) => listed.indexOf(n) !== i).map((n) => `${n}: has more than one row`),
    ];
    const firstOff = listed.findIndex((n, i) => n !== catalogue[i]);
    if (problems.length === 0 && firstOff >= 0) {
      problems.push(
        `${catalogue[firstOff]}: should be row ${firstOff + 1} (catalogue order, src/primitives/index.ts), but that row is ${listed[firstOff]}`,
      );
    }
    expect(problems, HINT).toEqual([]);
  });

  it('marks a tool "open" exactly when it is allowed during a review, else "blocked"', () => {
    const problems = eachTool((p, row, out) => {
      const expected = p.allowedDuringReview === true ? 'open' : 'blocked';
      if (row.gate !== expected) {
        out.push(
          `${p.name}: gate is "${row.gate}" but allowedDuringReview is ${String(p.allowedDuringReview ?? false)}, so it should be "${expected}"`,
        );
      }
    });
    expect(problems, HINT).toEqual([]);
  });

  it('names every top-level input field before the arrow and every output field after it', () => {
    const problems = eachTool((p, row, out) => {
      const sides = row.io.split('→');
      if (sides.length !== 2) {
        out.push(`${p.name}: the input → output cell should hold exactly one →, it holds ${sides.length - 1}`);
        return;
      }
      const [input, output] = sides.map(words);
      for (const field of Object.keys(p.inputSchema.shape)) {
        if (!input.has(field))
          out.push(`${p.name}: input field "${field}" is not named before the → in its input → output cell`);
      }
      for (const field of Object.keys(p.outputSchema.shape)) {
        if (!output.has(field))
          out.push(`${p.name}: output field "${field}" is not named after the → in its input → output cell`);
      }
    });
    expect(problems, HINT).toEqual([]);
  });

  it('lists only known error codes, including every code the tool description names', () => {
    // Guards the extraction itself: if it found nothing anywhere, the check below would pass vacuously.
    expect(
      PRIMITIVES.some((p) => describedCodes(p.description).length > 0),
      'no description names an error code after "Errors:"',
    ).toBe(true);
    const problems = eachTool((p, row, out) => {
      const { codes, malformed } = listedCodes(row.errors);
      for (const item of malformed) {
        out.push(
          `${p.name}: errors cell item "${item}" is not a backticked error code (annotations go in parentheses)`,
        );
      }
      for (const code of codes) {
        if (!KNOWN_CODES.has(code)) out.push(`${p.name}: errors cell lists \`${code}\`, which is not in ERROR_CODES`);
      }
      for (const code of describedCodes(p.description)) {
        if (!codes.includes(code))
          out.push(`${p.name}: its description names error \`${code}\` but the errors cell does not list it`);
      }
    });
    expect(problems, HINT).toEqual([]);
  });
});
