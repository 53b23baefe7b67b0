import type { AnyPrimitive } from './define.js';
import { answerQuestion } from './answer-question.js';
import { askUser } from './ask-user.js';
import { createTeam } from './create-team.js';
import { declarePlan } from './declare-plan.js';
import { escalateQuestion } from './escalate-question.js';
import { listPeers } from './list-peers.js';
import { listPendingReviews } from './list-pending-reviews.js';
import { listReady } from './list-ready.js';
import { readInbox } from './read-inbox.js';
import { removePlan } from './remove-plan.js';
import { requestTermination } from './request-termination.js';
import { sendMessage } from './send-message.js';
import { signalReview } from './signal-review.js';
import { spawnAgent } from './spawn-agent.js';
import { terminateChild } from './terminate-child.js';

/**
 * The catalogue: every implemented primitive, once, in the seed's order (plus the
 * extension read_inbox). MCP registration, the JSON Schemas in schemas/ and the docs' tool
 * table all come from this list, so only implemented tools are ever listed.
 */
export const PRIMITIVES = [
  sendMessage,
  listPeers,
  askUser,
  answerQuestion,
  escalateQuestion,
  createTeam,
  declarePlan,
  removePlan,
  spawnAgent,
  listReady,
  terminateChild,
  listPendingReviews,
  signalReview,
  requestTermination,
  readInbox,
] as unknown as readonly AnyPrimitive[];

export const PRIMITIVES_BY_NAME: ReadonlyMap<string, AnyPrimitive> = new Map(PRIMITIVES.map((p) => [p.name, p]));
