// In src/ (not test/support/) so the bench, compiled from src/, waits on conditions the way the tests do.
/**
 * Waits for a condition that no event announces (a row in a list, a process state): probes
 * it every 20 ms until it yields a value, and fails after the deadline naming what it
 * waited for. The interval is the probe's pace, not a stand-in for the condition.
 */
export async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, deadlineMs = 10_000): Promise<T> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
