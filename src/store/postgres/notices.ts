import type pg from 'pg';
import { connectClient } from './connect.js';

/**
 * What a standby hears from the active replica without polling: `NOTIFY beidou_lease` (the
 * lease was released on a clean stop: try to take it now) and `NOTIFY beidou_archive` (tasks
 * were archived: unload them from the follower too). A missed notice costs one poll.
 */
export interface ReplicaNotices {
  onLease(): void;
  onArchive(): void;
}

/** One `LISTEN` connection, opened on demand and again after it ends (the caller retries `open` at its poll). */
export class NoticeListener {
  private client: pg.Client | null = null;

  constructor(
    private readonly url: string,
    private readonly notices: ReplicaNotices,
  ) {}

  /** Connects and listens, unless it already does; a failure leaves it closed for the next call. */
  async open(): Promise<void> {
    if (this.client) return;
    try {
      const client = await connectClient(this.url, 'beidou-standby');
      this.client = client;
      client.on('end', () => void (this.client === client && (this.client = null)));
      client.on('notification', (n) =>
        n.channel === 'beidou_archive' ? this.notices.onArchive() : this.notices.onLease(),
      );
      await client.query('LISTEN beidou_lease');
      await client.query('LISTEN beidou_archive');
    } catch {
      this.client = null; // retried at the next poll
    }
  }

  async close(): Promise<void> {
    await this.client?.end().catch(() => undefined);
  }
}
