/**
 * Asking after a process by its pid, for every layer (the spawner included).
 */

/**
 * Whether a process with this pid exists: signal 0 asks without sending. EPERM means it
 * exists but belongs to another user: alive by default (a lock's or a session's owner may be
 * another user's process); with `ownOnly`, gone: for watching a child of our own, whose pid
 * only another user's new process can hold once it has ended.
 */
export function pidAlive(pid: number, options: { ownOnly?: boolean } = {}): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return !options.ownOnly && (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** `pidAlive(pid, { ownOnly: true })`, shaped for `Array.some` and other callbacks. */
export const ownProcessAlive = (pid: number): boolean => pidAlive(pid, { ownOnly: true });
