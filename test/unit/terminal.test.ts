import { describe, expect, it } from 'vitest';
import { excerpt, printable, printableBlock, printableLine } from '../../src/util/text.js';

/** What the CLI prints of an agent's words (src/util/text.ts): nothing a terminal obeys, every further line marked. */
describe('printable', () => {
  const ESC = '\u001b';
  it('removes CSI, OSC (to BEL, to ST, or to the end), other escapes and C1 forms, without a CR needed', () => {
    expect(printable(`a${ESC}[1A${ESC}[2Kb${ESC}[38;5;196mc${ESC}[0m`)).toBe('abc');
    expect(printable(`x${ESC}]52;c;ZWNobw==\u0007y`)).toBe('xy');
    expect(printable(`${ESC}]8;;https://evil.example/${ESC}\\link${ESC}]8;;${ESC}\\`)).toBe('link');
    expect(printable(`x${ESC}]0;title`)).toBe('x');
    expect(printable(`a${ESC}7${ESC}8${ESC}(Bb${ESC}`)).toBe('ab');
    expect(printable('a\u009b2Kb\u009d52;c;x\u009cc')).toBe('abc');
    expect(printable('a\u0000\u0007\u0008\u007fb\tc')).toBe('ab\tc');
    expect(printable('a\u202eb\u200bc\ufe0f')).toBe('abc');
    expect(printable('1\r\n2\r3\u20284\u00855')).toBe('1\n2\n3\n4\n5');
  });

  it('a block marks every further line; a line and an excerpt are one line', () => {
    expect(printableBlock('one\ntwo\r  2. three', '   | ')).toBe('one\n   | two\n   |   2. three');
    expect(printableLine(`a\nb${ESC}[2J  c`)).toBe('a b c');
    expect(excerpt(`said ${ESC}[1A${ESC}[2K"hi"\u0007`, 60)).toBe('said "hi"');
  });
});
