import { createRequire } from 'node:module';
import type YamlModule from 'yaml';

/**
 * The front matter of a `SKILL.md`: cut from the body, then read as YAML. Most front
 * matter (the bundled skills' included) is a few `key: text` and `key: [a, b]` lines, which
 * `readSimple` reads by itself; anything else goes to the `yaml` package, loaded then. So a
 * start, which checks every skill, does not load a YAML parser of some 70 modules for them.
 */

/**
 * A `SKILL.md` cut into its front matter and its body: the opening `---` (optionally
 * `---yaml`) on the first line, the front matter up to the next line starting `---`, the body
 * after that line. Null when the file does not open with front matter. (The split of
 * gray-matter, done here: that package also loads js-yaml, which we do not use.)
 */
export function splitFrontMatter(text: string): { matter: string; body: string } | null {
  const s = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  if (!s.startsWith('---') || s[3] === '-') return null;
  const lineEnd = s.indexOf('\n');
  const language = s.slice(3, lineEnd === -1 ? s.length : lineEnd).trim();
  if (language !== '' && language !== 'yaml') throw new Error(`the front matter is marked "${language}", not YAML`);
  const open = lineEnd === -1 ? s.length : lineEnd;
  const close = s.indexOf('\n---', open);
  if (close === -1) return { matter: s.slice(open), body: '' };
  // A CRLF file: the closing line's CR is not the front matter's (a lone CR trips the YAML parser).
  const matter = s.slice(open, s[close - 1] === '\r' ? close - 1 : close);
  let body = s.slice(close + 4);
  if (body[0] === '\r') body = body.slice(1);
  if (body[0] === '\n') body = body.slice(1);
  return { matter, body };
}

/** The front matter as YAML reads it (an empty one is an empty mapping); throws what the YAML parser throws. */
export function parseFrontMatter(matter: string): unknown {
  return readSimple(matter) ?? yaml().parse(matter) ?? {};
}

const requireYaml = createRequire(import.meta.url);
let yamlModule: typeof YamlModule | null = null;
const yaml = (): typeof YamlModule => (yamlModule ??= requireYaml('yaml') as typeof YamlModule);

const KEY_LINE = /^([A-Za-z_][A-Za-z0-9_-]*): +(.*)$/;
/** Printable characters only: no tab, CR, other controls, BOM or line separators, which YAML treats its own ways. */
const PRINTABLE = /^[\x20-\x7e\u00a0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\u{10000}-\u{10ffff}]*$/u;
/** A plain word in a flow list: what YAML reads as that same string. */
const LIST_WORD = /^[A-Za-z_][A-Za-z0-9_./-]*$/;
/** Words YAML (1.2 core, or 1.1 habits some parsers keep) may read as something other than text. */
const SPECIAL_WORD = /^(~|null|true|false|yes|no|on|off|y|n)$/i;

/**
 * The simple front matter, read without a YAML parser: lines of `key: value`, where a
 * value is a decimal integer, a flow list of plain words (`[Read, Grep]`), or plain text
 * that YAML reads as that same text (no quotes, indicators, comments, colons followed by
 * a space, brackets, or words and numbers YAML types). Null for anything else, even what
 * would be valid: then the YAML parser reads it (test/unit/skills.test.ts checks the two agree).
 */
export function readSimple(matter: string): Record<string, unknown> | null {
  const out: Record<string, unknown> = {};
  const lines = matter.split('\n');
  for (const [i, raw] of lines.entries()) {
    // A CRLF line ends as an LF line does; a CR anywhere else (a last line's included) is YAML's business.
    const line = raw.endsWith('\r') && i < lines.length - 1 ? raw.slice(0, -1) : raw;
    if (/^ *$/.test(line)) continue;
    const m = KEY_LINE.exec(line);
    if (!m || !PRINTABLE.test(line) || SPECIAL_WORD.test(m[1]!)) return null;
    const key = m[1]!;
    // YAML trims spaces only (JavaScript's trimEnd would take a no-break space too).
    const value = m[2]!.replace(/ +$/, '');
    if (value === '' || Object.hasOwn(out, key)) return null;
    const read = readValue(value);
    if (read === undefined) return null;
    out[key] = read;
  }
  return out;
}

function readValue(value: string): unknown {
  if (value.startsWith('[')) {
    if (!value.endsWith(']')) return undefined;
    const inner = value.slice(1, -1).replace(/^ +| +$/g, '');
    if (inner === '') return [];
    const items = inner.split(',').map((w) => w.replace(/^ +| +$/g, ''));
    return items.every((w) => LIST_WORD.test(w) && !SPECIAL_WORD.test(w)) ? items : undefined;
  }
  if (/^(0|[1-9][0-9]{0,14})$/.test(value)) return Number(value);
  // Indicators YAML gives a meaning at the start of a value, and what may end or type it.
  if (/^[-?:,[\]{}#&*!|>'"%@`]/.test(value) || /[#[\]{}]|: |:$/.test(value)) return undefined;
  if (SPECIAL_WORD.test(value) || /^[-+.]?[0-9]/.test(value) || /^[-+]?\.(inf|nan)$/i.test(value)) return undefined;
  return value;
}
