import type { EventDraft } from '../events/catalogue.js';
import { UnstorableEventError } from '../events/event-log.js';

/**
 * How an event is written, the same in both stores (a line of a JSONL task file, the JSON
 * of a PostgreSQL row): one JSON object, envelope first,
 * `{"seq":N,"ts":T,"event":…,"task_id":…,…fields}`. The lines of a commit of several events
 * for one JSONL file also carry, after `ts`, `"commit":C,"of":K` (embedded/log-file.ts says
 * what they mean); a row never does.
 */

/** A batch of drafts serialised for `eventLine`: each one's envelope, fields as JSON, and fields. */
export interface SerialisedDrafts {
  heads: string[];
  bodies: string[];
  fields: Array<Record<string, unknown>>;
}

/**
 * Everything that can refuse an append, before anything is numbered (a batch is all or
 * nothing): `refuse` throws for a task the log will not write (quarantined, archived), and a
 * draft that cannot be serialised is `UnstorableEventError`. Each draft's fields are
 * serialised once, without the envelope, which `eventLine` splices in front.
 */
export function serialiseDrafts(drafts: readonly EventDraft[], refuse: (taskId: string) => void): SerialisedDrafts {
  const heads: string[] = new Array(drafts.length);
  const bodies: string[] = new Array(drafts.length);
  const fields: Array<Record<string, unknown>> = new Array(drafts.length);
  for (let i = 0; i < drafts.length; i++) {
    const { event: name, task_id, ...rest } = drafts[i]!;
    refuse(task_id);
    try {
      bodies[i] = JSON.stringify(rest);
      heads[i] = `"event":${JSON.stringify(name)},"task_id":${JSON.stringify(task_id)}`;
    } catch (err) {
      throw new UnstorableEventError(i, err);
    }
    fields[i] = rest;
  }
  return { heads, bodies, fields };
}

/** Splices the envelope (and commit markers) in front of an event's fields serialised once. */
export function eventLine(seq: number, ts: number, head: string, body: string, commit: number, of: number): string {
  const markers = of > 1 ? `,"commit":${commit},"of":${of}` : '';
  return `{"seq":${seq},"ts":${ts}${markers},${head}${body.length > 2 ? `,${body.slice(1)}` : '}'}\n`;
}

/** What `eventLine` adds around a draft's head and body: `{"seq":N,"ts":T,` … `}` and the newline (at most). */
const ENVELOPE_BYTES = 48;

/** The bytes a batch's lines take (UTF-8, commit markers aside): what an agent's write budget counts. */
export function serialisedBytes({ heads, bodies }: SerialisedDrafts): number {
  let bytes = 0;
  for (let i = 0; i < heads.length; i++)
    bytes += Buffer.byteLength(heads[i]!) + Buffer.byteLength(bodies[i]!) + ENVELOPE_BYTES;
  return bytes;
}
