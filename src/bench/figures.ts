import type { Figures } from './clients.js';
import type { FailoverRun } from './failover.js';

/** How `npm run bench` reduces and prints its figures: percentiles, fixed digits, a throughput line, a failover run's line. */

export const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
export const median = (xs: number[]) => pct(xs, 50);
export const fmt = (n: number, digits = 1) => n.toFixed(digits);

export function report(name: string, f: Figures): { rps: number; p50: number; p99: number } {
  const rps = f.calls / f.seconds;
  if (f.cpu)
    console.log(
      `    (cpu: server ${fmt(f.cpu.server, 2)} s, clients ${fmt(f.cpu.clients, 2)} s over ${fmt(f.seconds, 2)} s)`,
    );
  const p50 = pct(f.latenciesMs, 50);
  const p99 = pct(f.latenciesMs, 99);
  console.log(
    `  ${name.padEnd(26)} ${fmt(rps, 0).padStart(7)} req/s   p50 ${fmt(p50, 2).padStart(6)} ms   p99 ${fmt(p99, 2).padStart(6)} ms   errors ${f.errors}`,
  );
  return { rps, p50, p99 };
}

export function failoverLine(r: FailoverRun): string {
  const n = (x: number | null) => (x === null ? '?' : x.toLocaleString('en'));
  const replayed = r.warm
    ? `warm: read ${n(r.readEvents)} events at the takeover (${n(r.followedEvents)} followed) in ${r.replayMs} ms`
    : `cold: replayed ${n(r.readEvents)} events in ${r.replayMs} ms`;
  const failures = Object.entries(r.failures)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
  const paused = r.stepDownS === null ? '' : `; after SIGCONT ${r.down} stepped down in ${fmt(r.stepDownS, 2)} s`;
  return (
    `  ${r.how} run ${r.run} (${r.down} was active): active after ${fmt(r.activeS, 2).padStart(5)} s (${r.up}, ${replayed}, ${r.reason}), first ack after ${fmt(r.firstAckS, 2).padStart(5)} s${paused}; ` +
    `${r.acked} acknowledged, each stored once, seq gapless (${r.events} events); ${r.failed} calls failed${failures ? ` (${failures})` : ''}, ${r.reconnects} sessions opened`
  );
}
