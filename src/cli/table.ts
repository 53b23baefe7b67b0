/**
 * What the client commands print for people: aligned tables and the few value formats they
 * share (times; money and excerpts are in util/text.ts). Scripts use `--json` instead.
 */

/** Columns padded to their widest cell, two spaces apart; the last column is not padded. */
export function table(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => width(r[i] ?? ''))));
  return all
    .map((row) =>
      row
        .map((cell, i) => (i === row.length - 1 ? cell : cell + ' '.repeat(widths[i]! - width(cell))))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `key  value` lines with the keys aligned, for one record (`agent show`). */
export function fields(pairs: ReadonlyArray<readonly [string, string]>, indent = '  '): string {
  const w = Math.max(...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${indent}${k.padEnd(w)}  ${v}`).join('\n');
}

// Code points, not UTF-16 units: a tree's box-drawing characters and names with accents count as one.
function width(s: string): number {
  return [...s].length;
}

const pad2 = (n: number) => String(n).padStart(2, '0');

/** Unix seconds as the local `HH:MM:SS`. */
export function clock(ts: number): string {
  const d = new Date(ts * 1000);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

/** Unix seconds as the local `YYYY-MM-DD HH:MM`; `-` for none. */
export function dateTime(ts: number | null | undefined): string {
  if (ts === null || ts === undefined) return '-';
  const d = new Date(ts * 1000);
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
}
