/**
 * Runtime-only activity of agents: tool calls in flight and when each agent last called a
 * tool. Not state (it is not in the log): after a restart it starts empty, and the watchdog
 * falls back to the activity recorded by events.
 */
export class Activity {
  private readonly inFlight = new Map<string, number>();
  private readonly lastCall = new Map<string, number>();

  begin(agentId: string, now: number): void {
    this.inFlight.set(agentId, (this.inFlight.get(agentId) ?? 0) + 1);
    this.lastCall.set(agentId, now);
  }

  end(agentId: string, now: number): void {
    const n = (this.inFlight.get(agentId) ?? 1) - 1;
    if (n <= 0) this.inFlight.delete(agentId);
    else this.inFlight.set(agentId, n);
    this.lastCall.set(agentId, now);
  }

  busy(agentId: string): boolean {
    return (this.inFlight.get(agentId) ?? 0) > 0;
  }

  lastCallAt(agentId: string): number {
    return this.lastCall.get(agentId) ?? 0;
  }
}
