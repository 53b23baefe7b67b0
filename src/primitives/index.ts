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
 * The catalogue: every tool, once, in the order `tools/list` gives them. MCP registration
 * and the JSON Schemas in schemas/ are generated from this list; the table in
 * docs/tools.md is checked against it (test/docs/tools.test.ts).
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
