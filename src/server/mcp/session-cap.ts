import { settingName } from '../../config.js';
import { limitExceeded, type DomainError } from '../../domain/errors.js';

/**
 * The cap on open MCP sessions per agent (BEIDOU_MAX_SESSIONS_PER_AGENT). Every wake-up
 * goes to each of an agent's sessions, so one token must not open thousands. At the cap
 * the least recently used session with nothing open is closed; if every one has a stream
 * or request open, the new one is refused `limit_exceeded` (429).
 */

export interface CappedSession {
  id: string;
  /** Requests and streams open on it. */
  open: number;
}

export class SessionCap {
  /** Initializations under way, not yet listed as sessions: counted so concurrent ones cannot overshoot. */
  private readonly initializing = new Map<string, number>();

  constructor(private readonly max: number) {}

  /**
   * Room for one more session of `agentId`, whose open sessions are `sessions` in least
   * recently used order: closes one through `evict` if need be. Returns the release of the
   * reservation (call it once the new session is listed, or failed), or the refusal.
   */
  reserve<S extends CappedSession>(
    agentId: string,
    sessions: readonly S[],
    evict: (session: S) => void,
  ): (() => void) | DomainError {
    const pending = this.initializing.get(agentId) ?? 0;
    if (sessions.length + pending >= this.max) {
      const idle = sessions.find((s) => s.open === 0);
      if (!idle) {
        return limitExceeded(
          'sessions_per_agent',
          this.max,
          settingName('maxSessionsPerAgent'),
          `agent ${agentId} already has ${this.max} MCP sessions, each with a stream or request open; close one (DELETE /mcp) first`,
        );
      }
      evict(idle);
    }
    this.initializing.set(agentId, pending + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.initializing.get(agentId) ?? 1) - 1;
      if (n > 0) this.initializing.set(agentId, n);
      else this.initializing.delete(agentId);
    };
  }
}
