/**
 * Per-agent locks that refuse instead of queueing: a second `spawn_agent` while one is in
 * flight is an error the model should see (`concurrent_spawn`), not a hidden wait.
 */
export class KeyedLock {
  private readonly held = new Set<string>();

  /** Runs `fn` holding the lock for `key`, or returns false at once if it is held. */
  async tryWith<T>(key: string, fn: () => Promise<T>): Promise<{ acquired: true; value: T } | { acquired: false }> {
    if (this.held.has(key)) return { acquired: false };
    this.held.add(key);
    try {
      return { acquired: true, value: await fn() };
    } finally {
      this.held.delete(key);
    }
  }

  isHeld(key: string): boolean {
    return this.held.has(key);
  }
}
