import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pidAlive } from '../../util/process.js';

/**
 * What the relays and rewake hooks of one Beidou home leave for each other and for
 * `beidou attach --check`, under `<home>/wake/`: a lock per session socket (one relay
 * each), the newest rewake waiter per session, the permission mode the hooks last saw, and
 * which path each live session uses.
 */
export type WakePath = 'socket' | 'rewake';

export interface SessionWake {
  path: WakePath;
  /** The relay's or the waiter's pid. */
  pid: number;
  agent_id: string | null;
  session_id: string | null;
  socket: string | null;
  since: number;
}

export class WakeState {
  readonly dir: string;

  constructor(home: string) {
    this.dir = path.join(home, 'wake');
  }

  private file(name: string): string {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    return path.join(this.dir, name);
  }

  private write(name: string, text: string): void {
    const file = this.file(name);
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, text, { mode: 0o600 });
    renameSync(tmp, file);
  }

  private read(name: string): string | null {
    try {
      return readFileSync(path.join(this.dir, name), 'utf8');
    } catch {
      return null;
    }
  }

  private remove(name: string): void {
    rmSync(path.join(this.dir, name), { force: true });
  }

  private static key(text: string): string {
    return createHash('sha256').update(text).digest('hex').slice(0, 16);
  }

  /** A relay log's name: a pid, or a session id from the environment kept to one name in this folder. */
  private static logName(claudePidOrSession: string | number): string {
    return `relay-${String(claudePidOrSession).replace(/[^\w.-]/g, '_')}.log`;
  }

  /** The log of the relay of one Claude Code process (kept when the relay ends for any reason but its session's end). */
  relayLog(claudePidOrSession: string | number): string {
    return this.file(WakeState.logName(claudePidOrSession));
  }

  /** What a session left here, once it has ended: its permission mode and its relay's log. */
  forgetEnded(sessionId: string, claudePidOrSession: string | number): void {
    this.remove(`mode-${WakeState.key(sessionId)}`);
    this.remove(WakeState.logName(claudePidOrSession));
  }

  /** The pid of the live relay for this socket, or null. */
  relayOf(socket: string): number | null {
    const pid = Number(this.read(`relay-${WakeState.key(socket)}.pid`));
    return Number.isInteger(pid) && pid > 0 && pidAlive(pid) ? pid : null;
  }

  /** Takes the socket's relay lock for this process; false when another live relay holds it. */
  lockRelay(socket: string): boolean {
    const name = `relay-${WakeState.key(socket)}.pid`;
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        writeFileSync(this.file(name), String(process.pid), { flag: 'wx', mode: 0o600 });
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        const holder = this.relayOf(socket);
        if (holder !== null && holder !== process.pid) return false;
        this.remove(name); // a dead relay's lock
      }
    }
    return false;
  }

  /**
   * Whether this process still holds the socket's relay lock, re-taken if it went missing or
   * its holder died. Two relays that started together can both believe they hold it (one
   * read the other's lock while it was being written, or took a dead relay's lock that the
   * other had just replaced): the one whose lock another live relay now holds stands down.
   */
  holdsRelay(socket: string): boolean {
    return Number(this.read(`relay-${WakeState.key(socket)}.pid`)) === process.pid || this.lockRelay(socket);
  }

  unlockRelay(socket: string): void {
    const name = `relay-${WakeState.key(socket)}.pid`;
    if (Number(this.read(name)) === process.pid) this.remove(name);
  }

  /** Makes this process the newest rewake waiter of a Claude Code process (`pid:…`, else `sid:…`); an older one then stands down. */
  claimWaiter(claudeKey: string): void {
    this.write(`waiter-${WakeState.key(claudeKey)}.pid`, String(process.pid));
  }

  isNewestWaiter(claudeKey: string): boolean {
    return Number(this.read(`waiter-${WakeState.key(claudeKey)}.pid`)) === process.pid;
  }

  releaseWaiter(claudeKey: string): void {
    if (this.isNewestWaiter(claudeKey)) this.remove(`waiter-${WakeState.key(claudeKey)}.pid`);
  }

  /** The permission mode a hook last saw for the session (hook input `permission_mode`). */
  recordMode(sessionId: string, mode: string): void {
    if (this.read(`mode-${WakeState.key(sessionId)}`) !== mode) this.write(`mode-${WakeState.key(sessionId)}`, mode);
  }

  modeOf(sessionId: string): string | null {
    return this.read(`mode-${WakeState.key(sessionId)}`);
  }

  /** Which path the session of this Claude Code process uses, for `beidou attach --check`. */
  recordSession(claudeKey: string, wake: SessionWake): void {
    this.write(`session-${WakeState.key(claudeKey)}.json`, JSON.stringify(wake));
  }

  sessionWake(claudeKey: string): SessionWake | null {
    const text = this.read(`session-${WakeState.key(claudeKey)}.json`);
    if (!text) return null;
    try {
      const wake = JSON.parse(text) as SessionWake;
      return pidAlive(wake.pid) ? wake : null;
    } catch {
      return null;
    }
  }

  forgetSession(claudeKey: string): void {
    const wake = this.sessionWake(claudeKey);
    if (!wake || wake.pid === process.pid) this.remove(`session-${WakeState.key(claudeKey)}.json`);
  }
}
