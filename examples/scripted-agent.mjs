#!/usr/bin/env node
// A scripted agent for the spawner's `command` adapter: a real process that speaks MCP over
// HTTP to Beidou, following a small JSON script. The demo and the tests use it in place of
// an LLM. Usage (by the spawner): BEIDOU_SCRIPT=/path/script.json node scripted-agent.mjs
//
// The script maps a role (the agent's name without its 4-character suffix; "root" for the
// root) to a list of steps:
//   {"call": "tool", "args": {...}, "save": "name", "expect": "ok" | "<error code>"}
//   {"wait": "<regex>", "save": "name"}   wait for an inbox message (stdin) whose content matches
//   {"emit": {"event": "...", ...}}         print an event line for the spawner to post
//   {"say": "text"}                          print a plain log line
//   {"wait_file": "/path"}                   wait until that file exists (tests pace an agent with it)
//   {"exit": 0} | {"crash": "message"}       leave (cleanly, or with stderr and code 1)
//   {"ignore_terminate": true}               keep running when stdin closes
// Strings in args may use {{name.path}} to refer to saved results and messages.
// "<role>@resume" holds the steps for a resumed session (BEIDOU_RESUME=1).
// After the last step the agent idles until it is terminated (stdin closes).
import { existsSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const env = process.env;
const script = JSON.parse(readFileSync(env.BEIDOU_SCRIPT, 'utf8'));
const role = env.BEIDOU_AGENT_NAME.replace(/-[0-9a-f]{4}$/, '');
const steps = (env.BEIDOU_RESUME === '1' && script[`${role}@resume`]) || script[role] || [];
const saved = { env: { agent_id: env.BEIDOU_AGENT_ID, task_id: env.BEIDOU_TASK_ID, task: env.BEIDOU_TASK } };
let ignoreTerminate = false;

const log = (text) => process.stdout.write(`[${env.BEIDOU_AGENT_NAME}] ${text}\n`);
const emit = (event) => process.stdout.write(JSON.stringify(event) + '\n');

// Inbox messages arrive as JSON lines on stdin; stdin closes when the agent is terminated.
const inbox = [];
let wake = null;
createInterface({ input: process.stdin })
  .on('line', (line) => {
    inbox.push(JSON.parse(line));
    wake?.();
  })
  .on('close', () => {
    if (!ignoreTerminate) process.exit(0);
  });

function lookup(path) {
  return path.split('.').reduce((v, k) => (v == null ? v : v[k]), saved);
}
function fill(value) {
  if (typeof value === 'string') {
    const whole = /^\{\{([^}]+)\}\}$/.exec(value);
    if (whole) return lookup(whole[1]);
    return value.replace(/\{\{([^}]+)\}\}/g, (_, p) => String(lookup(p)));
  }
  if (Array.isArray(value)) return value.map(fill);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v)]));
  return value;
}
async function nextMessage(pattern) {
  const re = new RegExp(pattern, 's');
  for (;;) {
    const i = inbox.findIndex((m) => re.test(m.content));
    if (i >= 0) return inbox.splice(i, 1)[0];
    await new Promise((r) => (wake = r));
  }
}

const client = new Client({ name: 'beidou-scripted-agent', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(env.BEIDOU_URL), { requestInit: { headers: { authorization: `Bearer ${env.BEIDOU_TOKEN}` } } }));

for (const step of steps) {
  if (step.call) {
    const res = await client.callTool({ name: step.call, arguments: fill(step.args ?? {}) }, undefined, { timeout: 600_000, resetTimeoutOnProgress: true });
    const text = res.content?.[0]?.text ?? '';
    const outcome = res.isError ? JSON.parse(text).error : 'ok';
    log(`${step.call} -> ${outcome}`);
    if ((step.expect ?? 'ok') !== outcome) {
      process.stderr.write(`${step.call} gave ${text}, expected ${step.expect ?? 'ok'}\n`);
      process.exit(3);
    }
    if (step.save) saved[step.save] = res.isError ? JSON.parse(text) : res.structuredContent;
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
  }
  else if (step.ignore_terminate) ignoreTerminate = true;
  else if ('exit' in step) {
    await client.close();
    process.exit(step.exit);
  } else if (step.crash) {
    process.stderr.write(`${step.crash}\n`);
    process.exit(1);
  }
}
log('script done; idle until terminated');
emit({ event: 'assistant_text', message_id: `${env.BEIDOU_AGENT_ID}:done`, text: 'script done', stop_reason: 'end_turn' });
await new Promise(() => {});
