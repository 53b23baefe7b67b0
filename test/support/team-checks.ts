import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Ev, TeamRunResult } from '../../src/demo/chaos.js';

/**
 * What a team run must show, read from its events, its task files and what the scripted
 * agents recorded of their own input. Each check returns the faults it found (empty: none),
 * so a failure lists every broken promise at once, with the ids to look up in the log.
 */

/** What the plans came to: each plan's tasks and final states, the agents by role, reviews, answers. */
export function planOutcome(events: readonly Ev[]) {
  const roleOf = new Map<string, string>();
  for (const e of events) if (e.event === 'agent_spawned') roleOf.set(e.agent_id, e.role ?? 'root');
  const plans: Record<string, Record<string, string>> = {};
  const planOwner = new Map<string, string>();
  for (const e of events) {
    if (e.event === 'plan_declared') {
      const owner = roleOf.get(e.owner_agent_id) ?? e.owner_agent_id;
      planOwner.set(e.plan_id, owner);
      plans[owner] = Object.fromEntries(e.tasks.map((t: { id: string }) => [t.id, 'declared']));
    }
    if (e.event === 'task_spawned' || e.event === 'task_done' || e.event === 'task_failed') {
      const plan = plans[planOwner.get(e.plan_id) ?? ''];
      if (plan)
        plan[e.plan_task_id] = e.event === 'task_spawned' ? 'spawned' : e.event === 'task_done' ? 'done' : 'failed';
    }
  }
  const sorted = (o: Record<string, string>) =>
    Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
  const asked = new Map(events.filter((e) => e.event === 'question_asked').map((e) => [e.qid, e]));
  const agentAnswers = events.filter((e) => e.event === 'question_answered' && asked.get(e.qid)?.origin === 'ask_user');
  return {
    task: events
      .filter((e) => e.event === 'task_ended')
      .map((e) => `${e.status}:${e.reason}`)
      .join(', '),
    plans: Object.fromEntries(
      Object.entries(plans)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => [k, sorted(v)]),
    ),
    roles: events
      .filter((e) => e.event === 'agent_spawned')
      .map((e) => e.role ?? 'root')
      .sort(),
    approvals: events.filter((e) => e.event === 'completion.approved').length,
    reworks: events.filter((e) => e.event === 'review.acknowledged').length,
    // Who answered which kind of question (a question asked again after a restart is the same kind).
    answers: [
      ...new Set(
        agentAnswers.map(
          (e) => `${asked.get(e.qid)!.questions[0].header}:${e.by === 'user' ? 'user' : (roleOf.get(e.by) ?? e.by)}`,
        ),
      ),
    ].sort(),
  };
}

/** What each agent's processes received on stdin (`.scripted-agent.received.jsonl`), by message id. */
function receivedBy(
  workdir: string,
  taskId: string,
  agentId: string,
): Map<string, Array<{ redelivered: boolean; pid: number }>> {
  const file = path.join(workdir, taskId, agentId, '.scripted-agent.received.jsonl');
  const out = new Map<string, Array<{ redelivered: boolean; pid: number }>>();
  if (!existsSync(file)) return out;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line) continue;
    const r = JSON.parse(line) as { message_id: string; redelivered: boolean; pid: number };
    out.set(r.message_id, [...(out.get(r.message_id) ?? []), r]);
  }
  return out;
}

/**
 * Every message acknowledged to its sender (`send_message`) or routed by the server
 * (`inbox.posted`), and not withdrawn, was delivered once (`agent_input`), and the agent's
 * process got it: once, or again only marked `redelivered`.
 */
export function deliveryFaults(result: Pick<TeamRunResult, 'events' | 'workdir' | 'taskId'>): string[] {
  const { events, workdir, taskId } = result;
  const names = new Map<string, string>(
    events.filter((e) => e.event === 'agent_spawned').map((e) => [e.agent_id, e.name]),
  );
  const messages = new Map<string, { to: string; what: string; seq: number }>();
  for (const e of events) {
    if (e.event === 'send_message')
      messages.set(e.message_id, {
        to: e.to,
        what: `message from ${names.get(e.caller_id) ?? e.caller_id}`,
        seq: e.seq,
      });
    if (e.event === 'inbox.posted')
      messages.set(e.message_id, { to: e.to, what: `${e.kind} from ${names.get(e.from) ?? e.from}`, seq: e.seq });
    if (e.event === 'inbox.withdrawn') messages.delete(e.message_id);
  }
  const inputs = new Map<string, Ev[]>();
  for (const e of events)
    if (e.event === 'agent_input') inputs.set(e.message_id, [...(inputs.get(e.message_id) ?? []), e]);
  const received = new Map<string, ReturnType<typeof receivedBy>>();
  const faults: string[] = [];
  for (const [id, m] of messages) {
    const label = `${m.what} to ${names.get(m.to) ?? m.to} (${id}, seq ${m.seq})`;
    const delivered = inputs.get(id) ?? [];
    if (delivered.length === 0) {
      faults.push(`${label}: never delivered`);
      continue;
    }
    if (delivered.length > 1)
      faults.push(`${label}: agent_input ${delivered.length} times (seq ${delivered.map((e) => e.seq).join(', ')})`);
    if (delivered[0]!.via !== 'spawner') continue;
    if (!received.has(m.to)) received.set(m.to, receivedBy(workdir, taskId, m.to));
    const got = received.get(m.to)!.get(id) ?? [];
    if (got.length === 0)
      faults.push(
        `${label}: acknowledged by a spawner (seq ${delivered[0]!.seq}) but no process of the agent received it`,
      );
    const unmarked = got.slice(1).filter((r) => !r.redelivered);
    if (unmarked.length > 0)
      faults.push(
        `${label}: received ${got.length} times, ${unmarked.length} of them not marked redelivered (pids ${got.map((r) => r.pid).join(', ')})`,
      );
  }
  return faults;
}

/** Every question answered exactly once, none declined, none left at the gateway unanswered. */
export function questionFaults(result: Pick<TeamRunResult, 'events' | 'unexpectedQuestions'>): string[] {
  const faults: string[] = [];
  for (const q of result.events.filter((e) => e.event === 'question_asked')) {
    const answered = result.events.filter((e) => e.event === 'question_answered' && e.qid === q.qid);
    const declined = result.events.filter((e) => e.event === 'question_declined' && e.qid === q.qid);
    if (answered.length !== 1 || declined.length > 0) {
      faults.push(
        `question ${q.qid} (${q.origin}, asked by ${q.asker}: ${q.prompt}) answered ${answered.length} times, declined ${declined.length}`,
      );
    }
  }
  for (const q of result.unexpectedQuestions)
    faults.push(`question ${q.qid} (${q.origin}) reached the user: ${q.prompt}`);
  return faults;
}

/** `seq` runs 1, 2, 3, … with no gap and no repeat in every task file of the home. */
export function taskFileSeqFaults(home: string): string[] {
  const dir = path.join(home, 'events');
  const faults: string[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.jsonl'))) {
    const seqs = readFileSync(path.join(dir, file), 'utf8')
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => (JSON.parse(l) as { seq: number }).seq);
    const bad = seqs.findIndex((s, i) => s !== i + 1);
    if (bad >= 0) faults.push(`${file}: line ${bad + 1} has seq ${seqs[bad]}, expected ${bad + 1}`);
  }
  return faults;
}
