// The console's pages, in navigation order. A page ships when the data it shows exists in the protos;
// there are no placeholder pages. To come, each as a Page registered here:
// - Workflows: runs and their DAG, once workflows land (issue 46).
// The Task page's hand-off tree (teams, issue 44) is a section of pages/task.ts (TASK_SECTIONS).

import type { Page } from "./page";
import { approvalsPage, settlementsPage } from "./pages/approvals";
import { spendPage } from "./pages/spend";
import { taskPage } from "./pages/task";
import { tasksPage } from "./pages/tasks";
import { toolsPage } from "./pages/tools";

export const PAGES: Page[] = [tasksPage, taskPage, approvalsPage, settlementsPage, toolsPage, spendPage];
