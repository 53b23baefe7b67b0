/**
 * Asking after a process by its pid, for every layer (the spawner included).
 */

/**
 * Whether a process with this pid exists: signal 0 asks without sending. EPERM means it
 * exists but belongs to another user, so it counts as alive.
 */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
