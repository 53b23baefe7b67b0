import { useEffect, useRef } from 'preact/hooks';
import { settleConfirmation, type Confirmation } from './store.js';

/** The one confirmation of the page (sending a message, terminating a task, declining a question). */
export function ConfirmDialog({ confirmation }: { confirmation: Confirmation }) {
  const dialog = useRef<HTMLDialogElement>(null);
  const ok = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    const d = dialog.current;
    if (d && !d.open) d.showModal();
    ok.current?.focus();
  }, [confirmation.id]);

  return (
    <dialog
      ref={dialog}
      class="modal confirm"
      data-testid="confirm-dialog"
      aria-labelledby="confirm-message"
      onCancel={(e) => {
        e.preventDefault();
        settleConfirmation(false);
      }}
    >
      <p id="confirm-message" data-testid="confirm-message">
        {confirmation.message}
      </p>
      <div class="actions">
        <button type="button" data-testid="confirm-cancel" onClick={() => settleConfirmation(false)}>
          Cancel
        </button>
        <button
          type="button"
          class="primary"
          ref={ok}
          data-testid="confirm-ok"
          onClick={() => settleConfirmation(true)}
        >
          {confirmation.ok}
        </button>
      </div>
    </dialog>
  );
}
