/**
 * The one clock: wall time in Unix seconds (a float), the `ts` of every event. It is
 * injected wherever time is read (the log, the watchdog, the spawner hub, MCP session
 * expiry, token expiry), so tests can drive time by hand instead of sleeping.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() / 1000 };
