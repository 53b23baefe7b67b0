// In src/ (not test/support/) so the bench, compiled from src/, waits on conditions the way the tests do.
/**
 * Waits for a condition that no event announces (a row in a list, a process state): probes
 * it every 20 ms until it yields a value, and fails after the deadline naming what it
 * waited for. The interval is the probe's pace, not a stand-in for the condition.
 */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  deadlineMs = 10_000,
): Promise<T> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A deadline on something awaited: "never happened" becomes a failure, not a hang. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms))),
  ]);
}
