import { randomBytes, randomUUID } from 'node:crypto';

/**
 * Readable ids: a kind prefix makes logs legible (`tsk_…`, `ag_…`, `tm_…`, `pl_…`, `q_…`,
 * `msg_…`). An id source is injected everywhere ids are made so tests can make them
 * deterministic.
 */
export type IdKind = 'tsk' | 'ag' | 'tm' | 'pl' | 'q' | 'msg' | 'sp';

export interface IdSource {
  next(kind: IdKind): string;
}

export const randomIds: IdSource = {
  next(kind) {
    if (kind === 'msg') return `msg_${randomUUID()}`;
    return `${kind}_${randomBytes(6).toString('hex')}`;
  },
};
