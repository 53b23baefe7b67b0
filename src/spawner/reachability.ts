import type { Logger } from 'pino';

/** An exit this soon after the server came back still counts as caused by the outage. */
const OUTAGE_GRACE_MS = 10_000;

/**
 * Whether the server answers, as the spawner sees it: up from the hello on its command
 * stream, down from the stream's end or a failed spooled post. It counts the outages so a
 * supervisor can tell whether an agent died of the server's absence (supervisor.ts).
 */
export class Reachability {
  private reachable = false;
  private reachableAt = 0;
  /** The times the server stopped answering so far. */
  outages = 0;
  private waiters: Array<() => void> = [];

  /** `back` runs each time the server answers again (the spool sends what waited). */
  constructor(
    private readonly serverUrl: string,
    private readonly log: Logger,
    private readonly back: () => void,
  ) {}

  get up(): boolean {
    return this.reachable;
  }

  markReachable(): void {
    if (this.reachable) return;
    this.reachable = true;
    this.reachableAt = Date.now();
    for (const wake of this.waiters.splice(0)) wake();
    this.back();
  }

  markUnreachable(): void {
    if (!this.reachable) return;
    this.reachable = false;
    this.outages++;
    this.log.warn(
      { server: this.serverUrl },
      'the server is unreachable; agents keep running and their reports wait in the spool',
    );
  }

  /** Resolves once the server answers again (at once if it does now). */
  whenReachable(): Promise<void> {
    if (this.reachable) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /**
   * Whether an agent process that started when `outagesAtStart` outages had happened died
   * of the server's absence: the server is unreachable now (asked afresh), or it went away
   * during the process's life and came back only moments ago.
   */
  async exitDuringOutage(outagesAtStart: number): Promise<boolean> {
    if (this.reachable && !(await this.probe())) this.markUnreachable();
    if (!this.reachable) return true;
    return this.outages > outagesAtStart && Date.now() - this.reachableAt < OUTAGE_GRACE_MS;
  }

  private async probe(): Promise<boolean> {
    try {
      const res = await fetch(`${this.serverUrl}/api/health`, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      return res.status < 500;
    } catch {
      return false;
    }
  }

  /** The spawner stops: whoever waits for the server stops waiting. */
  release(): void {
    for (const wake of this.waiters.splice(0)) wake();
  }
}
