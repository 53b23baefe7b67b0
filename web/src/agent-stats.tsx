import { human, money } from './format.js';
import type { Agent } from './types.js';

/** What each agent has used and done: tokens, cost, tool and model calls, messages, inbox. */
export function AgentStats({ agents }: { agents: Agent[] }) {
  const total = agents.reduce(
    (t, a) => ({
      input: t.input + a.stats.input_tokens,
      output: t.output + a.stats.output_tokens,
      cost: t.cost + a.stats.cost_usd,
      tools: t.tools + a.stats.tool_calls,
      llm: t.llm + a.stats.llm_calls,
      sent: t.sent + a.messages_sent,
      delivered: t.delivered + a.messages_delivered,
      inbox: t.inbox + a.inbox_depth,
    }),
    { input: 0, output: 0, cost: 0, tools: 0, llm: 0, sent: 0, delivered: 0, inbox: 0 },
  );
  return (
    <div class="table-scroll">
      <table class="stats-table" data-testid="agent-stats">
        <thead>
          <tr>
            <th>Agent</th>
            <th>Status</th>
            <th class="num">Tokens in</th>
            <th class="num">Tokens out</th>
            <th class="num">Cost</th>
            <th class="num" title="tool calls">
              Tools
            </th>
            <th class="num" title="model calls">
              LLM
            </th>
            <th class="num" title="messages this agent sent">
              Sent
            </th>
            <th class="num" title="messages delivered to this agent">
              Received
            </th>
            <th class="num" title="messages waiting in its inbox">
              Inbox
            </th>
          </tr>
        </thead>
        <tbody>
          {agents.map((a) => (
            <tr key={a.agent_id} data-testid="agent-stats-row" data-agent-id={a.agent_id}>
              <td>
                <span class="strong">{a.name}</span>
              </td>
              <td>
                <span class={`pill s-${a.status}`}>{human(a.status)}</span>
              </td>
              <td class="num" data-col="input_tokens">
                {a.stats.input_tokens}
              </td>
              <td class="num" data-col="output_tokens">
                {a.stats.output_tokens}
              </td>
              <td class="num" data-col="cost_usd">
                {money(a.stats.cost_usd)}
              </td>
              <td class="num" data-col="tool_calls">
                {a.stats.tool_calls}
              </td>
              <td class="num" data-col="llm_calls">
                {a.stats.llm_calls}
              </td>
              <td class="num" data-col="messages_sent">
                {a.messages_sent}
              </td>
              <td class="num" data-col="messages_delivered">
                {a.messages_delivered}
              </td>
              <td class="num" data-col="inbox_depth">
                {a.inbox_depth}
              </td>
            </tr>
          ))}
        </tbody>
        {agents.length > 1 && (
          <tfoot>
            <tr>
              <td colSpan={2}>All agents</td>
              <td class="num">{total.input}</td>
              <td class="num">{total.output}</td>
              <td class="num">{money(total.cost)}</td>
              <td class="num">{total.tools}</td>
              <td class="num">{total.llm}</td>
              <td class="num">{total.sent}</td>
              <td class="num">{total.delivered}</td>
              <td class="num">{total.inbox}</td>
            </tr>
          </tfoot>
        )}
      </table>
    </div>
  );
}
