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
}

/**
 * A per-key mutex that queues: declare_plan and remove_plan take it so the second of two
 * concurrent calls sees the first one's result (e.g. `plan_already_declared`).
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  async with<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    await previous;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}
