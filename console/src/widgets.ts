// Pieces several pages show: status badges, typed errors, usage, and the approval / settlement form.

import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ApprovalKind, SettlementOutcome, type ErrorDetail, type PendingApproval, type TokenUsage } from "../gen/agentmesh/v1/common_pb";
import { TaskStatus } from "../gen/agentmesh/v1/dispatcher_pb";
import { errorClassName, errorCodeName, problem, type Api, type Problem } from "./api";
import { copyableId, h, prettyJson, relative, replace, textBlock, time, userText } from "./dom";

export const TERMINAL = new Set([TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.ABORTED, TaskStatus.CANCELLED]);

export function statusName(status: TaskStatus): string {
  return TaskStatus[status] ?? String(status);
}

/** A status badge: its text says the status (colour only repeats it). */
export function statusBadge(status: TaskStatus): HTMLElement {
  const name = statusName(status);
  return h("span", { class: `badge status-${name.toLowerCase().replace(/_/g, "-")}` }, name.replace(/_/g, " "));
}

export function date(ts: Timestamp | undefined): Date | undefined {
  return ts === undefined ? undefined : timestampDate(ts);
}

export function when(ts: Timestamp | undefined): HTMLElement {
  return time(date(ts));
}

export function tokens(usage: TokenUsage | undefined): string {
  if (usage === undefined) return "—";
  return `${usage.totalTokens.toLocaleString()} (${usage.inputTokens.toLocaleString()} in, ${usage.outputTokens.toLocaleString()} out)`;
}

export function usd(value: number): string {
  return `$${value.toFixed(value !== 0 && value < 0.01 ? 6 : 4)}`;
}

/** A typed error (ErrorDetail): its code and class, message, violations, fallback and missing permission. */
export function errorDetail(error: ErrorDetail): HTMLElement {
  const box = h(
    "div",
    { class: `error-detail class-${errorClassName(error.errorClass).toLowerCase()}` },
    h(
      "p",
      { class: "error-head" },
      h("span", { class: "badge error-code" }, errorCodeName(error.code)),
      " ",
      h("span", { class: "badge error-class" }, errorClassName(error.errorClass)),
      error.retryable ? h("span", { class: "badge" }, "retryable") : null,
    ),
    textBlock(error.message, "Error message", "compact"),
  );
  if (error.violations.length > 0) {
    box.append(
      h(
        "ul",
        { class: "violations" },
        ...error.violations.map((v) =>
          h("li", null, h("code", null, userText(v.path)), ` ${v.rule}: expected `, userText(v.expected), v.hint ? " — " : "", v.hint ? userText(v.hint) : null),
        ),
      ),
    );
  }
  if (error.fallbackTool) box.append(h("p", null, "Fallback tool: ", h("code", null, userText(error.fallbackTool))));
  if (error.missingPermission) box.append(h("p", null, "Missing permission: ", h("code", null, userText(error.missingPermission))));
  return box;
}

const EXPLAINED: Record<string, string> = {
  "approver:not-task-creator":
    "Separation of duties: whoever started a task may not approve or settle its calls. Another operator must decide.",
  "approver:not-task-agent": "Separation of duties: an agent's token may not resolve its own task's approvals.",
  "task:creator-or-operator": "Only the task's creator and operators may see or act on it.",
};

/** A call that failed, as an alert: the explanation of a known refusal, the service's message, the codes. */
export function problemBox(p: Problem, what: string): HTMLElement {
  const explained = EXPLAINED[p.missingPermission];
  return h(
    "div",
    { class: "problem", role: "alert" },
    h("p", { class: "problem-title" }, `${what}: ${p.code === "PermissionDenied" ? "refused" : "failed"}`),
    explained ? h("p", { class: "problem-why" }, explained) : null,
    h("p", null, userText(p.message)),
    h(
      "p",
      { class: "muted small" },
      `code ${p.code}${p.errorCode ? ` · ${p.errorCode}` : ""}${p.errorClass ? ` (${p.errorClass})` : ""}`,
      p.missingPermission ? ` · missing ${p.missingPermission}` : "",
      p.requestId ? ` · request ${p.requestId}` : "",
    ),
  );
}

export function loadFailed(err: unknown, what: string): HTMLElement {
  return problemBox(problem(err), what);
}

/** The plan of a pending approval: the tool, its exact arguments, the impact, the deadline. */
export function plan(pending: PendingApproval): HTMLElement {
  const expires = date(pending.expireTime);
  return h(
    "div",
    { class: "plan" },
    h(
      "dl",
      { class: "facts" },
      h("dt", null, "Tool"),
      h("dd", null, h("code", null, userText(pending.plan?.name ?? ""))),
      h("dt", null, "Requested by"),
      h("dd", null, userText(pending.requestedBy || "—")),
      h("dt", null, "Approval"),
      h("dd", null, copyableId(pending.approvalId, "approval id")),
      h("dt", null, "Expires"),
      h("dd", null, when(pending.expireTime), expires ? ` (${relative(expires)})` : ""),
      pending.impact ? h("dt", null, "Impact") : null,
      pending.impact ? h("dd", null, userText(pending.impact)) : null,
    ),
    h("p", { class: "label" }, "Arguments (exactly what the tool will receive; sha256 ", h("code", null, pending.argumentsSha256.slice(0, 12)), "…)"),
    textBlock(prettyJson(pending.plan?.argumentsJson ?? ""), "Arguments", "arguments"),
  );
}

/** The decision form of a task's pending approval or settlement: a reason, then approve/reject (or
 * ran/not ran), resolved through the dispatcher's ResolveApproval with the caller's token. The
 * dispatcher enforces who may decide (operators; with separation of duties never the task's creator)
 * and its refusal is shown as it says it. */
export function decisionForm(
  api: Api,
  taskId: string,
  pending: PendingApproval,
  onResolved: (status: TaskStatus) => void,
): HTMLElement {
  const settlement = pending.kind === ApprovalKind.SETTLEMENT;
  const id = `reason-${pending.approvalId}`;
  const reason = h("textarea", { id, name: "reason", rows: 2, required: true, maxlength: 2000 });
  const result = h("div", { class: "decision-result", "aria-live": "polite" });
  const buttons: HTMLButtonElement[] = [];
  const decide = async (approve: boolean, outcome: SettlementOutcome) => {
    if (reason.value.trim() === "") {
      reason.focus();
      replace(result, h("p", { class: "problem", role: "alert" }, "Give a reason: it is recorded with your decision."));
      return;
    }
    for (const b of buttons) b.disabled = true;
    replace(result, h("p", { class: "muted" }, "Sending…"));
    try {
      const answer = await api.dispatcher.resolveApproval({
        taskId,
        approvalId: pending.approvalId,
        approve,
        reason: reason.value.trim(),
        argumentsSha256: pending.argumentsSha256,
        settlement: outcome,
      });
      const status = answer.task?.status ?? TaskStatus.UNSPECIFIED;
      const verb = settlement ? (outcome === SettlementOutcome.RAN ? "Settled as ran" : "Settled as not ran") : approve ? "Approved" : "Rejected";
      replace(result, h("p", { class: "ok", role: "status" }, `${verb}. The task is now `, statusBadge(status), "."));
      reason.disabled = true;
      onResolved(status);
    } catch (err) {
      for (const b of buttons) b.disabled = false;
      replace(result, problemBox(problem(err), settlement ? "Settlement" : "Decision"));
    }
  };
  const button = (label: string, cls: string, approve: boolean, outcome: SettlementOutcome) => {
    const b = h("button", { type: "button", class: cls, onclick: () => void decide(approve, outcome) }, label);
    buttons.push(b);
    return b;
  };
  const choices = settlement
    ? [
        button("It ran", "primary", true, SettlementOutcome.RAN),
        button("It did not run (send it again)", "secondary", false, SettlementOutcome.NOT_RAN),
      ]
    : [
        button("Approve", "primary", true, SettlementOutcome.UNSPECIFIED),
        button("Reject", "danger", false, SettlementOutcome.UNSPECIFIED),
      ];
  return h(
    "form",
    { class: "decision", onsubmit: (e: Event) => e.preventDefault() },
    h("label", { for: id }, settlement ? "What you checked (recorded with the settlement)" : "Reason (recorded with your decision)"),
    reason,
    h("div", { class: "buttons" }, ...choices),
    result,
  );
}
