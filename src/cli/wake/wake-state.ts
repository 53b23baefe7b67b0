import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pidAlive } from './claude-sessions.js';

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

  /** The log of the relay of one Claude Code process (kept when the relay ends for any reason but its session's end). */
  relayLog(claudePidOrSession: string | number): string {
    return this.file(`relay-${claudePidOrSession}.log`);
  }

  /** What a session left here, once it has ended: its permission mode and its relay's log. */
  forgetEnded(sessionId: string, claudePidOrSession: string | number): void {
    this.remove(`mode-${WakeState.key(sessionId)}`);
    this.remove(`relay-${claudePidOrSession}.log`);
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

  unlockRelay(socket: string): void {
    const name = `relay-${WakeState.key(socket)}.pid`;
    if (Number(this.read(name)) === process.pid) this.remove(name);
  }

  /** Makes this process the session's newest rewake waiter (an older one then stands down). */
  claimWaiter(sessionId: string): void {
    this.write(`waiter-${WakeState.key(sessionId)}.pid`, String(process.pid));
  }

  isNewestWaiter(sessionId: string): boolean {
    return Number(this.read(`waiter-${WakeState.key(sessionId)}.pid`)) === process.pid;
  }

  releaseWaiter(sessionId: string): void {
    if (this.isNewestWaiter(sessionId)) this.remove(`waiter-${WakeState.key(sessionId)}.pid`);
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
