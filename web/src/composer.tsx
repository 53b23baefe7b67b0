import { useState } from 'preact/hooks';
import { request } from './api.js';
import { confirmAction, toast } from './store.js';
import type { Agent } from './types.js';

/** A message to any live agent of the task, as the user: the button or Enter (Shift+Enter: a new line), after a confirmation. */
export function Composer({ agents, rootId }: { agents: Agent[]; rootId: string | null }) {
  const live = agents.filter((a) => a.status !== 'terminated' && a.status !== 'terminating');
  const [to, setTo] = useState<string>('');
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  // The chosen recipient while it is live; else the root, else the first live agent.
  const recipient = live.find((a) => a.agent_id === to) ?? live.find((a) => a.agent_id === rootId) ?? live[0];

  const send = async () => {
    const content = text.trim();
    if (!recipient || !content || busy) return;
    const shown = content.length > 120 ? `${content.slice(0, 119)}…` : content;
    if (!(await confirmAction(`Send to ${recipient.name} as the user: "${shown}"`, 'Send'))) return;
    setBusy(true);
    try {
      await request('POST', `/agents/${encodeURIComponent(recipient.agent_id)}/send`, { content: text });
      setText('');
      toast(`Message sent to ${recipient.name}`);
    } catch (err) {
      toast(`Not sent to ${recipient.name}: ${(err as Error).message}`, 'error');
    } finally {
      setBusy(false);
    }
  };

  if (live.length === 0)
    return (
      <p class="muted" data-testid="composer">
        No live agent to message.
      </p>
    );
  return (
    <form
      class="composer"
      data-testid="composer"
      onSubmit={(e) => {
        e.preventDefault();
        void send();
      }}
    >
      <div class="composer-to">
        <label for="composer-to">To</label>
        <select
          id="composer-to"
          data-testid="composer-to"
          value={recipient?.agent_id ?? ''}
          onChange={(e) => setTo(e.currentTarget.value)}
        >
          {live.map((a) => (
            <option key={a.agent_id} value={a.agent_id}>
              {a.name}
              {a.role ? ` (${a.role})` : a.agent_id === rootId ? ' (root)' : ''}
            </option>
          ))}
        </select>
      </div>
      <label for="composer-text" class="sr-only">
        Message
      </label>
      <textarea
        id="composer-text"
        data-testid="composer-text"
        rows={2}
        placeholder="Message as the user… (Enter sends, Shift+Enter for a new line)"
        value={text}
        onInput={(e) => setText(e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            void send();
          }
        }}
      />
      <button type="submit" class="primary" data-testid="composer-send" disabled={busy || !text.trim()}>
        Send
      </button>
    </form>
  );
}
