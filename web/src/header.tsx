import { Logo } from './logo.js';
import { signOut } from './store.js';

/** The bar on top: the name, the server's version, whether the live streams are connected, sign out. */
export function Header({ version, signedIn, live }: { version: string | null; signedIn: boolean; live: boolean }) {
  return (
    <header class="app-header" data-testid="app-header">
      <a class="brand" href="#/" title="Overview">
        <Logo />
        <span class="wordmark">Beidou</span>
      </a>
      <span class="version" data-testid="server-version">
        {version ? `v${version}` : ''}
      </span>
      <span class="spacer" />
      {signedIn && (
        <>
          <span
            class={`conn ${live ? 'live' : 'down'}`}
            data-testid="connection-state"
            title={live ? 'the live streams are connected' : 'waiting for the server'}
          >
            {live ? 'live' : 'reconnecting'}
          </span>
          <button type="button" class="ghost" data-testid="signout" onClick={() => signOut()}>
            Sign out
          </button>
        </>
      )}
    </header>
  );
}
