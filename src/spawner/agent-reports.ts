import type { Logger } from 'pino';
import type { AckBody, DrainedEvent, StartedBody } from '../protocol/spawner.js';

/** Where an agent's reports go: the spawner's posts (through its spool) and its log. */
export interface ReportTarget {
  readonly log: Logger;
  /** POSTs to the spawner API (`/ack`, `/agents/:id/started`, `/agents/:id/events`). */
  post(route: string, body: AckBody | StartedBody | { events: DrainedEvent[] }): Promise<void>;
}

/**
 * What a supervisor (supervisor.ts) tells the server about its agent. Events go in the
 * order they happened; the start and the termination wait for the events before them. A
 * failed post is logged, never thrown: the agent's life goes on either way.
 */
export class AgentReports {
  /** Event posts for this agent, in order. */
  private posts: Promise<void> = Promise.resolve();

  constructor(
    private readonly target: ReportTarget,
    private readonly agentId: string,
  ) {}

  events(events: DrainedEvent[]): Promise<void> {
    this.posts = this.posts
      .then(() => this.target.post(`/agents/${this.agentId}/events`, { events }))
      .catch((err: unknown) =>
        this.target.log.error({ err: (err as Error).message, agent: this.agentId }, 'could not post events'),
      );
    return this.posts;
  }

  /**
   * The process started (`resumed`: in its earlier session), after the events so far; its
   * session id is read once they have gone (the process may have told a new one meanwhile).
   */
  async started(sessionId: () => string, resumed: boolean): Promise<void> {
    await this.posts;
    await this.target
      .post(`/agents/${this.agentId}/started`, { session_id: sessionId(), resumed })
      .catch((err: unknown) =>
        this.target.log.error({ err: (err as Error).message, agent: this.agentId }, 'could not report the start'),
      );
  }

  /** The message reached the agent. */
  async delivered(messageId: string): Promise<void> {
    await this.target
      .post('/ack', { type: 'deliver', agent_id: this.agentId, message_id: messageId })
      .catch((err: unknown) =>
        this.target.log.warn({ err: (err as Error).message, agent: this.agentId }, 'delivery ack failed'),
      );
  }

  /** The agent is terminated, after the events so far. */
  async terminated(): Promise<void> {
    await this.posts;
    await this.target
      .post('/ack', { type: 'terminate', agent_id: this.agentId })
      .catch((err: unknown) =>
        this.target.log.error({ err: (err as Error).message, agent: this.agentId }, 'terminate ack failed'),
      );
  }
}
