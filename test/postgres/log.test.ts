import { readFileSync, statSync } from 'node:fs';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type { EventDraft, StoredEvent } from '../../src/events/catalogue.js';
import { EventLogFailedError } from '../../src/events/event-log.js';
import { DatabaseInUseError, LOG_APPLICATION } from '../../src/store/postgres/connect.js';
import { PgEventLog } from '../../src/store/postgres/log.js';
import { migrate } from '../../src/store/postgres/schema.js';
import { quoteIdent, withClient } from '../../src/testkit/postgres.js';
import { until } from '../../src/testkit/poll.js';
import { freshDatabase } from '../support/store.js';
import { FakeClock } from '../support/server.js';

/**
 * The PostgreSQL event log on its own, against the test run's real PostgreSQL: group
 * commit (counted by the server: one transaction per commit, by the rows' xmin, and one
 * statement, from the server's own statement log), the (task_id, seq) key refusing a second
 * writer, the writer lock and epoch, and an idle connection that drops.
 */

const clock = new FakeClock();
const logs: PgEventLog[] = [];
afterEach(async () => {
  await Promise.allSettled(logs.splice(0).map((l) => l.close()));
});

async function migrated(): Promise<{ url: string; name: string }> {
  const db = await freshDatabase();
  await withClient(db.url, (c) => migrate(c));
  return db;
}

async function openLog(url: string, seen: StoredEvent[] = []): Promise<PgEventLog> {
  const log = new PgEventLog(url, clock);
  logs.push(log);
  await log.open((e) => seen.push(e));
  return log;
}

const message = (taskId: string, n: number): EventDraft =>
  ({
    event: 'send_message',
    task_id: taskId,
    message_id: `msg_${n}`,
    from: 'ag_a',
    to: 'ag_b',
    content: `hello ${n}`,
    kind: 'peer',
  }) as unknown as EventDraft;

/** The log connection's backend, as the server sees it. */
async function logBackend(url: string, name: string): Promise<number> {
  return until('the log connection in pg_stat_activity', () =>
    withClient(url, async (c) => {
      const { rows } = await c.query<{ pid: number }>(
        'SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2',
        [name, LOG_APPLICATION],
      );
      return rows[0]?.pid;
    }),
  );
}

/** Statements the log connection sent to `database` since `from` (a byte offset of the server's log), whole. */
function logStatements(from: number, database: string): string[] {
  const { logFile } = inject('postgres');
  // An entry starts with its timestamped prefix line; a multi-line statement continues on lines without one.
  const entries: string[] = [];
  for (const line of readFileSync(logFile, 'utf8').slice(from).split('\n')) {
    if (/^\d{4}-\d\d-\d\d /.test(line)) entries.push(line);
    else if (entries.length > 0) entries[entries.length - 1] += `\n${line}`;
  }
  const prefix = `db=${database} app=${LOG_APPLICATION} LOG:  `;
  return entries
    .filter((e) => e.includes(prefix) && /LOG: {2}(statement|execute [^:]*):/.test(e))
    .map((e) => e.slice(e.indexOf(prefix) + prefix.length));
}

describe('PgEventLog', () => {
  it('commits every append of a tick in one statement and one transaction, and appends made while a commit is in flight in the next', async () => {
    const db = await migrated();
    await withClient(db.url, (c) => c.query(`ALTER DATABASE ${quoteIdent(db.name)} SET log_statement = 'all'`));
    const log = await openLog(db.url);
    const { logFile } = inject('postgres');

    // 50 appends in one tick, over five tasks.
    let mark = statSync(logFile).size;
    const first = Array.from({ length: 50 }, (_, i) => log.append([message(`tsk_${i % 5}`, i)]));
    await Promise.all(first.map((a) => a.durable));
    const inserts = logStatements(mark, db.name).filter((s) => s.includes('INSERT INTO events'));
    expect(inserts).toHaveLength(1);
    expect(logStatements(mark, db.name)).toHaveLength(1);
    const xmins = await withClient(
      db.url,
      async (c) => (await c.query('SELECT DISTINCT xmin::text AS x FROM events')).rows,
    );
    expect(xmins).toHaveLength(1);

    // A commit held up by a lock on the writer row; 30 appends meanwhile, each in a tick of its own.
    await withClient(db.url, async (hold) => {
      await hold.query('BEGIN');
      await hold.query('SELECT * FROM log_writer FOR UPDATE');
      mark = statSync(logFile).size;
      const held = log.append([message('tsk_0', 100)]);
      const pid = await logBackend(db.url, db.name);
      await until('the commit waiting on the lock', () =>
        withClient(db.url, async (c) =>
          (await c.query('SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1', [pid])).rows[0]
            ?.wait_event_type === 'Lock'
            ? true
            : undefined,
        ),
      );
      const later: Array<Promise<void>> = [];
      for (let i = 0; i < 30; i++) {
        later.push(log.append([message(`tsk_${i % 3}`, 200 + i)]).durable);
        await new Promise((resolve) => setImmediate(resolve));
      }
      await hold.query('ROLLBACK');
      await held.durable;
      await Promise.all(later);
    });
    expect(logStatements(mark, db.name)).toHaveLength(2);
    const counts = await withClient(db.url, async (c) =>
      (await c.query<{ n: number }>('SELECT count(*)::int AS n FROM events GROUP BY xmin ORDER BY n')).rows.map(
        (r) => r.n,
      ),
    );
    expect(counts).toEqual([1, 30, 50]);

    // Gapless per task, and read() serves what is committed.
    for (let t = 0; t < 5; t++)
      expect(log.read(`tsk_${t}`, 0, 1000).map((e) => e.seq)).toEqual(
        Array.from({ length: log.durableSeq(`tsk_${t}`) }, (_, i) => i + 1),
      );
  });

  it('replays every task in seq order, as appended', async () => {
    const db = await migrated();
    const log = await openLog(db.url);
    const appended: StoredEvent[] = [];
    for (let round = 0; round < 3; round++) {
      const batch = log.append([message('tsk_b', round), message('tsk_a', round), message('tsk_b', round + 10)]);
      appended.push(...batch.events);
      await batch.durable;
    }
    await log.close();
    const seen: StoredEvent[] = [];
    const again = await openLog(db.url, seen);
    const byTask = (events: StoredEvent[], task: string) => events.filter((e) => e.task_id === task);
    for (const task of ['tsk_a', 'tsk_b']) {
      expect(byTask(seen, task)).toEqual(byTask(appended, task));
      expect(again.read(task, 0, 100)).toEqual(byTask(appended, task));
    }
    expect(seen.map((e) => e.task_id)).toEqual([...Array(3).fill('tsk_a'), ...Array(6).fill('tsk_b')]);
  });

  it('a second writer that stored the same seq makes the key refuse the commit: nothing acknowledged, the log fails loudly', async () => {
    const db = await migrated();
    const log = await openLog(db.url);
    for (let i = 1; i <= 3; i++) await log.append([message('tsk_f', i)]).durable;
    // Another writer takes seq 4 behind this log's back.
    await withClient(db.url, (c) =>
      c.query(
        `INSERT INTO events (task_id, seq, ts, event, body) VALUES ('tsk_f', 4, 0, 'send_message', '{"seq":4,"ts":0,"event":"send_message","task_id":"tsk_f","content":"the other writer"}')`,
      ),
    );
    const refused = log.append([message('tsk_f', 4), message('tsk_other', 1)]);
    expect(refused.events.map((e) => e.seq)).toEqual([4, 1]);
    const error = await refused.durable.then(
      () => null,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(EventLogFailedError);
    expect((error as Error).message).toMatch(
      /another writer already stored an event this server numbered \(Key \(task_id, seq\)=\(tsk_f, 4\) already exists\.\): the \(task_id, seq\) key refused the commit/,
    );
    // Nothing more is acknowledged.
    expect(() => log.append([message('tsk_g', 1)])).toThrow(EventLogFailedError);
    await expect(log.flush()).rejects.toThrow(EventLogFailedError);
    // The statement is all or nothing: the other task's event did not land either.
    const stored = await withClient(
      db.url,
      async (c) =>
        (await c.query('SELECT task_id, seq, body->>$1 AS content FROM events ORDER BY task_id, seq', ['content']))
          .rows,
    );
    expect(stored).toEqual([
      { task_id: 'tsk_f', seq: 1, content: 'hello 1' },
      { task_id: 'tsk_f', seq: 2, content: 'hello 2' },
      { task_id: 'tsk_f', seq: 3, content: 'hello 3' },
      { task_id: 'tsk_f', seq: 4, content: 'the other writer' },
    ]);
  });

  it('refuses a second writer while the first holds the lease, naming the holder', async () => {
    const db = await migrated();
    await openLog(db.url);
    const second = new PgEventLog(db.url, clock);
    const refusal = await second
      .open(() => undefined)
      .then(
        () => null,
        (err: unknown) => err,
      );
    expect(refusal).toBeInstanceOf(DatabaseInUseError);
    expect((refusal as Error).message).toMatch(
      /^the database postgres:\/\/postgres@127\.0\.0\.1:\d+\/beidou_\w+ is in use by another beidou server \(held by [^,]+, lease until \S+; its connection: backend pid \d+ from 127\.0\.0\.1, since .+\); one server per database$/,
    );
  });

  it('a holder whose lease ran out with no takeover (a renewal late behind a long commit) keeps writing and renews: only the epoch fences', async () => {
    const db = await migrated();
    const log = await openLog(db.url);
    await log.append([message('tsk_late', 1)]).durable;
    // As if the renewals had waited behind a commit longer than the lease: it has run out.
    await withClient(db.url, (c) => c.query("UPDATE log_writer SET expires_at = now() - interval '1 second'"));
    await log.append([message('tsk_late', 2)]).durable;
    expect(log.durableSeq('tsk_late')).toBe(2);
    const stored = await withClient(
      db.url,
      async (c) =>
        (await c.query<{ n: number }>("SELECT count(*)::int AS n FROM events WHERE task_id = 'tsk_late'")).rows[0]!.n,
    );
    expect(stored).toBe(2);
  });

  it('an idle connection that drops is replaced at the next commit; if another server opened the database meanwhile, the epoch refuses it', async () => {
    const db = await migrated();
    const log = await openLog(db.url);
    await log.append([message('tsk_e', 1)]).durable;

    // Dropped while idle (a database restart, a network cut): nothing was in flight, so the next commit reconnects.
    let pid = await logBackend(db.url, db.name);
    await withClient(db.url, (c) => c.query('SELECT pg_terminate_backend($1)', [pid]));
    await until('the old backend gone', () =>
      withClient(db.url, async (c) =>
        (await c.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).rowCount === 0 ? true : undefined,
      ),
    );
    await log.append([message('tsk_e', 2)]).durable;
    expect(log.durableSeq('tsk_e')).toBe(2);

    // Dropped again, and this time another server opens the database before the next commit.
    pid = await logBackend(db.url, db.name);
    await withClient(db.url, (c) => c.query('SELECT pg_terminate_backend($1)', [pid]));
    await until('the old backend gone', () =>
      withClient(db.url, async (c) =>
        (await c.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).rowCount === 0 ? true : undefined,
      ),
    );
    const other = await openLog(db.url);
    await other.append([message('tsk_other', 1)]).durable;
    await other.close();

    const fenced = log.append([message('tsk_e', 3)]);
    await expect(fenced.durable).rejects.toThrow(
      /another beidou server opened the database after this one \(writer epoch \d+ is no longer current\)/,
    );
    const seqs = await withClient(db.url, async (c) =>
      (await c.query("SELECT seq FROM events WHERE task_id = 'tsk_e' ORDER BY seq")).rows.map((r) => r.seq),
    );
    expect(seqs).toEqual([1, 2]);
  });
});
