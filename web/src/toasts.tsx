import type { Toast } from './store.js';

/** Results and errors of actions, for a few seconds, without moving anything on the page. */
export function Toasts({ toasts }: { toasts: Toast[] }) {
  return (
    <div class="toasts" aria-live="polite">
      {toasts.map((t) => (
        <div key={t.id} class={`toast ${t.kind}`} data-testid="toast" role={t.kind === 'error' ? 'alert' : 'status'}>
          {t.text}
        </div>
      ))}
    </div>
  );
}
