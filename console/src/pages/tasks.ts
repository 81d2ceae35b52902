// Tasks: the tasks the caller may see (ListTasks: an operator sees all, anyone else the tasks it started),
// newest first, with filters kept in the route (so a view can be shared as a link). Live: the rows shown
// update in place (their status from WatchTask streams for the first few that have not ended, all of them
// from a ListTasks poll), and tasks started since are announced in a bar of fixed height with a button
// that shows them: nothing moves under the reader's eyes or pointer.

import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ListTasksRequestSchema, TaskStatus, type Task } from "../../gen/agentmesh/v1/dispatcher_pb";
import { isAbort } from "../api";
import { announce, copyButton, h, link, replace, userText } from "../dom";
import { every, type Page, type PageContext } from "../page";
import { TERMINAL, loadFailed, statusBadge, statusName, when } from "../widgets";

const POLL_MS = 2000;
const WATCHED = 3; // WatchTask streams at most (browsers keep ~6 HTTP/1.1 connections per origin)
const STATUSES = [
  TaskStatus.PENDING,
  TaskStatus.RUNNING,
  TaskStatus.WAITING_APPROVAL,
  TaskStatus.SUCCEEDED,
  TaskStatus.FAILED,
  TaskStatus.ABORTED,
  TaskStatus.CANCELLED,
];

function request(query: URLSearchParams, pageToken = ""): MessageInitShape<typeof ListTasksRequestSchema> {
  const status = TaskStatus[(query.get("status") ?? "") as keyof typeof TaskStatus] ?? TaskStatus.UNSPECIFIED;
  const since = Number(query.get("hours") ?? "0");
  return {
    agentId: query.get("agent") ?? "",
    status,
    createdBy: query.get("created_by") ?? "",
    createdAfter: since > 0 ? timestampFromDate(new Date(Date.now() - since * 3600_000)) : undefined,
    pageSize: 50,
    pageToken,
  };
}

class Row {
  readonly element: HTMLTableRowElement;
  private readonly status = h("td", { class: "col-status" });
  private readonly step = h("td", { class: "col-num" });
  private readonly usage = h("td", { class: "col-num" });
  private readonly updated = h("td", { class: "col-time" });
  task: Task;

  constructor(task: Task) {
    this.task = task;
    this.element = h(
      "tr",
      { "data-task-id": task.taskId },
      h("td", { class: "col-id", "data-label": "Task" }, link(`#/tasks/${encodeURIComponent(task.taskId)}`, h("span", { class: "sr-only" }, "Open task "), userText(task.taskId, "mono")), " ", copyButton(task.taskId, "task id")),
      h("td", { class: "col-agent", "data-label": "Agent" }, userText(task.agentId)),
      h("td", { class: "col-goal", "data-label": "Goal" }, userText(task.goal.length > 300 ? `${task.goal.slice(0, 300)}…` : task.goal, "clip")),
      this.status,
      this.step,
      this.usage,
      h("td", { class: "col-who", "data-label": "Created by" }, userText(task.createdBy || "—")),
      h("td", { class: "col-time", "data-label": "Created" }, when(task.createTime)),
      this.updated,
    );
    this.status.dataset.label = "Status";
    this.step.dataset.label = "Steps";
    this.usage.dataset.label = "Tokens";
    this.updated.dataset.label = "Updated";
    this.update(task);
  }

  update(task: Task): void {
    const changed = task.status !== this.task.status;
    this.task = task;
    replace(this.status, statusBadge(task.status));
    this.status.dataset.status = statusName(task.status);
    this.step.textContent = String(task.step);
    this.usage.textContent = (task.usage?.totalTokens ?? 0n).toLocaleString();
    replace(this.updated, when(task.updateTime));
    if (changed) announce(`Task ${task.taskId} is ${statusName(task.status).replace(/_/g, " ")}`);
  }
}

async function render(ctx: PageContext): Promise<void> {
  const { api, main, signal, query } = ctx;
  const filters = filterForm(ctx);
  const newBar = h("div", { class: "new-bar", role: "status", "aria-live": "polite" });
  const body = h("tbody");
  const table = h(
    "table",
    { class: "tasks" },
    h("caption", { class: "sr-only" }, "Tasks, newest first"),
    h(
      "thead",
      null,
      h(
        "tr",
        null,
        ...["Task", "Agent", "Goal", "Status", "Steps", "Tokens", "Created by", "Created", "Updated"].map((t, i) =>
          h("th", { scope: "col", class: ["col-id", "col-agent", "col-goal", "col-status", "col-num", "col-num", "col-who", "col-time", "col-time"][i] }, t),
        ),
      ),
    ),
    body,
  );
  const more = h("div", { class: "pager" });
  const problemSlot = h("div");
  replace(main, h("h1", { tabindex: -1 }, "Tasks"), filters, newBar, problemSlot, h("div", { class: "table-wrap" }, table), more);

  const rows = new Map<string, Row>();
  const pending = new Map<string, Task>(); // started since the list was shown, not yet displayed
  const watching = new Set<string>();

  const showRows = (tasks: Task[], where: "top" | "bottom") => {
    const fresh = tasks.filter((t) => !rows.has(t.taskId)).map((t) => new Row(t));
    for (const row of fresh) rows.set(row.task.taskId, row);
    if (where === "top") body.prepend(...fresh.map((r) => r.element));
    else body.append(...fresh.map((r) => r.element));
    if (rows.size === 0) replace(body, h("tr", null, h("td", { colspan: 9, class: "empty" }, "No task matches.")));
    else body.querySelector("td.empty")?.parentElement?.remove();
    watchSome();
  };

  const renderNewBar = () => {
    if (pending.size === 0) {
      replace(newBar);
      return;
    }
    const ids = [...pending.keys()];
    replace(
      newBar,
      h("span", null, `${ids.length} new task${ids.length === 1 ? "" : "s"}: `, userText(ids.slice(0, 3).join(", ") + (ids.length > 3 ? ", …" : ""), "mono")),
      " ",
      h(
        "button",
        {
          type: "button",
          class: "primary small",
          onclick: () => {
            const tasks = [...pending.values()].sort((a, b) => Number((b.createTime?.seconds ?? 0n) - (a.createTime?.seconds ?? 0n)));
            pending.clear();
            showRows(tasks, "top");
            renderNewBar();
            (body.querySelector("tr a") as HTMLElement | null)?.focus();
          },
        },
        "Show",
      ),
    );
  };

  // WatchTask on the first few rows that have not ended: their status changes show at once.
  const watchSome = () => {
    for (const row of rows.values()) {
      if (watching.size >= WATCHED) return;
      const id = row.task.taskId;
      if (TERMINAL.has(row.task.status) || watching.has(id)) continue;
      watching.add(id);
      void (async () => {
        try {
          for await (const reply of api.dispatcher.watchTask({ taskId: id, afterSequence: row.task.lastSequence }, { signal })) {
            const event = reply.event;
            if (event === undefined || event.sequence === 0n) continue;
            const task = (await api.dispatcher.getTask({ taskId: id }, { signal })).task;
            if (task) rows.get(id)?.update(task);
            if (TERMINAL.has(event.status)) break;
          }
        } catch (err) {
          if (isAbort(err)) return;
        } finally {
          watching.delete(id);
          if (!signal.aborted) window.setTimeout(watchSome, 1000);
        }
      })();
    }
  };

  let nextToken = "";
  const loadPage = async (token: string) => {
    try {
      const answer = await api.dispatcher.listTasks(request(query, token), { signal });
      replace(problemSlot);
      showRows(answer.tasks, "bottom");
      nextToken = answer.nextPageToken;
      replace(
        more,
        nextToken ? h("button", { type: "button", class: "secondary", onclick: () => void loadPage(nextToken) }, "Older tasks") : null,
      );
    } catch (err) {
      if (!isAbort(err)) replace(problemSlot, loadFailed(err, "Listing tasks"));
    }
  };
  await loadPage("");

  every(POLL_MS, signal, async () => {
    try {
      const answer = await api.dispatcher.listTasks(request(query), { signal });
      replace(problemSlot);
      for (const task of answer.tasks) {
        const row = rows.get(task.taskId);
        if (row) {
          if (task.lastSequence !== row.task.lastSequence || task.status !== row.task.status) row.update(task);
        } else {
          pending.set(task.taskId, task);
        }
      }
      if (rows.size === 0 && pending.size > 0) {
        // Nothing displayed to push down: show them at once.
        const tasks = [...pending.values()];
        pending.clear();
        showRows(tasks, "top");
      }
      renderNewBar();
      watchSome();
    } catch (err) {
      if (!isAbort(err)) replace(problemSlot, loadFailed(err, "Refreshing tasks"));
    }
  });
}

function filterForm(ctx: PageContext): HTMLElement {
  const { query } = ctx;
  const agent = h("input", { id: "f-agent", name: "agent", value: query.get("agent") ?? "", autocomplete: "off", spellcheck: "false" });
  const creator = h("input", { id: "f-creator", name: "created_by", value: query.get("created_by") ?? "", autocomplete: "off", spellcheck: "false" });
  const status = h(
    "select",
    { id: "f-status", name: "status" },
    h("option", { value: "" }, "any"),
    ...STATUSES.map((s) => h("option", { value: statusName(s), selected: query.get("status") === statusName(s) }, statusName(s).replace(/_/g, " "))),
  );
  const hours = h(
    "select",
    { id: "f-hours", name: "hours" },
    ...[
      ["", "any time"],
      ["1", "last hour"],
      ["24", "last 24 hours"],
      ["168", "last 7 days"],
    ].map(([v, label]) => h("option", { value: v, selected: (query.get("hours") ?? "") === v }, label)),
  );
  return h(
    "form",
    {
      class: "filters",
      role: "search",
      "aria-label": "Filter tasks",
      onsubmit: (e: Event) => {
        e.preventDefault();
        const next = new URLSearchParams();
        if (agent.value.trim()) next.set("agent", agent.value.trim());
        if (status.value) next.set("status", status.value);
        if (creator.value.trim()) next.set("created_by", creator.value.trim());
        if (hours.value) next.set("hours", hours.value);
        const q = next.toString();
        location.hash = `#/tasks${q ? `?${q}` : ""}`;
      },
    },
    h("div", { class: "field" }, h("label", { for: "f-agent" }, "Agent"), agent),
    h("div", { class: "field" }, h("label", { for: "f-status" }, "Status"), status),
    h("div", { class: "field" }, h("label", { for: "f-creator" }, "Created by"), creator),
    h("div", { class: "field" }, h("label", { for: "f-hours" }, "Created"), hours),
    h("button", { type: "submit", class: "secondary" }, "Filter"),
  );
}

export const tasksPage: Page = { id: "tasks", title: "Tasks", nav: true, pattern: /^\/tasks$/, render };
