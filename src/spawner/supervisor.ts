import { randomUUID } from 'node:crypto';
import type { DeliverCommand, DrainedEvent, LaunchCommand, RunningAgent } from '../protocol/spawner.js';
import { exitFailure, failureLine, type Adapter, type AgentProcess } from './adapter.js';
import { AgentReports, type ReportTarget } from './agent-reports.js';

/** Consecutive strikes before the spawner stops resuming an agent (docs/spawner-protocol.md). */
const STRIKES = 3;

const CONTRACT_NUDGE =
  '[BEIDOU] Your session ended although nobody terminated you. You are a persistent agent: never exit on your own. ' +
  'If your work is done, call mcp__beidou__signal_review and end your turn to wait for your leader; otherwise carry on.';

/** What a supervisor needs of the spawner that holds it (the protocol client): its log and posts, and these. */
export interface SupervisorHost extends ReportTarget {
  readonly serverUrl: string;
  readonly adapter: Adapter;
  /** Seconds between a terminate command and the kill. */
  readonly grace: number;
  cwdFor(launch: LaunchCommand): string;
  /** The supervisor is done: the agent is no longer this spawner's (terminated: its launch is refused from now on). */
  forget(agentId: string, terminated?: boolean): void;
  /** How many times the server has become unreachable so far. */
  readonly outages: number;
  /** Whether a process started after `outagesAtStart` outages died of the server's absence. */
  exitDuringOutage(outagesAtStart: number): Promise<boolean>;
  whenReachable(): Promise<void>;
  /** The wait before the restart after the `strike`-th crash in a row. */
  restartDelayMs(strike: number): number;
}

/**
 * One agent's process and its policies: a clean exit is a contract violation (resumed with
 * a nudge), a crash is resumed then restarted afresh; the third strike of either escalates
 * (the server tells the leader or the user). A terminated agent gets the grace time, then
 * is killed.
 */
export class Supervisor {
  private proc: AgentProcess | null = null;
  private sessionId = '';
  private crashStrikes = 0;
  private contractStrikes = 0;
  private terminating = false;
  /** onExit is deciding what comes next (a restart, an escalation): a terminate waits for it. */
  private exiting = false;
  /** The termination was acknowledged (at most once). */
  private finished = false;
  private forced = false;
  private abandoned = false;
  private graceTimer: NodeJS.Timeout | null = null;
  /** The server's outage count when the current process started. */
  private outagesAtStart = 0;
  /** Ends a wait before a restart early (a terminate, or the agent is abandoned). */
  private interrupt: (() => void) | null = null;
  private readonly delivered = new Set<string>();
  /** Deliveries that arrived while the process was being restarted. */
  private waiting: DeliverCommand[] = [];
  /** What the server hears of this agent, in order. */
  private readonly reports: AgentReports;

  constructor(
    private readonly spawner: SupervisorHost,
    private launch: LaunchCommand,
  ) {
    // The server's counts (reduced from the events), so a move to this spawner forgives nothing.
    this.crashStrikes = launch.crash_strikes ?? 0;
    this.contractStrikes = launch.contract_strikes ?? 0;
    this.reports = new AgentReports(spawner, launch.agent_id);
  }

  private get id(): string {
    return this.launch.agent_id;
  }

  /** For the heartbeat's report: the process it runs now (pid null between two processes). */
  running(): RunningAgent {
    return { agent_id: this.id, pid: this.proc?.pid ?? null, session_id: this.sessionId || null };
  }

  /** A clean turn: strikes start again, and the server's count with them (once, not every turn). */
  private cleanTurn(): void {
    if (this.crashStrikes === 0 && this.contractStrikes === 0) return;
    this.crashStrikes = 0;
    this.contractStrikes = 0;
    void this.reports.events([{ event: 'strikes.reset' } as DrainedEvent]);
  }

  async start(resume: boolean, sessionId: string | null, nudge: string | null): Promise<void> {
    this.sessionId = resume && sessionId ? sessionId : randomUUID();
    this.outagesAtStart = this.spawner.outages;
    const serverUrl = this.spawner.serverUrl;
    const proc = this.spawner.adapter.start(
      {
        launch: this.launch,
        serverUrl,
        mcpUrl: `${serverUrl}/mcp`,
        cwd: this.spawner.cwdFor(this.launch),
        resume: resume && sessionId !== null,
        sessionId: this.sessionId,
        nudge,
      },
      {
        onEvent: (event) => void this.reports.events([event]),
        onSession: (id) => (this.sessionId = id),
        onCleanTurn: () => this.cleanTurn(),
      },
    );
    this.proc = proc;
    this.spawner.log.info({ agent: this.id, pid: proc.pid, resume }, 'agent started');
    await this.reports.started(() => this.sessionId, resume);
    for (const d of this.waiting.splice(0)) await this.deliver(d);
    void proc.exited
      .then((exit) => this.onExit(proc, exit))
      .catch((err: unknown) => {
        // Could not restart it (e.g. its files could not be written): give it up, loudly.
        this.spawner.log.error({ err: (err as Error).message, agent: this.id }, 'could not restart the agent');
        void this.reports
          .events([{ event: 'agent_completed', terminated: false, stop_reason: 'crash_escalated' } as DrainedEvent])
          .then(() => this.giveUp());
      });
  }

  async deliver(d: DeliverCommand): Promise<void> {
    if (this.delivered.has(d.message_id)) {
      await this.reports.delivered(d.message_id); // a resend: it reached the agent already
      return;
    }
    if (!this.proc || this.terminating) {
      this.waiting.push(d);
      return;
    }
    this.proc.deliver({
      message_id: d.message_id,
      from: d.from,
      from_name: d.from_name,
      kind: d.kind,
      content: d.content,
      ...(d.redelivered ? { redelivered: true as const } : {}),
    });
    this.delivered.add(d.message_id);
    await this.reports.delivered(d.message_id);
  }

  /** Ends the process gracefully; after the grace time it is killed (`terminate.forced`). */
  terminate(): void {
    if (this.terminating) return;
    this.terminating = true;
    // Between processes, onExit sees the flag before it restarts anything; once a restart
    // has spawned the next process, that process is ended like any other.
    if (this.exiting && !this.proc) return void this.interrupt?.();
    if (!this.proc) return void this.finishTermination();
    this.proc.end();
    const proc = this.proc;
    this.graceTimer = setTimeout(() => {
      this.forced = true;
      proc.kill();
    }, this.spawner.grace * 1000);
  }

  private async finishTermination(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    if (this.graceTimer) clearTimeout(this.graceTimer);
    if (this.forced) await this.reports.events([{ event: 'terminate.forced' } as DrainedEvent]);
    await this.reports.terminated();
    this.spawner.forget(this.id, true);
  }

  /** The server gave the agent to another spawner (or we are stopping): end it, report nothing. */
  abandon(): void {
    this.abandoned = true;
    this.proc?.kill();
    this.interrupt?.();
  }

  /** Waits for `until` (milliseconds, or a promise), or less if the agent is terminated or abandoned meanwhile. */
  private pause(until: number | Promise<void>): Promise<void> {
    return new Promise((resolve) => {
      const timer = typeof until === 'number' ? setTimeout(() => done(), until) : null;
      const done = () => {
        if (timer) clearTimeout(timer);
        this.interrupt = null;
        resolve();
      };
      if (typeof until !== 'number') void until.then(done);
      this.interrupt = done;
    });
  }

  private async onExit(
    proc: AgentProcess,
    exit: { code: number | null; signal: NodeJS.Signals | null },
  ): Promise<void> {
    if (proc !== this.proc || this.abandoned) return;
    this.proc = null;
    if (this.terminating) return this.finishTermination();
    this.exiting = true;
    try {
      await this.afterExit(proc, exit);
    } finally {
      this.exiting = false;
    }
  }

  /** A terminate that arrived while the exit was being reported wins over a restart. */
  private async restartUnlessTerminated(
    resume: boolean,
    sessionId: string | null,
    nudge: string | null,
  ): Promise<void> {
    if (this.abandoned) return;
    if (this.terminating) return this.finishTermination();
    return this.start(resume, sessionId, nudge);
  }

  private async giveUp(): Promise<void> {
    if (this.terminating) return this.finishTermination();
    this.spawner.forget(this.id);
  }

  private async afterExit(
    proc: AgentProcess,
    exit: { code: number | null; signal: NodeJS.Signals | null },
  ): Promise<void> {
    const log = this.spawner.log;
    if (await this.spawner.exitDuringOutage(this.outagesAtStart)) return this.afterOutageExit(proc, exit);
    if (exit.code === 0) {
      this.contractStrikes++;
      const strike = this.contractStrikes;
      if (strike < STRIKES) {
        log.warn({ agent: this.id, strike }, 'agent exited on its own; resuming it with a nudge');
        await this.reports.events([
          { event: 'agent_completed', terminated: false, stop_reason: 'end_turn' } as DrainedEvent,
          { event: 'contract_violation', strike_count: strike, action: 'resumed' } as DrainedEvent,
        ]);
        return this.restartUnlessTerminated(true, this.sessionId, CONTRACT_NUDGE);
      }
      log.error({ agent: this.id }, 'agent exited on its own three times; escalating');
      await this.reports.events([
        {
          event: 'contract_violation',
          strike_count: strike,
          action: this.launch.is_root ? 'escalated_to_user' : 'escalated_to_leader',
        } as DrainedEvent,
        { event: 'agent_completed', terminated: false, stop_reason: 'contract_violation_escalated' } as DrainedEvent,
      ]);
      return this.giveUp();
    }
    this.crashStrikes++;
    const strike = this.crashStrikes;
    const stderr = proc.stderrTail();
    const msg = exit.signal ? `killed by ${exit.signal}` : `exited with code ${exit.code}`;
    const failure = exitFailure(proc, exit);
    log.error(
      { agent: this.id, strike, reason: failure.reason },
      `${failureLine(this.launch, failure)} (strike ${strike} of ${STRIKES})`,
    );
    await this.reports.events([
      {
        event: 'agent_error',
        exception: 'ProcessExit',
        msg: failure.msg,
        stderr,
        reason: failure.reason,
      } as DrainedEvent,
      { event: 'agent_crashed', exception: 'ProcessExit', msg, strike_count: strike, stderr } as DrainedEvent,
    ]);
    if (strike < STRIKES) {
      await this.reports.events([
        { event: 'agent_completed', terminated: false, stop_reason: 'crashed' } as DrainedEvent,
      ]);
      // Never a restart loop: each crash in a row waits longer (--restart-backoff), with jitter.
      await this.pause(this.spawner.restartDelayMs(strike));
      // Strike 1 resumes the session; strike 2 starts it afresh.
      return this.restartUnlessTerminated(strike === 1, strike === 1 ? this.sessionId : null, null);
    }
    await this.reports.events([
      ...(this.launch.is_root
        ? [{ event: 'root_crash_escalation', crash_strikes: strike, stderr } as DrainedEvent]
        : []),
      { event: 'agent_completed', terminated: false, stop_reason: 'crash_escalated' } as DrainedEvent,
    ]);
    return this.giveUp();
  }

  /**
   * The process ended while the server was unreachable (its MCP calls failed, or a blocked
   * ask_user was cut by a restart): not the agent's fault, so no strike. It resumes its
   * session once the server answers again.
   */
  private async afterOutageExit(
    proc: AgentProcess,
    exit: { code: number | null; signal: NodeJS.Signals | null },
  ): Promise<void> {
    const msg = `${exit.signal ? `killed by ${exit.signal}` : `exited with code ${exit.code}`} while the server was unreachable`;
    this.spawner.log.warn(
      { agent: this.id, msg },
      'agent exited during a server outage; resuming it without a strike once the server is back',
    );
    await this.reports.events([
      { event: 'agent_error', exception: 'ServerUnreachable', msg, stderr: proc.stderrTail() } as DrainedEvent,
      { event: 'agent_completed', terminated: false, stop_reason: 'crashed' } as DrainedEvent,
    ]);
    await this.pause(this.spawner.whenReachable());
    return this.restartUnlessTerminated(true, this.sessionId, null);
  }
}
