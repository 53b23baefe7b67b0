import type { AnyPrimitive } from './define.js';
import { createTeam } from './create-team.js';
import { listPeers } from './list-peers.js';
import { readInbox } from './read-inbox.js';
import { sendMessage } from './send-message.js';

/**
 * The catalogue: every implemented primitive, once. MCP registration, the JSON Schemas in
 * schemas/ and the docs' tool table all come from this list, so only implemented tools are
 * ever listed.
 */
export const PRIMITIVES: readonly AnyPrimitive[] = [sendMessage, listPeers, createTeam, readInbox] as unknown as AnyPrimitive[];

export const PRIMITIVES_BY_NAME: ReadonlyMap<string, AnyPrimitive> = new Map(PRIMITIVES.map((p) => [p.name, p]));
