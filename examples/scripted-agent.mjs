#!/usr/bin/env node
// A scripted agent for the spawner's `command` adapter: a real process that speaks MCP over
// HTTP to Beidou, following a small JSON script. The demo and the tests use it in place of
// an LLM. Usage (by the spawner): BEIDOU_SCRIPT=/path/script.json node scripted-agent.mjs,
// with `--pass-env BEIDOU_SCRIPT` (and the script's folder shown with `--sandbox-bind DIR:ro`
// when the sandbox would hide it): agents get only the environment the spawner allows.
//
// The script maps a role (the agent's name without its 4-character suffix; "root" for the
// root) to a list of steps:
//   {"call": "tool", "args": {...}, "save": "name", "expect": "ok" | "<error code>", "again": ["<code>", ...]}
//   {"wait": "<regex>", "save": "name"}   wait for an inbox message (stdin) whose content matches
//   {"emit": {"event": "...", ...}}         print an event line for the spawner to post
//   {"say": "text"}                          print a plain log line
//   {"wait_file": "/path"}                   wait until that file exists (tests pace an agent with it)
//   {"exit": 0} | {"crash": "message"}       leave (cleanly, or with stderr and code 1)
//   {"ignore_terminate": true}               keep running when stdin closes
// Strings in args may use {{name.path}} to refer to saved results and messages.
// "<role>@resume" holds the steps for a resumed session (BEIDOU_RESUME=1).
// "<role>@on" holds standing rules, {"match": "<regex>", "call": ..., "args": ..., "again": [...]}:
// every inbox message matching one, whenever it comes, is handled by its call ({{message.qid}}
// and {{message.*}} in args); a step's wait never takes such a message.
// After the last step the agent idles until it is terminated (stdin closes).
//
// "@options": {"durable": true} makes every agent of the script survive restarts and outages,
// as a model with its session transcript and workspace would:
// - it keeps a journal in its working directory (`.scripted-agent.json`: the next step, saved
//   values, inbox messages received but not yet used), so a relaunched process, resumed or
//   afresh, on this spawner or another sharing the workdir, carries on where it stopped;
// - a call cut by a lost connection is retried on a new MCP session once the server answers;
//   a step run again (after a restart or such a retry) counts the codes in "again" as done,
//   with the error's details saved (e.g. spawn_agent's task_not_pending names the agent_id);
// - an ask_user whose call is gone waits for `[ANSWER qid]` in the inbox instead of asking again;
// - every received message is appended to `.scripted-agent.received.jsonl` and the pid is in
//   `.scripted-agent.pid` (what the chaos test and `npm run demo -- --chaos` check and kill);
// - each step ends with an `assistant_text` event (a clean turn).
// BEIDOU_SCRIPT_DELAY_MS (or "@options": {"delay_ms": N}) waits before each step (`--slow`).
import { appendFileSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const env = process.env;
const script = JSON.parse(readFileSync(env.BEIDOU_SCRIPT, 'utf8'));
const options = script['@options'] ?? {};
const durable = options.durable === true;
const delayMs = Number(env.BEIDOU_SCRIPT_DELAY_MS || options.delay_ms || 0);
const role = env.BEIDOU_AGENT_NAME.replace(/-[0-9a-f]{4}$/, '');
const steps = (!durable && env.BEIDOU_RESUME === '1' && script[`${role}@resume`]) || script[role] || [];
const JOURNAL = '.scripted-agent.json';
const journal =
  durable && existsSync(JOURNAL)
    ? JSON.parse(readFileSync(JOURNAL, 'utf8'))
    : { step: 0, saved: {}, inbox: [], pending: null };
const saved = journal.saved;
// The task is in a file of the launch folder (the variable only holds one that fits, up to 64 KiB).
const task = env.BEIDOU_TASK_FILE ? readFileSync(env.BEIDOU_TASK_FILE, 'utf8') : env.BEIDOU_TASK;
saved.env = { agent_id: env.BEIDOU_AGENT_ID, task_id: env.BEIDOU_TASK_ID, task };
const inbox = journal.inbox;
let ignoreTerminate = false;

const log = (text) => process.stdout.write(`[${env.BEIDOU_AGENT_NAME}] ${text}\n`);
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** Atomic, so a kill never leaves half a journal. */
function persist() {
  if (!durable) return;
  writeFileSync(`${JOURNAL}.tmp`, JSON.stringify(journal));
  renameSync(`${JOURNAL}.tmp`, JOURNAL);
}
if (durable) writeFileSync('.scripted-agent.pid', String(process.pid));

// Inbox messages arrive as JSON lines on stdin; stdin closes when the agent is terminated
// (or when its spawner dies).
const wakers = new Set();
const wakeAll = () => {
  for (const wake of [...wakers]) wake();
  wakers.clear();
};
createInterface({ input: process.stdin })
  .on('line', (line) => {
    const message = JSON.parse(line);
    if (durable) {
      appendFileSync(
        '.scripted-agent.received.jsonl',
        `${JSON.stringify({
          message_id: message.message_id,
          redelivered: message.redelivered === true,
          pid: process.pid,
        })}\n`,
      );
    }
    inbox.push(message);
    persist();
    applyRules();
    wakeAll();
  })
  .on('close', () => {
    if (!ignoreTerminate) process.exit(0);
  });

function lookup(path, scope) {
  return path.split('.').reduce((v, k) => (v == null ? v : v[k]), scope);
}
function fill(value, scope = saved) {
  if (typeof value === 'string') {
    const whole = /^\{\{([^}]+)\}\}$/.exec(value);
    if (whole) return lookup(whole[1], scope);
    return value.replace(/\{\{([^}]+)\}\}/g, (_, p) => String(lookup(p, scope)));
  }
  if (Array.isArray(value)) return value.map((v) => fill(v, scope));
  if (value && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v, scope)]));
  return value;
}
/** Takes the first inbox message matching `pattern` (null once `cancelled()`); the caller persists the journal. */
async function nextMessage(pattern, cancelled = () => false) {
  const re = new RegExp(pattern, 's');
  for (;;) {
    if (cancelled()) return null;
    const i = inbox.findIndex((m) => !handling.has(m.message_id) && re.test(m.content));
    if (i >= 0) return inbox.splice(i, 1)[0];
    await new Promise((r) => wakers.add(r));
  }
}

let client = null;
/** The calls in flight: aborted when the connection reports an error (the server went away). */
const inFlight = new Set();
async function connect() {
  for (;;) {
    const next = new Client({ name: 'beidou-scripted-agent', version: '1.0.0' });
    try {
      await next.connect(
        new StreamableHTTPClientTransport(new URL(env.BEIDOU_URL), {
          requestInit: { headers: { authorization: `Bearer ${env.BEIDOU_TOKEN}` } },
        }),
      );
      if (durable)
        next.onerror = (err) => {
          for (const c of inFlight) c.abort(err);
        };
      client = next;
      return;
    } catch (err) {
      if (!durable) throw err;
      await sleep(250); // the server is away: try again
    }
  }
}

/**
 * An ask_user answer that came through the inbox (its call was gone): `[ANSWER qid] text` for
 * one line, else the lines quoted below the tag with "> " (docs/security.md, envelopes).
 */
function inboxAnswer(qid, message) {
  const marker = `[ANSWER ${qid}]`;
  const after = message.content.slice(message.content.indexOf(marker) + marker.length);
  const quoted = after.startsWith('\n') ? after.slice(1).split('\n') : null;
  const answer_text = quoted ? quoted.map((line) => line.replace(/^> ?/, '')).join('\n') : after.replace(/^ /, '');
  return { qid, answers: null, answer_text };
}
const answerPattern = (qid) => `\\[ANSWER ${qid}\\][ \\n]`;
async function answerFromInbox(qid) {
  log(`waiting for the answer to ${qid} in the inbox`);
  return inboxAnswer(qid, await nextMessage(answerPattern(qid)));
}

/**
 * Standing rules ("<role>@on": [{"match": "<regex>", "call": ..., "args": ..., "again": [...]}]):
 * every inbox message matching a rule is taken by it, whenever it comes, and handled with a
 * call whose args may use {{message.*}} (and {{message.qid}} for an [INBOX QUESTION]). A rule's
 * call always counts its "again" codes as done: the message may have been handled before a restart.
 */
const rules = script[`${role}@on`] ?? [];
const handling = new Set();
function applyRules() {
  if (!client) return; // connected first; the journal's inbox is looked at then
  for (const message of inbox) {
    const rule = rules.find((r) => new RegExp(r.match, 's').test(message.content));
    if (!rule || handling.has(message.message_id)) continue;
    handling.add(message.message_id);
    const qid = /\[INBOX QUESTION (q_[0-9a-f]+)\]/.exec(message.content)?.[1];
    void runCall(rule, null, { ...saved, message: { ...message, qid } }).then(({ outcome, text }) => {
      log(`on ${rule.call} -> ${outcome}`);
      if (outcome !== 'ok') process.stderr.write(`${rule.call} gave ${text}\n`);
      inbox.splice(
        inbox.findIndex((m) => m.message_id === message.message_id),
        1,
      );
      persist();
      if (durable)
        emit({
          event: 'assistant_text',
          message_id: `${env.BEIDOU_AGENT_ID}:on-${message.message_id}`,
          text: `handled ${message.message_id}`,
          stop_reason: 'end_turn',
        });
    });
  }
}

/** One call step (index null: a rule's call): the outcome ('ok' or an error code) and the value to save. */
async function runCall(step, index, scope = saved) {
  const args = fill(step.args ?? {}, scope);
  const tracked = index !== null;
  // Set when this step ran before (a restart, or a call cut by a lost connection).
  let again = !tracked || (durable && journal.pending?.step === index);
  for (;;) {
    if (durable && tracked) {
      if (step.call === 'ask_user' && again && journal.pending?.qid)
        return { outcome: 'ok', value: await answerFromInbox(journal.pending.qid) };
      journal.pending = { step: index, qid: null };
      persist();
    }
    const controller = new AbortController();
    inFlight.add(controller);
    let settled = false;
    // An ask_user whose reply is lost may still be answered: the answer then comes to the inbox.
    let watchInbox = null;
    const answered = new Promise((resolve) => {
      watchInbox = (qid) =>
        void nextMessage(answerPattern(qid), () => settled).then((m) => m && resolve({ qid, message: m }));
    });
    let res;
    try {
      const call = client.callTool({ name: step.call, arguments: args }, undefined, {
        signal: controller.signal,
        timeout: 600_000,
        resetTimeoutOnProgress: true,
        // ask_user reports its qid once the question is on the server's disk.
        onprogress: (p) => {
          const qid = /\b(q_[0-9a-f]+)\b/.exec(p.message ?? '')?.[1];
          if (durable && tracked && qid && journal.pending && !journal.pending.qid) {
            journal.pending.qid = qid;
            persist();
            if (step.call === 'ask_user') watchInbox(qid);
          }
        },
      });
      const first = await Promise.race([call.then((r) => ({ res: r })), answered]);
      if (first.message) {
        controller.abort();
        call.catch(() => undefined);
        return { outcome: 'ok', value: inboxAnswer(first.qid, first.message) };
      }
      res = first.res;
    } catch (err) {
      if (!durable) throw err;
      log(`${step.call} lost its connection (${err.message}); retrying`);
      again = true;
      await client.close().catch(() => undefined);
      await connect();
      continue;
    } finally {
      settled = true;
      inFlight.delete(controller);
      wakeAll();
    }
    const text = res.content?.[0]?.text ?? '';
    if (!res.isError) return { outcome: 'ok', value: res.structuredContent };
    const error = JSON.parse(text);
    if (durable && step.call === 'ask_user' && error.error === 'gateway_unavailable')
      return { outcome: 'ok', value: await answerFromInbox(error.details.qid) };
    if (again && (step.again ?? []).includes(error.error)) {
      log(`${step.call} -> ${error.error}: done before`);
      return { outcome: 'ok', value: error.details };
    }
    return { outcome: error.error, value: error, text };
  }
}

await connect();
applyRules();
if (durable && journal.step > 0) log(`carrying on at step ${journal.step}`);
for (let index = journal.step; index < steps.length; index++) {
  const step = steps[index];
  if (delayMs > 0) await sleep(delayMs);
  if (step.call) {
    const { outcome, value, text } = await runCall(step, index);
    log(`${step.call} -> ${outcome}`);
    if ((step.expect ?? 'ok') !== outcome) {
      process.stderr.write(`${step.call} gave ${text ?? JSON.stringify(value)}, expected ${step.expect ?? 'ok'}\n`);
      process.exit(3);
    }
    if (step.save) saved[step.save] = value;
  } else if (step.wait) {
    const message = await nextMessage(step.wait);
    log(`got ${message.content.slice(0, 80)}`);
    if (step.save) {
      const qid = /\[INBOX QUESTION (q_[0-9a-f]+)\]/.exec(message.content)?.[1];
      saved[step.save] = { ...message, qid };
    }
  } else if (step.emit) emit(fill(step.emit));
  else if (step.say) log(fill(step.say));
  else if (step.wait_file) {
    while (!existsSync(fill(step.wait_file))) await new Promise((r) => setTimeout(r, 50));
  } else if (step.ignore_terminate) ignoreTerminate = true;
  else if ('exit' in step) {
    await client.close();
    process.exit(step.exit);
  } else if (step.crash) {
    process.stderr.write(`${step.crash}\n`);
    process.exit(1);
  }
  if (durable) {
    journal.step = index + 1;
    journal.pending = null;
    persist();
    emit({
      event: 'assistant_text',
      message_id: `${env.BEIDOU_AGENT_ID}:step-${index}`,
      text: `step ${index} done`,
      stop_reason: 'end_turn',
    });
  }
}
log('script done; idle until terminated');
emit({
  event: 'assistant_text',
  message_id: `${env.BEIDOU_AGENT_ID}:done`,
  text: 'script done',
  stop_reason: 'end_turn',
});
await new Promise(() => {});
