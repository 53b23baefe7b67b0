import type { EventDraft } from '../events/catalogue.js';

/**
 * What a spawner reports for an agent past its write budget (BEIDOU_MAX_WRITE_BYTES_PER_MINUTE):
 * the report is never refused (supervision must land, and a refused batch would wedge the
 * spawner's spool), so the bulky observability fields, which are the agent's own words, are
 * cut instead. The events stay (stats, open tool uses and activity still follow them);
 * supervision events (agent_started, agent_crashed, agent_completed, agent_error, run.cost,
 * contract_violation …) pass unchanged.
 */

/** What replaces a cut text: says why, to a person reading the log. */
export const CUT_PAST_BUDGET = '[cut: the agent was past its write budget]';

export function cutPastBudget(drafts: readonly EventDraft[]): EventDraft[] {
  return drafts.map((d) => {
    switch (d.event) {
      case 'assistant_text':
        return { ...d, text: CUT_PAST_BUDGET };
      case 'tool_called':
        return { ...d, input: null };
      case 'tool_result':
        return { ...d, error_reason: d.error_reason === null ? null : CUT_PAST_BUDGET };
      default:
        return d;
    }
  });
}
