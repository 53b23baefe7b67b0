/** Short renderings of values for people: the CLI's tables and the event sentences share them. */
import { printable } from './terminal.js';

/**
 * A text on one line (whitespace runs become one space), without escape sequences, controls
 * or invisible characters (`printable`: it may be an agent's, and a terminal prints it), cut
 * at `max` characters with `…`.
 */
export function excerpt(text: string, max = 60): string {
  const flat = printable(text).replace(/\s+/g, ' ').trim();
  const chars = [...flat];
  return chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : flat;
}

/** `1 message`, `2 messages`. */
export function plural(n: number, word: string, many = `${word}s`): string {
  return `${n} ${n === 1 ? word : many}`;
}

export function usd(n: number): string {
  return `$${n.toFixed(4)}`;
}
