// Approvals and Settlements: the tasks waiting for a human (ListApprovals), oldest first. Approvals are
// writes that wait before they run: the call's exact arguments and impact, then approve or reject with a
// reason. Settlements are calls whose outcome is unknown (OUTCOME_UNKNOWN): the operator checks the
// upstream and says whether the call ran (recorded, not re-sent) or not (sent once more, same key).
// Both resolve through the dispatcher's ResolveApproval, which decides who may (operators; with
// separation of duties never the task's creator nor its agent) and says why when it refuses.
//
// New waiting tasks are appended below (the list is oldest first), so nothing above moves; a task
// resolved elsewhere keeps its place, marked, until the next visit.

import { TaskApprovalKind, type TaskApproval } from "../../gen/agentmesh/v1/dispatcher_pb";
import { isAbort } from "../api";
import { copyableId, h, link, replace, userText } from "../dom";
import { every, type Page, type PageContext } from "../page";
import { decisionForm, loadFailed, plan, when } from "../widgets";

const POLL_MS = 3000;

function card(ctx: PageContext, waiting: TaskApproval): HTMLElement {
  const pending = waiting.pendingApproval!;
  const mine = ctx.subject !== "" && ctx.subject === waiting.createdBy;
  const headingId = `approval-${pending.approvalId}`;
  return h(
    "article",
    { class: "approval-card", "aria-labelledby": headingId, "data-approval-id": pending.approvalId, "data-task-id": waiting.taskId },
    h(
      "h2",
      { id: headingId, class: "card-title" },
      h("code", null, userText(pending.plan?.name ?? "")),
      " for ",
      link(`#/tasks/${encodeURIComponent(waiting.taskId)}`, h("span", { class: "sr-only" }, "task "), userText(waiting.taskId, "mono")),
    ),
    h(
      "dl",
      { class: "facts" },
      h("dt", null, "Task"),
      h("dd", null, copyableId(waiting.taskId, "task id")),
      h("dt", null, "Agent"),
      h("dd", null, userText(waiting.agentId)),
      h("dt", null, "Goal"),
      h("dd", null, userText(waiting.goal.length > 500 ? `${waiting.goal.slice(0, 500)}…` : waiting.goal)),
      h("dt", null, "Started by"),
      h("dd", null, userText(waiting.createdBy || "—"), mine ? h("span", { class: "badge warn" }, "you") : null),
      h("dt", null, "Waiting since"),
      h("dd", null, when(waiting.waitTime)),
    ),
    mine
      ? h(
          "p",
          { class: "hint" },
          "You started this task. With separation of duties (the default) another operator must decide; the dispatcher will refuse you.",
        )
      : null,
    plan(pending),
    decisionForm(ctx.api, waiting.taskId, pending, () => undefined),
    h("p", { class: "card-state muted small", "aria-live": "polite" }),
  );
}

function makePage(kind: TaskApprovalKind, id: string, title: string, empty: string, intro: string): Page {
  async function render(ctx: PageContext): Promise<void> {
    const { api, main, signal } = ctx;
    const list = h("div", { class: "cards" });
    const problemSlot = h("div");
    const count = h("p", { class: "muted", role: "status" });
    replace(main, h("h1", { tabindex: -1 }, title), h("p", { class: "intro" }, intro), count, problemSlot, list);
    const shown = new Map<string, HTMLElement>();

    const refresh = async () => {
      try {
        const seen = new Set<string>();
        let token = "";
        do {
          const answer = await api.dispatcher.listApprovals({ kind, pageSize: 100, pageToken: token }, { signal });
          for (const waiting of answer.approvals) {
            const approvalId = waiting.pendingApproval?.approvalId ?? "";
            if (!approvalId) continue;
            seen.add(approvalId);
            if (!shown.has(approvalId)) {
              const element = card(ctx, waiting);
              shown.set(approvalId, element);
              list.append(element);
            }
          }
          token = answer.nextPageToken;
        } while (token && !signal.aborted);
        for (const [approvalId, element] of shown) {
          const state = element.querySelector(".card-state");
          if (!seen.has(approvalId) && state && !element.classList.contains("resolved")) {
            element.classList.add("resolved");
            state.textContent = "No longer waiting (resolved, expired or the task ended).";
            for (const control of element.querySelectorAll("button, textarea")) (control as HTMLButtonElement).disabled = true;
          }
        }
        replace(problemSlot);
        const waitingNow = [...shown.keys()].filter((k) => seen.has(k)).length;
        count.textContent = waitingNow === 0 ? empty : `${waitingNow} waiting, oldest first.`;
      } catch (err) {
        if (!isAbort(err)) replace(problemSlot, loadFailed(err, `Listing ${title.toLowerCase()}`));
      }
    };
    await refresh();
    every(POLL_MS, signal, refresh);
  }
  return { id, title, nav: true, pattern: new RegExp(`^/${id}$`), render };
}

export const approvalsPage = makePage(
  TaskApprovalKind.APPROVAL,
  "approvals",
  "Approvals",
  "No write is waiting for approval.",
  "Writes that wait for a human before they run. Read the arguments: they are exactly what the tool will receive.",
);

export const settlementsPage = makePage(
  TaskApprovalKind.SETTLEMENT,
  "settlements",
  "Settlements",
  "No call is waiting for a settlement.",
  "Calls that may have reached their upstream without a known outcome. Check the upstream, then say whether the call ran: " +
    "“ran” records it without sending it again; “did not run” sends it once more with the same idempotency key.",
);
