import { useState } from 'preact/hooks';
import { ApiError, request } from './api.js';
import { Logo } from './logo.js';
import { getState, signIn } from './store.js';

/** The admin token, checked against the API before it is kept (Enter in the field signs in). */
export function SignIn() {
  const [token, setToken] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(getState().signInError);

  const submit = async (e: Event) => {
    e.preventDefault();
    const candidate = token.trim();
    if (!candidate) return setError('Paste the admin token first.');
    setBusy(true);
    setError(null);
    try {
      await request('GET', '/tasks', undefined, candidate);
      signIn(candidate);
    } catch (err) {
      const refused = err instanceof ApiError && err.status === 401;
      setError(refused ? `That token was refused (${err.code}).` : (err as Error).message);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="signin">
      <form class="signin-card" data-testid="signin-form" onSubmit={submit}>
        <div class="signin-brand">
          <Logo size={36} />
          <h1>Beidou</h1>
        </div>
        <p class="muted">The operator's view of your agent teams. Sign in with the server's admin token.</p>
        <label for="signin-token">Admin token</label>
        <input
          id="signin-token"
          data-testid="signin-token"
          type="password"
          autocomplete="current-password"
          autofocus
          value={token}
          onInput={(e) => setToken(e.currentTarget.value)}
        />
        <p class="hint">
          <code>beidou token</code> prints it; it is also in <code>~/.beidou/admin.token</code> (or{' '}
          <code>$BEIDOU_HOME/admin.token</code>).
        </p>
        {error && (
          <p class="error" role="alert" data-testid="signin-error">
            {error}
          </p>
        )}
        <button type="submit" class="primary" data-testid="signin-submit" disabled={busy}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
      </form>
    </div>
  );
}
