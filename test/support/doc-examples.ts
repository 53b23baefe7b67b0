/**
 * Checked examples of a markdown page (docs/cli.md): a shell block marked `<!-- checked -->`
 * on the line before it holds commands, each followed by the lines it prints as `# ` comment
 * lines, or, for the block's last command, by a plain fenced block right after the shell
 * block. A last output line ending in `(exit N)` (two spaces or more before it) says the
 * command exits N; otherwise it exits 0. The marker may name a scene the test sets up first
 * (`<!-- checked: scene a question waiting -->`) and say that the command runs until stopped
 * (`<!-- checked: runs until stopped -->`: its output is awaited, then it gets SIGTERM).
 *
 * Samples are compared with what was printed line by line. What differs from run to run is
 * matched by shape: ids (`tsk_…`, `ag_…`, `q_…`, `tm_…`, `pl_…`, `sp_…`, `msg_…`) and agent
 * names (`writer-d83f`) are bound on first sight to what was printed there and must stay
 * bound to it (so a command using the doc's id runs with the real one); tokens, ports,
 * clock times, dates and pids match any; a gap of two spaces or more between columns matches
 * any such gap; `...` matches anything within a line, and a line of its own `...` any number
 * of lines.
 */

export interface DocCommand {
  /** 1-based line of the command in the page. */
  line: number;
  text: string;
  expected: string[];
  exit: number;
}

export interface DocExample {
  /** 1-based line of the marker. */
  line: number;
  scene: string | null;
  runsUntilStopped: boolean;
  commands: DocCommand[];
}

const MARKER = /^\s*<!--\s*checked(?::\s*(.*?))?\s*-->\s*$/;
const EXIT = /\s{2,}\(exit (\d+)\)$/;

export function checkedExamples(markdown: string): DocExample[] {
  const lines = markdown.split('\n');
  const out: DocExample[] = [];
  for (let i = 0; i < lines.length; i++) {
    const marker = MARKER.exec(lines[i]!);
    if (!marker) continue;
    const markerLine = i + 1;
    let open = i + 1;
    while (open < lines.length && lines[open]!.trim() === '') open++;
    if (!/^```(sh|bash)\s*$/.test(lines[open] ?? ''))
      throw new Error(`line ${i + 1}: <!-- checked --> is not followed by a sh block`);
    let close = open + 1;
    while (close < lines.length && lines[close] !== '```') close++;
    const commands: DocCommand[] = [];
    for (let j = open + 1; j < close; j++) {
      const l = lines[j]!;
      if (l.trim() === '') continue;
      if (l.startsWith('#')) {
        const last = commands.at(-1);
        if (!last) throw new Error(`line ${j + 1}: output before any command`);
        last.expected.push(l === '#' ? '' : l.replace(/^# /, ''));
        continue;
      }
      let text = l;
      const at = j;
      while (text.endsWith('\\') && j + 1 < close) text = `${text.slice(0, -1)}\n${lines[++j]!}`;
      commands.push({ line: at + 1, text, expected: [], exit: 0 });
    }
    // A plain block right after: what the last command prints.
    let next = close + 1;
    while (next < lines.length && lines[next]!.trim() === '') next++;
    if (lines[next] === '```') {
      let end = next + 1;
      while (end < lines.length && lines[end] !== '```') end++;
      const last = commands.at(-1)!;
      if (last.expected.length > 0) throw new Error(`line ${last.line}: both # output lines and a sample block`);
      last.expected = lines.slice(next + 1, end);
      i = end;
    } else i = close;
    for (const c of commands) {
      const m = c.expected.length ? EXIT.exec(c.expected.at(-1)!) : null;
      if (m) {
        c.exit = Number(m[1]);
        c.expected[c.expected.length - 1] = c.expected.at(-1)!.replace(EXIT, '');
      }
    }
    const parts = (marker[1] ?? '')
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean);
    const unknown = parts.filter((p) => p !== 'runs until stopped' && !p.startsWith('scene '));
    if (unknown.length) throw new Error(`line ${markerLine}: unknown marker part ${unknown.join(', ')}`);
    const scene = parts.find((p) => p.startsWith('scene '))?.slice('scene '.length) ?? null;
    const runsUntilStopped = parts.includes('runs until stopped');
    if (runsUntilStopped && commands.length !== 1)
      throw new Error(`line ${markerLine}: a block that runs until stopped holds one command`);
    out.push({ line: markerLine, scene, runsUntilStopped, commands });
  }
  return out;
}

/** Tokens whose value differs from run to run, bound on first sight. */
const BOUND = [
  /\bmsg_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/,
  /\b(?:tsk|ag|q|tm|pl)_[0-9a-f]{12}\b/,
  // A spawner's id ends in its machine's name (or the instance a test gives it).
  /\bsp_[0-9a-f]{12}(?:\.[\w-]+)*/,
  // An agent's name ends in its id's last four hex digits; a UUID's parts are not names.
  /(?<![\w-])[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*-[0-9a-f]{4}(?![\w-])/,
];
/** Shapes matched by shape only (the pattern each stands for). */
const ANY: Array<[RegExp, string]> = [
  [/eyJ[\w-]*(?:\.[\w-]*)*(?:\.\.\.|…)?/, 'eyJ[\\w.-]+'],
  [/\b127\.0\.0\.1:\d+/, '127\\.0\\.0\\.1:\\d+'],
  [/\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/, '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z'],
  [/\b\d{8}T\d{6}Z/, '\\d{8}T\\d{6}Z'],
  [/\b\d{4}-\d\d-\d\d \d\d:\d\d\b/, '\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d'],
  [/\b\d\d:\d\d:\d\d\b/, '\\d\\d:\\d\\d:\\d\\d'],
  [/\bpid \d+/, 'pid \\d+'],
  [/\brelay\[\d+\]/, 'relay\\[\\d+\\]'],
  [/\.\.\./, '.*?'],
];
const TOKEN = new RegExp([...BOUND, ...ANY.map(([r]) => r)].map((r) => `(${r.source})`).join('|'), 'g');
const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** Literal text; a gap of two spaces or more between columns matches any such gap (ids and names vary in length). */
const literal = (s: string, atStart: boolean) =>
  escapeRegExp(s).replace(/ {2,}/g, (gap, at: number) => (atStart && at === 0 ? gap : ' {2,}'));

export type Bindings = Map<string, string>;

/** One sample line as a regex: bound tokens as their values, unbound ones captured. */
function lineRegex(sample: string, bindings: Bindings): { re: RegExp; captures: string[] } {
  let src = '';
  let last = 0;
  const captures: string[] = [];
  for (const m of sample.matchAll(TOKEN)) {
    src += literal(sample.slice(last, m.index), last === 0);
    last = m.index! + m[0].length;
    const kind = m.slice(1).findIndex((g) => g !== undefined);
    if (kind < BOUND.length) {
      const known = bindings.get(m[0]);
      if (known !== undefined) src += escapeRegExp(known);
      else if (captures.includes(m[0])) src += `\\k<v${captures.indexOf(m[0])}>`;
      else {
        src += `(?<v${captures.length}>${BOUND[kind]!.source})`;
        captures.push(m[0]);
      }
    } else src += ANY[kind - BOUND.length]![1];
  }
  src += literal(sample.slice(last), last === 0);
  return { re: new RegExp(`^${src}$`), captures };
}

/**
 * Whether `printed` is what `sample` shows, binding the sample's ids and names to the
 * printed ones (into `bindings`, only on a match). Null when it is; else a description of
 * the first sample line that does not fit.
 */
export function matchSample(sample: string[], printed: string[], bindings: Bindings): string | null {
  let best = { at: -1, why: '' };
  const go = (s: number, p: number, b: Bindings): Bindings | null => {
    if (s === sample.length) return p === printed.length ? b : null;
    if (sample[s]!.trim() === '...') {
      for (let k = p; k <= printed.length; k++) {
        const r = go(s + 1, k, b);
        if (r) return r;
      }
      return null;
    }
    if (p === printed.length) {
      if (s > best.at) best = { at: s, why: `nothing printed for it` };
      return null;
    }
    const { re, captures } = lineRegex(sample[s]!, b);
    const m = re.exec(printed[p]!);
    if (!m) {
      if (s > best.at) best = { at: s, why: `printed instead: ${JSON.stringify(printed[p])}` };
      return null;
    }
    const nb = new Map(b);
    const taken = new Set(nb.values());
    for (const [i, docValue] of captures.entries()) {
      const real = m.groups![`v${i}`]!;
      if (taken.has(real)) {
        if (s > best.at)
          best = { at: s, why: `${docValue} is printed as ${real}, which another id of the page already stands for` };
        return null;
      }
      nb.set(docValue, real);
      taken.add(real);
    }
    return go(s + 1, p + 1, nb);
  };
  const result = go(0, 0, bindings);
  if (result) {
    for (const [k, v] of result) bindings.set(k, v);
    return null;
  }
  return best.at < 0
    ? `printed ${printed.length} lines, the sample has ${sample.length}`
    : `sample line ${JSON.stringify(sample[best.at])}: ${best.why}`;
}

/** A command of the page with its ids and names replaced by the real ones; throws on one never printed before. */
export function boundCommand(text: string, bindings: Bindings): string {
  return text.replace(new RegExp(BOUND.map((r) => r.source).join('|'), 'g'), (token) => {
    const real = bindings.get(token);
    if (real === undefined) throw new Error(`${token} is used before any output of the page showed it`);
    return real;
  });
}
