import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { within } from '../testkit/poll.js';
import { withClient } from '../testkit/postgres.js';
import { FailoverCluster, WAIT_MS } from './failover-cluster.js';
import type { FailoverCommand, FailoverJob, FailoverReport } from './follow.js';

/**
 * Section 9: failover time. A real PostgreSQL (the testkit's), two real `beidou serve`
 * replicas on it (one active, one standby), a real HAProxy in front with the deployment's
 * health check (docs/deploy.md), and agents sending `send_message` through it with the real
 * MCP SDK client in a child process (src/bench/follow.ts). Each run takes the active one
 * down, SIGKILL (it is gone) or SIGSTOP (paused: its connection and its lease row stay until
 * the lease runs out), and times from that moment (a) to the standby's log line saying it
 * is active, by the time in that line, and (b) to the first `send_message` sent after it and
 * acknowledged through the balancer (by the new active, on a new session with the same
 * token). After a SIGKILL the killed replica is started again as the new standby; after a
 * SIGSTOP it is continued and must step down. After each run every acknowledged message id
 * must be stored exactly once and the task's `seq` be gapless, or the section fails: the
 * figure is of a correct failover. The stage (database, replicas, balancer, team) is set up
 * and torn down by failover-cluster.ts; this is the measurement on it.
 */

const CLIENTS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'clients.js');

export type TakeDown = 'SIGKILL' | 'SIGSTOP';

export interface FailoverRun {
  how: TakeDown;
  run: number;
  /** The replica taken down, and the one that took over. */
  down: string;
  up: string;
  /** (a) the take-down → the standby's "… : active" log line, in seconds. */
  activeS: number;
  /** (b) the take-down → the first send_message sent after it and acknowledged. */
  firstAckS: number;
  /** What the new active read at takeover, and in how long: a warm standby reads what it had not followed ("registry caught up from the log"), a cold one replays ("registry rebuilt from the event logs"). */
  warm: boolean;
  readEvents: number | null;
  followedEvents: number | null;
  replayMs: number | null;
  /** The reason in its takeover line: "its connection was gone" or "its lease had expired". */
  reason: string;
  /** SIGSTOP: SIGCONT → the old active's "stepping down to standby" line, in seconds. */
  stepDownS: number | null;
  /** Acknowledged in this run (each found stored once), calls that failed, sessions opened. */
  acked: number;
  failed: number;
  failures: Record<string, number>;
  reconnects: number;
  /** The task's events after the run (seq 1..n, gapless). */
  events: number;
}

export interface FailoverOptions {
  agents: number;
  runs: number;
  /** HAProxy's health-check interval (docs/deploy.md's example: 1 s). */
  checkMs: number;
  /** Acknowledged calls before the take-down, and after it before the run ends. */
  warmup: number;
  after: number;
  onRun(run: FailoverRun): void;
}

export async function failoverTime(opts: FailoverOptions): Promise<FailoverRun[]> {
  // Nothing below may let the event loop run empty while a wait is pending (a bench that
  // exits 0 mid-section would print nothing at all); the waits themselves hold timers too.
  const keepAlive = setInterval(() => undefined, 60_000);
  const cluster = new FailoverCluster();
  const { replicas } = cluster;
  let clients: ClientsProcess | null = null;
  try {
    await cluster.start(opts.checkMs);
    const { db, lb } = cluster;
    let active = 0;
    await cluster.routed(active);
    const { taskId, tokens, targets } = await cluster.team(opts.agents);

    const runs: FailoverRun[] = [];
    const ackedBefore = new Set<string>();
    const plan: TakeDown[] = [
      ...Array<TakeDown>(opts.runs).fill('SIGKILL'),
      ...Array<TakeDown>(opts.runs).fill('SIGSTOP'),
    ];
    for (const [i, how] of plan.entries()) {
      const down = replicas[active]!;
      const standby = replicas[1 - active]!;
      await cluster.routed(active);
      clients = await ClientsProcess.start({ kind: 'failover', url: lb, tokens, targets, warmup: opts.warmup });
      await clients.next('the clients warm', (m) => ('warm' in m ? m : undefined));

      const standbyFrom = standby.log.length;
      const downFrom = down.log.length;
      const at = Date.now();
      process.kill(down.pid, how);
      clients.send({ watch: { after: at, more: opts.after } });
      const took = await standby.logLine(
        'its takeover line',
        /^took over the lease from .*: active(;.*)?$/,
        standbyFrom,
        WAIT_MS,
      );
      const rebuilt = standby.log
        .slice(standbyFrom)
        .find(
          (l) =>
            l.msg === 'registry rebuilt from the event logs' ||
            (typeof l.msg === 'string' && l.msg.startsWith('registry caught up from the log')),
        );
      const warm = typeof rebuilt?.followed === 'number';
      const watched = await clients.next(`${opts.after} sends acknowledged after the take-down`, (m) =>
        'watched' in m ? m.watched : undefined,
      );

      let stepDownS: number | null = null;
      if (how === 'SIGKILL') {
        await within(down.child.exited, WAIT_MS, `${down.name} to exit`);
        await down.stop();
        await cluster.restart(active);
      } else {
        const continued = Date.now();
        process.kill(down.pid, 'SIGCONT');
        const stepped = await down.logLine(
          'its step-down line',
          /^lost the lease to .*: stepping down to standby$/,
          downFrom,
          WAIT_MS,
        );
        stepDownS = (stepped.time - continued) / 1000;
        const health = await fetch(`${down.url}/api/health`);
        const body = (await health.json()) as { role?: string };
        if (health.status !== 503 || body.role !== 'standby')
          throw new Error(
            `${down.name} after SIGCONT answers health ${health.status} ${JSON.stringify(body)}, not 503 standby`,
          );
      }

      clients.send({ stop: true });
      const { done } = await clients.next('the clients to stop', (m) => ('done' in m ? m : undefined));
      await clients.exited();
      clients = null;

      const events = await checkStored(db, taskId, done.acked, ackedBefore);
      for (const id of done.acked) ackedBefore.add(id);
      const run: FailoverRun = {
        how,
        run: plan.slice(0, i + 1).filter((h) => h === how).length,
        down: down.name,
        up: standby.name,
        activeS: (took.time - at) / 1000,
        firstAckS: (watched.first.ackedAt - at) / 1000,
        warm,
        readEvents: typeof rebuilt?.events === 'number' ? rebuilt.events : null,
        followedEvents: warm ? (rebuilt!.followed as number) : null,
        replayMs: typeof rebuilt?.ms === 'number' ? rebuilt.ms : null,
        reason: /; (its [^)]*)\): active/.exec(took.msg)?.[1] ?? '',
        stepDownS,
        acked: done.acked.length,
        failed: done.failed,
        failures: done.failures,
        reconnects: done.reconnects,
        events,
      };
      runs.push(run);
      opts.onRun(run);
      active = 1 - active;
    }
    return runs;
  } finally {
    clearInterval(keepAlive);
    clients?.kill();
    await cluster.stop();
  }
}

/**
 * The stored log of the task against what was acknowledged: `seq` gapless from 1, no
 * message id stored twice, each id acknowledged in this run stored (and not acknowledged in
 * an earlier run too). Returns the number of events; throws naming what is wrong.
 */
async function checkStored(db: string, taskId: string, acked: string[], ackedBefore: Set<string>): Promise<number> {
  const rows = await withClient(
    db,
    async (c) =>
      (
        await c.query<{ seq: number; event: string; message_id: string | null }>(
          "SELECT seq, event, body->>'message_id' AS message_id FROM events WHERE task_id = $1 ORDER BY seq",
          [taskId],
        )
      ).rows,
  );
  const gap = rows.findIndex((r, i) => Number(r.seq) !== i + 1);
  if (gap >= 0) throw new Error(`the task's seq is not gapless: position ${gap + 1} holds seq ${rows[gap]!.seq}`);
  const stored = new Map<string, number>();
  for (const r of rows)
    if (r.event === 'send_message' && r.message_id) stored.set(r.message_id, (stored.get(r.message_id) ?? 0) + 1);
  const doubled = [...stored].filter(([, n]) => n > 1).map(([id]) => id);
  if (doubled.length)
    throw new Error(`${doubled.length} message ids stored more than once, e.g. ${doubled.slice(0, 3).join(', ')}`);
  const missing = acked.filter((id) => !stored.has(id));
  if (missing.length)
    throw new Error(
      `${missing.length} of ${acked.length} acknowledged messages are not stored, e.g. ${missing.slice(0, 3).join(', ')}`,
    );
  const again = acked.filter((id) => ackedBefore.has(id));
  if (again.length)
    throw new Error(
      `${again.length} message ids acknowledged in an earlier run too, e.g. ${again.slice(0, 3).join(', ')}`,
    );
  if (new Set(acked).size !== acked.length) throw new Error('a message id was acknowledged twice in one run');
  return rows.length;
}

/** The clients child (clients.ts, job `failover`): its reports awaited in turn; its death, or an error, fails the wait. */
class ClientsProcess {
  private readonly queue: FailoverReport[] = [];
  private failure: Error | null = null;
  private wake: (() => void) | null = null;
  private readonly done: Promise<void>;

  private constructor(private readonly child: ChildProcess) {
    child.on('message', (m: FailoverReport) => {
      this.queue.push(m);
      this.wake?.();
    });
    child.on('error', (err) => this.fail(new Error(`the bench clients: ${err.message}`)));
    this.done = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        // After its last report nothing waits; before it, whatever waits must hear of it.
        this.fail(new Error(`the bench clients exited with ${code ?? signal}`));
        resolve();
      }),
    );
  }

  static async start(job: FailoverJob): Promise<ClientsProcess> {
    const child = fork(CLIENTS, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const clients = new ClientsProcess(child);
    child.send(job);
    return clients;
  }

  private fail(err: Error): void {
    this.failure ??= err;
    this.wake?.();
  }

  send(command: FailoverCommand): void {
    this.child.send(command);
  }

  /** The first report (in order of arrival, each taken once) that `pick` maps to a value. */
  next<T>(what: string, pick: (m: FailoverReport) => T | undefined): Promise<T> {
    return within(
      new Promise<T>((resolve, reject) => {
        const look = () => {
          for (let i = 0; i < this.queue.length; i++) {
            const value = pick(this.queue[i]!);
            if (value !== undefined) {
              this.queue.splice(i, 1);
              this.wake = null;
              return resolve(value);
            }
          }
          if (this.failure) {
            this.wake = null;
            return reject(new Error(`${this.failure.message} while the bench waited for ${what}`));
          }
          this.wake = look;
        };
        look();
      }),
      WAIT_MS,
      `waiting for ${what}`,
    );
  }

  exited(): Promise<void> {
    return within(this.done, WAIT_MS, 'the bench clients to exit');
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}
