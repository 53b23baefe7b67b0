import type { Server } from 'node:http';
import { isFollowingLog, type FollowingLog } from '../../events/event-log.js';
import { DatabaseInUseError, NoticeListener, type LeaseLost } from '../../store/index.js';
import { activate, type Activation, type ActivationOptions } from './activate.js';
import { openRegistry, type OpenedRegistry } from './open-registry.js';
import type { Following, StandbyStatus } from './standby.js';

/** What a replica's role is made from: the server's settings, its keys, and its name in the lease row (null without a database URL). */
export type ReplicaOptions = Omit<ActivationOptions, 'warm' | 'onLost'>;

/**
 * The role of one replica (docs/architecture.md, "Replicas"): active, with an activation that
 * serves (activate.ts), or a standby that keeps a warm follower of the log, polls the lease
 * every third of its length, hears the active's notices, and takes over when the lease is
 * free. Without a database URL it activates once at start and stays active.
 */
export class Replica {
  /** The activation serving now (null: a standby). */
  private active: Activation | null = null;
  private lastHolder: string | null = null;
  private standbySince: number;
  private closingDown = false;
  private activating: Promise<boolean> | null = null;
  private first = true;
  /** The lease was lost while the activation was still being built: it never serves. */
  private lostEarly: LeaseLost | null = null;
  // A standby keeps a registry that follows the active's commits (warm), so that taking
  // over reads only the last moments' events instead of the whole live log.
  private warm: OpenedRegistry | null = null;
  private following: Promise<void> | null = null;
  // The active archived tasks (NOTIFY beidou_archive): the follower unloads them too.
  // One pass at a time; a notice during one runs another after it (none is dropped).
  private absorbing: Promise<void> | null = null;
  private absorbAgain = false;
  private poll: NodeJS.Timeout | null = null;
  private readonly notices: NoticeListener | null;
  private readonly replicated: boolean;

  /** `standbySince`: when the server began, as a standby until its first activation. */
  constructor(
    private readonly o: ReplicaOptions,
    standbySince: number,
  ) {
    this.standbySince = standbySince;
    this.replicated = o.config.databaseUrl !== undefined;
    this.notices = o.config.databaseUrl
      ? new NoticeListener(o.config.databaseUrl, {
          onLease: () => void (this.active || this.attempt()),
          onArchive: () => void (this.active || this.absorbArchived()),
        })
      : null;
  }

  /** The activation serving now, or null on a standby. */
  current(): Activation | null {
    return this.active;
  }

  /** Who holds the lease, as far as this replica knows. */
  holderSeen(): string | null {
    return this.lastHolder;
  }

  /** A standby's health answer. */
  standbyStatus(): StandbyStatus {
    return {
      holder: this.lastHolder,
      retryAfterS: this.o.config.leaseS,
      since: this.standbySince,
      following: this.followingNow(),
    };
  }

  /**
   * The first attempt to activate (a failure ends the start), then, with a database URL, the
   * poll, the LISTEN and the follower; resolves once it serves or follows the log.
   */
  async start(): Promise<void> {
    await this.attempt();
    if (!this.replicated) return;
    // A standby tries again every third of the lease, and at once when the active one
    // releases it on a clean stop (NOTIFY beidou_lease).
    this.poll = setInterval(
      () => {
        if (this.active || this.closingDown) return;
        void this.listen();
        this.startFollowing();
        // Each attempt of a follower first reads what is new (a missed NOTIFY costs one poll).
        void this.attempt();
      },
      (this.o.config.leaseS * 1000) / 3,
    );
    this.poll.unref();
    void this.listen();
    // A standby is ready once it follows the log (a failure to is logged; the poll retries).
    if (!this.active) {
      this.startFollowing();
      await this.following;
    }
  }

  /** A standby's following of the log (null: active, embedded, or not following). */
  followingNow(): Following | null {
    const f = this.active ? null : this.followingLog()?.following();
    const r = this.warm?.registry;
    return f && r ? { ...f, replayed: r.replayedEvents, tasks: r.state.tasks.size, archived: r.archived.size } : null;
  }

  /**
   * Stops trying and following, then takes the activation out of service with the HTTP server
   * it serves on; `afterRelease` runs once its store is released (or failed to be): not if an
   * earlier step failed, when the log may still be open.
   */
  async stop(httpServer: Server, afterRelease: () => void): Promise<void> {
    this.closingDown = true;
    if (this.poll) clearInterval(this.poll);
    await this.notices?.close();
    await this.activating?.catch(() => undefined);
    await this.following;
    await this.dropFollower();
    // Stop accepting, end the long-lived streams, let in-flight requests finish, then
    // flush the log and the rollups.
    const closed = new Promise<void>((resolve) => httpServer.close(() => resolve()));
    const last = this.active;
    if (last) await last.quiesce(true);
    this.active = null;
    httpServer.closeAllConnections();
    await closed;
    try {
      await last?.release(false);
    } finally {
      afterRelease();
    }
  }

  private async listen(): Promise<void> {
    if (this.closingDown) return;
    await this.notices?.open();
  }

  private followingLog(): FollowingLog | null {
    return this.warm && isFollowingLog(this.warm.registry.log) ? this.warm.registry.log : null;
  }

  private async dropFollower(): Promise<void> {
    const w = this.warm;
    this.warm = null;
    await w?.close();
  }

  private startFollowing(): void {
    if (!this.replicated || this.warm || this.following || this.active || this.closingDown) return;
    const { config, paths, clock, logger, holder } = this.o;
    this.following = (async () => {
      try {
        const opened = await openRegistry(config, paths, clock, logger, holder, 'follower');
        if (this.active || this.closingDown) return void (await opened.close());
        this.warm = opened;
        logger.info(
          {
            events: opened.registry.replayedEvents,
            tasks: opened.registry.state.tasks.size,
            archived: opened.registry.archived.size,
          },
          `standby: following the log (${opened.registry.replayedEvents} events replayed, ${opened.registry.state.tasks.size} live tasks)`,
        );
      } catch (err) {
        logger.warn(
          { err },
          `standby: could not follow the log (${(err as Error).message}); trying again, and a takeover meanwhile replays from the log`,
        );
      }
    })().finally(() => {
      this.following = null;
    });
  }

  private absorbArchived(): Promise<void> {
    if (this.absorbing) {
      this.absorbAgain = true;
      return this.absorbing;
    }
    const { logger } = this.o;
    this.absorbing = (async () => {
      do {
        this.absorbAgain = false;
        const w = this.warm;
        if (!w) return;
        try {
          // Caught up first, so the marks of what was archived match what it holds.
          await this.followingLog()?.pull();
          // Only the ended tasks it still holds: a read that grows with live work, not history.
          const ended = [...w.registry.state.tasks.values()].filter((t) => t.ended_at !== null).map((t) => t.task_id);
          const entries = await w.index.loadFor(ended);
          if (this.warm !== w) return; // it took over meanwhile: its archiver does this now
          const gone = w.registry.absorbArchived(entries);
          if (gone > 0) logger.debug({ tasks: gone }, 'standby: unloaded tasks the active archived');
        } catch (err) {
          // Tried again at the next notice; a takeover's archiver archives them anyway.
          logger.debug({ err }, 'standby: could not read the archive index');
        }
      } while (this.absorbAgain);
    })().finally(() => {
      this.absorbing = null;
    });
    return this.absorbing;
  }

  private async stepDown(from: Activation, lost: LeaseLost): Promise<void> {
    if (this.active !== from) return;
    const { logger, clock } = this.o;
    this.active = null;
    this.standbySince = clock.now();
    this.lastHolder = lost.holder;
    logger.warn(
      { epoch: lost.epoch, new_epoch: lost.newEpoch, holder: lost.holder, reason: lost.reason },
      `lost the lease to ${lost.holder ?? 'another replica'} (epoch ${lost.epoch} → ${lost.newEpoch ?? 'none yet'}): stepping down to standby`,
    );
    try {
      await from.quiesce(false);
    } finally {
      await from
        .release(true)
        .catch((err: unknown) => logger.debug({ err }, 'closing what the stepped-down replica held'));
    }
    if (!this.closingDown) {
      this.startFollowing();
      void this.attempt();
    }
  }

  /** One attempt to become active (at most one at a time); true once it serves. */
  private attempt(): Promise<boolean> {
    return (this.activating ??= this.tryActivate().finally(() => {
      this.activating = null;
      this.first = false;
    }));
  }

  private async tryActivate(): Promise<boolean> {
    const { logger, holder } = this.o;
    if (this.active || this.closingDown) return this.active !== null;
    await this.following;
    // A follower that stopped following cannot take over warm: a fresh replay does.
    const stopped = this.followingLog()?.following()?.diverged;
    if (stopped) {
      logger.warn(
        { reason: stopped },
        `this standby stopped following the log (${stopped}): a takeover replays from the log`,
      );
      await this.dropFollower();
    }
    const from = this.warm;
    let built: Activation | null = null;
    try {
      built = await activate({
        ...this.o,
        warm: from,
        onLost: (lost) => {
          // Called by the log once; the activation may still be starting (then it never serves).
          if (built) void this.stepDown(built, lost);
          else this.lostEarly = lost;
        },
      });
      if (from) this.warm = null; // it serves now
    } catch (err) {
      if (err instanceof DatabaseInUseError) {
        this.lastHolder = err.holderName;
        return false;
      }
      if (from) {
        const still = isFollowingLog(from.registry.log) ? from.registry.log.following() : null;
        if (still && !still.diverged) {
          // Refused before the lease was taken (the database away for a moment): it still
          // follows, and the next attempt reads on from where it is.
          logger.warn({ err }, `could not take over: ${(err as Error).message}; trying again`);
          return false;
        }
        // It took the lease but could not catch up, or stopped following: the next
        // attempt replays afresh.
        this.warm = null;
        await from.close();
        logger.warn(
          { err },
          `could not take over on the followed log: ${(err as Error).message}; trying again with a fresh replay`,
        );
        return false;
      }
      // At start a database that cannot be used ends the start (exit 2); later it is retried.
      if (!this.replicated || this.first) throw err;
      logger.error({ err }, `could not take over as the active replica: ${(err as Error).message}; trying again`);
      return false;
    }
    if (this.lostEarly || this.closingDown) {
      this.lostEarly = null;
      await built.quiesce(false);
      await built.release(!this.closingDown);
      return false;
    }
    this.active = built;
    this.lastHolder = holder;
    // A follower the poll opened while this took over cold (`from` was null) would follow
    // the active's own commits for ever: a second copy of the state, and a read per commit.
    if (this.warm) void this.dropFollower();
    if (this.replicated) this.logTakeover(built);
    return true;
  }

  private logTakeover(built: Activation): void {
    const { logger, holder } = this.o;
    const prev = built.previous;
    const w = built.startup.warm;
    const how = w
      ? `; warm (read ${w.caught_up_events} events at the takeover, ${w.followed_events} followed as a standby)`
      : `; replayed ${built.startup.replayed_events} events`;
    const line =
      prev?.holder && prev.holder !== holder && prev.epoch > 0
        ? `took over the lease from ${prev.holder} (epoch ${prev.epoch} → ${built.epoch}; ${prev.expired ? 'its lease had expired' : 'its connection was gone'}): active${how}`
        : `holding the lease (epoch ${built.epoch}): active${how}`;
    (prev?.holder && prev.holder !== holder ? logger.warn : logger.info).call(
      logger,
      { epoch: built.epoch, previous: prev?.holder ?? null },
      line,
    );
  }
}
