/**
 * The admin API's JSON, typed by the server's own view functions (type-only imports: no
 * server code reaches the page), so a field renamed in src/server/api/views.ts breaks the page
 * at compile time instead of showing `undefined`.
 */
import type { StoredEvent } from '../../src/events/catalogue.js';
import type {
  agentView,
  pendingQuestionsView,
  planView,
  quarantinedDetail,
  taskDetail,
  taskListView,
  teamView,
} from '../../src/server/api/views.js';

export type { StoredEvent };
export type TaskItem = ReturnType<typeof taskListView>[number];
export type TaskDetail = ReturnType<typeof taskDetail> | ReturnType<typeof quarantinedDetail>;
export type Agent = ReturnType<typeof agentView>;
export type Team = ReturnType<typeof teamView>;
export type Plan = ReturnType<typeof planView>;
export type PlanTask = Plan['tasks'][number];
export type PendingQuestion = ReturnType<typeof pendingQuestionsView>[number];
export type QuestionItem = PendingQuestion['questions'][number];
export type Skill = { name: string; description: string };
export type CreatedTask = { task_id: string; root_agent_id: string; token: string; mcp_url: string };
