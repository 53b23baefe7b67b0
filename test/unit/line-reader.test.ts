import { PassThrough } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cutToBytes, LineSplitter, readLines, type LineCut } from '../../src/spawner/line-reader.js';

/**
 * How the spawner reads an agent's stdout (src/spawner/line-reader.ts): lines as readline
 * split them, however the bytes are chunked, and a line past the cap cut to its first bytes
 * (a whole UTF-8 character) with its real length, never holding more than the cap. The
 * spawner's heartbeat under a 1 MB line is test/integration/agent-output.test.ts.
 */

function split(chunks: Buffer[], max = 1 << 20): Array<{ line: string; cut: LineCut | null }> {
  const out: Array<{ line: string; cut: LineCut | null }> = [];
  const splitter = new LineSplitter(max, (line, cut) => out.push({ line, cut }));
  for (const c of chunks) splitter.push(c);
  splitter.end();
  return out;
}

/** Cuts `bytes` at the given offsets. */
function chunked(bytes: Buffer, cuts: number[]): Buffer[] {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let from = 0;
  for (const c of [...at, bytes.length]) {
    out.push(bytes.subarray(from, c));
    from = c;
  }
  return out;
}

describe('LineSplitter', () => {
  it('splits at \\n, \\r\\n and \\r, keeps empty lines, and hands on a last line without its newline', () => {
    const lines = split([Buffer.from('one\ntwo\r\nthree\rfour\n\nfive')]).map((l) => l.line);
    expect(lines).toEqual(['one', 'two', 'three', 'four', '', 'five']);
    expect(split([Buffer.from('a\n')]).map((l) => l.line)).toEqual(['a']);
    expect(split([])).toEqual([]);
  });

  it('reads a \\r\\n split across two chunks as one line end', () => {
    expect(split([Buffer.from('a\r'), Buffer.from('\nb\r'), Buffer.from('c')]).map((l) => l.line)).toEqual([
      'a',
      'b',
      'c',
    ]);
  });

  it('gives the lines readline would, however the bytes are chunked', () => {
    const piece = fc.constantFrom('a', 'é', '中', '😀', '\n', '\r', '\r\n', ' ', '{"event":"x"}');
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 40 }), fc.array(fc.nat(400), { maxLength: 8 }), (pieces, cuts) => {
        const text = pieces.join('');
        const expected = text.split(/\r\n|\r|\n/);
        if (expected.at(-1) === '') expected.pop();
        const got = split(chunked(Buffer.from(text), cuts));
        expect(got.map((l) => l.line)).toEqual(expected);
        expect(got.every((l) => l.cut === null)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('cuts a 1 MB line to its first 64 KiB, says how long it was, and never holds more than the cap', () => {
    const max = 64 * 1024;
    const line = Buffer.from('eyJ'.repeat(333_334).slice(0, 1_000_000));
    const out: Array<{ line: string; cut: LineCut | null }> = [];
    const splitter = new LineSplitter(max, (l, cut) => out.push({ line: l, cut }));
    let mostHeld = 0;
    for (let i = 0; i < line.length; i += 16 * 1024) {
      splitter.push(line.subarray(i, i + 16 * 1024));
      mostHeld = Math.max(mostHeld, splitter.held);
    }
    splitter.push(Buffer.from('\nnext\n'));
    splitter.end();
    expect(mostHeld).toBeLessThanOrEqual(max);
    expect(out).toEqual([
      { line: line.subarray(0, max).toString(), cut: { bytes: 1_000_000, kept: max } },
      { line: 'next', cut: null },
    ]);
  });

  it('cuts back to a whole UTF-8 character, and keeps a line of exactly the cap whole', () => {
    // 'é' is two bytes: a cap of 5 bytes keeps two of them (4 bytes), not half of the third.
    expect(split([Buffer.from('éééé\n')], 5)).toEqual([{ line: 'éé', cut: { bytes: 8, kept: 4 } }]);
    expect(split([Buffer.from('😀😀\n')], 6)).toEqual([{ line: '😀', cut: { bytes: 8, kept: 4 } }]);
    expect(split([Buffer.from('abcde\nabcdef\n')], 5)).toEqual([
      { line: 'abcde', cut: null },
      { line: 'abcde', cut: { bytes: 6, kept: 5 } },
    ]);
  });

  it("holds one buffer of at most the cap for a line fed a byte at a time, and frees a long line's buffer after it", () => {
    // A buffer per chunk made single-byte chunks cost an object per byte (a 4 MiB line, about 600 MB).
    const max = 128 * 1024;
    const out: Array<{ line: string; cut: LineCut | null }> = [];
    const splitter = new LineSplitter(max, (l, cut) => out.push({ line: l, cut }));
    const line = Buffer.from('é'.repeat(200_000)); // 400,000 bytes
    let mostAllocated = 0;
    let grew = 0;
    let last = 0;
    for (let i = 0; i < line.length; i++) {
      splitter.push(line.subarray(i, i + 1));
      if (splitter.allocated !== last) grew++;
      last = splitter.allocated;
      mostAllocated = Math.max(mostAllocated, splitter.allocated);
    }
    expect(mostAllocated).toBe(max);
    // Grown by doubling: a handful of buffers for the whole line, not one per byte.
    expect(grew).toBeLessThanOrEqual(Math.ceil(Math.log2(max / 256)) + 1);
    expect(splitter.held).toBe(max);
    splitter.push(Buffer.from('\n'));
    expect(out).toEqual([{ line: 'é'.repeat(max / 2), cut: { bytes: 400_000, kept: max } }]);
    expect(splitter.allocated).toBe(0);
    // Short lines reuse a small buffer.
    splitter.push(Buffer.from('a\nbb\nccc'));
    expect(splitter.allocated).toBeLessThanOrEqual(256);
    expect(splitter.current()).toEqual({ line: 'ccc', cut: null });
    splitter.end();
    expect(out.slice(1).map((l) => l.line)).toEqual(['a', 'bb', 'ccc']);
  });

  it('cuts a text read whole to a byte budget for the log, back to a whole character, with its length', () => {
    expect(cutToBytes('short', 8)).toBeNull();
    expect(cutToBytes('abcdefgh', 8)).toBeNull();
    expect(cutToBytes('abcdefghi', 8)).toEqual({ text: 'abcdefgh', cut: { bytes: 9, kept: 8 } });
    expect(cutToBytes('ééééé', 5)).toEqual({ text: 'éé', cut: { bytes: 10, kept: 4 } });
    expect(cutToBytes('ab😀😀', 5)).toEqual({ text: 'ab', cut: { bytes: 10, kept: 2 } });
    expect(cutToBytes('abcd😀', 5)).toEqual({ text: 'abcd', cut: { bytes: 8, kept: 4 } });
  });

  it('reads a stream to its end through readLines', async () => {
    const stream = new PassThrough();
    const lines: string[] = [];
    const ended = new Promise<void>((resolve) => stream.once('end', () => setImmediate(resolve)));
    readLines(stream, 8, (line, cut) => lines.push(cut ? `${line} (cut from ${cut.bytes})` : line));
    stream.write('short\nmuch too long for eight\nla');
    stream.end('st');
    stream.resume();
    await ended;
    expect(lines).toEqual(['short', 'much too (cut from 23)', 'last']);
  });
});
