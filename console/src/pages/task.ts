// Task: one task (GetTask), what is pending on it, its timeline of events (WatchTask from the first,
// then live), each step's exact prompt (GetStepPrompt, on demand), tool calls with their typed errors,
// usage and cost, and its trace as a waterfall (GetTaskTrace) or a link to Jaeger.
//
// The page is a list of sections (TASK_SECTIONS). The hand-off tree of a team's task (issue 44) is a
// section to add here once hand-offs are in the protos; nothing stands in for it before.

import { durationMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { ApprovalKind } from "../../gen/agentmesh/v1/common_pb";
import { TaskEventKind, TaskStatus, TraceSpanKind, TraceSpanStatus, type Task, type TaskEvent, type TraceSpan } from "../../gen/agentmesh/v1/dispatcher_pb";
import { isAbort, problem, type Api } from "../api";
import { append, copyButton, copyableId, externalLink, h, prettyJson, replace, size, textBlock, userText } from "../dom";
import type { Page, PageContext } from "../page";
import { TERMINAL, date, decisionForm, errorDetail, loadFailed, plan, problemBox, statusBadge, tokens, usd, when } from "../widgets";

/** What every section gets: the task as last read, and a way to read it again. */
export interface TaskView {
  api: Api;
  ctx: PageContext;
  task: Task;
  refresh(): Promise<void>;
  /** Called with each event of the task's stream, in order (sections may listen). */
  onEvent: Array<(event: TaskEvent) => void>;
  /** Called whenever the task was read again. */
  onTask: Array<(task: Task) => void>;
}

export interface TaskSection {
  id: string;
  title: string;
  render(view: TaskView, into: HTMLElement): void;
}

function kindName(kind: TaskEventKind): string {
  return (TaskEventKind[kind] ?? String(kind)).replace(/_/g, " ");
}

// -- summary ----------------------------------------------------------------------------------------

const summary: TaskSection = {
  id: "summary",
  title: "Summary",
  render(view, into) {
    let cost = 0;
    let priced = false;
    let drawn = "";
    const draw = (task: Task) => {
      // Redrawn only when the task changed: an expanded answer or a selection stays as it is.
      const key = `${task.status}|${task.lastSequence}|${task.step}|${task.updateTime?.seconds ?? 0n}`;
      if (key === drawn) return;
      drawn = key;
      replace(
        into,
        h(
          "dl",
          { class: "facts" },
          h("dt", null, "Status"),
          h("dd", { id: "task-status" }, statusBadge(task.status)),
          h("dt", null, "Agent"),
          h("dd", null, userText(task.agentId)),
          h("dt", null, "Goal"),
          h("dd", null, textBlock(task.goal, "Goal", "compact")),
          h("dt", null, "Created by"),
          h("dd", null, userText(task.createdBy || "—")),
          h("dt", null, "Created"),
          h("dd", null, when(task.createTime)),
          h("dt", null, "Updated"),
          h("dd", null, when(task.updateTime)),
          h("dt", null, "Steps"),
          h("dd", null, String(task.step)),
          h("dt", null, "Tokens"),
          h("dd", null, tokens(task.usage)),
          h("dt", null, "Cost"),
          h("dd", { id: "task-cost" }, priced ? usd(cost) : "—", h("span", { class: "muted small" }, " (provider_svc's price table, per model reply)")),
          h("dt", null, "Session"),
          h("dd", null, copyableId(task.sessionId, "session id")),
          h("dt", null, "Request"),
          h("dd", null, task.requestId ? copyableId(task.requestId, "request id") : "—"),
        ),
        task.status === TaskStatus.SUCCEEDED
          ? h("section", { class: "answer", "aria-label": "Answer" }, h("h3", null, "Answer"), textBlock(task.answer, "Answer"))
          : null,
        task.error ? h("section", { "aria-label": "Error" }, h("h3", null, "Error"), errorDetail(task.error)) : null,
      );
    };
    view.onTask.push(draw);
    view.onEvent.push((event) => {
      if (event.kind === TaskEventKind.MODEL_REPLY && event.attributes.cost_usd !== undefined) {
        cost += Number(event.attributes.cost_usd) || 0;
        priced = true;
        const cell = into.querySelector("#task-cost");
        if (cell) cell.firstChild!.textContent = usd(cost);
      }
    });
    draw(view.task);
  },
};

// -- pending approval or settlement ------------------------------------------------------------------

const pendingSection: TaskSection = {
  id: "pending",
  title: "Waiting for a human",
  render(view, into) {
    let shownFor = "";
    const draw = (task: Task) => {
      const pending = task.pendingApproval;
      if (task.status !== TaskStatus.WAITING_APPROVAL || pending === undefined) {
        if (shownFor) replace(into, h("p", { class: "muted" }, "Nothing is waiting for a human."));
        else replace(into, h("p", { class: "muted" }, "Nothing is waiting for a human."));
        shownFor = "";
        return;
      }
      if (shownFor === pending.approvalId) return; // keep the form (and a typed reason) as it is
      shownFor = pending.approvalId;
      const settlement = pending.kind === ApprovalKind.SETTLEMENT;
      replace(
        into,
        h("p", null, settlement ? "A call's outcome is unknown: say whether it ran." : "A call waits for approval before it runs."),
        plan(pending),
        decisionForm(view.api, task.taskId, pending, () => void view.refresh()),
      );
    };
    view.onTask.push(draw);
    draw(view.task);
  },
};

// -- timeline -----------------------------------------------------------------------------------------

function promptDisclosure(api: Api, taskId: string, step: number, signal: AbortSignal): HTMLElement {
  const body = h("div", { class: "prompt-body" });
  const details = h("details", { class: "prompt" }, h("summary", null, `Prompt sent for step ${step}`), body);
  let loaded = false;
  details.addEventListener("toggle", async () => {
    if (!details.open || loaded) return;
    loaded = true;
    replace(body, h("p", { class: "muted" }, "Loading…"));
    try {
      const prompt = (await api.dispatcher.getStepPrompt({ taskId, step }, { signal })).prompt;
      if (prompt === undefined) throw new Error("empty answer");
      replace(
        body,
        h(
          "p",
          { class: "muted small" },
          `${prompt.format} to `,
          userText(prompt.model),
          prompt.redacted ? " · secrets masked" : "",
          ` · ${size(prompt.requestJson.length)}`,
        ),
        textBlock(prettyJson(prompt.requestJson), `Prompt of step ${step}`),
      );
    } catch (err) {
      loaded = false;
      if (!isAbort(err)) replace(body, loadFailed(err, `Prompt of step ${step}`));
    }
  });
  return details;
}

function eventItem(view: TaskView, event: TaskEvent): HTMLElement {
  const item = h(
    "li",
    { class: `event kind-${(TaskEventKind[event.kind] ?? "").toLowerCase().replace(/_/g, "-")}`, "data-sequence": event.sequence.toString() },
    h(
      "div",
      { class: "event-head" },
      h("span", { class: "seq" }, `#${event.sequence}`),
      when(event.time),
      h("span", { class: "badge kind" }, kindName(event.kind)),
      event.step ? h("span", { class: "muted" }, `step ${event.step}`) : null,
    ),
    h("p", { class: "event-message" }, userText(event.message)),
  );
  const call = event.toolCall;
  if (call && call.name) {
    item.append(
      h("p", { class: "label" }, "Tool call ", h("code", null, userText(call.name)), " ", h("span", { class: "muted small" }, userText(call.id))),
      textBlock(prettyJson(call.argumentsJson), "Arguments", "arguments"),
    );
  }
  const result = event.toolResult;
  if (result) {
    const stats = result.stats;
    item.append(
      h(
        "p",
        { class: "label" },
        "Result of ",
        h("code", null, userText(result.toolName)),
        stats ? h("span", { class: "muted small" }, ` · ${stats.attempts} attempt(s) · ${stats.duration ? `${durationMs(stats.duration).toFixed(0)} ms` : "—"}${stats.replayed ? " · replayed" : ""}`) : null,
      ),
    );
    const outcome = result.outcome;
    if (outcome.case === "output") {
      const out = outcome.value;
      if (out.content.case === "inline") item.append(textBlock(out.content.value, "Tool output"));
      else if (out.content.case === "ref") {
        const ref = out.content.value;
        item.append(
          h("p", { class: "muted small" }, `Offloaded (${size(Number(ref.sizeBytes))}, ${ref.mediaType}): `, copyableId(ref.refId, "payload ref")),
          textBlock(out.digest, "Digest"),
        );
      }
      if (out.redacted) item.append(h("p", { class: "muted small" }, "Secrets were redacted from this output."));
    } else if (outcome.case === "error") {
      item.append(errorDetail(outcome.value));
    }
  }
  if (event.error && !result) item.append(errorDetail(event.error));
  if (event.pendingApproval && event.kind === TaskEventKind.APPROVAL_REQUIRED) item.append(plan(event.pendingApproval));
  if (event.usage && (event.usage.totalTokens > 0n || event.usage.inputTokens > 0n)) {
    const cost = event.attributes.cost_usd;
    item.append(
      h(
        "p",
        { class: "muted small" },
        `${event.kind === TaskEventKind.CONTEXT ? "Context" : "Usage"}: ${tokens(event.usage)}`,
        cost !== undefined && event.kind === TaskEventKind.MODEL_REPLY ? ` · ${usd(Number(cost) || 0)}` : "",
        event.attributes.model ? " · " : "",
        event.attributes.model ? userText(event.attributes.model) : null,
      ),
    );
  }
  if (event.kind === TaskEventKind.STEP_STARTED && event.step > 0) {
    item.append(promptDisclosure(view.api, event.taskId, event.step, view.ctx.signal));
  }
  return item;
}

const timeline: TaskSection = {
  id: "timeline",
  title: "Timeline",
  render(view, into) {
    const list = h("ol", { class: "timeline", "aria-live": "off" });
    const state = h("p", { class: "muted stream-state", role: "status" }, "Connecting…");
    replace(into, list, state);
    let last = 0n;
    const follow = async () => {
      let retries = 0;
      while (!view.ctx.signal.aborted) {
        try {
          state.textContent = "Live";
          for await (const reply of view.api.dispatcher.watchTask({ taskId: view.task.taskId, afterSequence: last }, { signal: view.ctx.signal })) {
            const event = reply.event;
            if (event === undefined || event.sequence === 0n || event.sequence <= last) continue;
            last = event.sequence;
            retries = 0;
            list.append(eventItem(view, event));
            for (const listener of view.onEvent) listener(event);
            if (event.kind === TaskEventKind.STATUS || event.kind === TaskEventKind.APPROVAL_REQUIRED || event.kind === TaskEventKind.ANSWER) {
              await view.refresh();
            }
          }
          await view.refresh();
          if (TERMINAL.has(view.task.status)) {
            state.textContent = "The task has ended: no more events.";
            return;
          }
        } catch (err) {
          if (isAbort(err)) return;
          const code = ConnectError.from(err).code;
          if (code !== Code.Unavailable && code !== Code.Unknown && code !== Code.Internal) {
            replace(into, list, problemBox(problem(err), "Events"));
            return;
          }
          retries += 1;
          state.textContent = `Reconnecting (attempt ${retries})…`;
          await new Promise((resolve) => window.setTimeout(resolve, Math.min(5000, 250 * 2 ** retries)));
        }
      }
    };
    void follow();
  },
};

// -- trace --------------------------------------------------------------------------------------------

function spanMs(span: TraceSpan): [number, number] {
  const start = date(span.startTime)?.getTime() ?? 0;
  const end = date(span.endTime)?.getTime() ?? start;
  return [start, Math.max(start, end)];
}

function shortName(name: string): string {
  const [service, method] = name.replace(/^\//, "").split("/", 2);
  return method !== undefined && service!.includes(".") ? `${service!.split(".").pop()}/${method}` : name;
}

/** Spans depth-first (children by start), with their depth; a span whose parent is absent is a root. */
function ordered(spans: TraceSpan[]): Array<[TraceSpan, number]> {
  const ids = new Set(spans.map((s) => s.spanId));
  const children = new Map<string, TraceSpan[]>();
  const roots: TraceSpan[] = [];
  for (const span of spans) {
    if (span.parentSpanId && ids.has(span.parentSpanId) && span.parentSpanId !== span.spanId) {
      const list = children.get(span.parentSpanId) ?? [];
      list.push(span);
      children.set(span.parentSpanId, list);
    } else roots.push(span);
  }
  const out: Array<[TraceSpan, number]> = [];
  const walk = (span: TraceSpan, depth: number) => {
    out.push([span, depth]);
    for (const child of children.get(span.spanId) ?? []) walk(child, depth + 1);
  };
  for (const root of roots) walk(root, 0);
  return out;
}

export function waterfall(spans: TraceSpan[]): HTMLElement {
  const times = spans.map(spanMs);
  const t0 = Math.min(...times.map((t) => t[0]));
  const t1 = Math.max(...times.map((t) => t[1]));
  const total = Math.max(1, t1 - t0);
  const traces = new Set(spans.map((s) => s.traceId));
  const rows = ordered(spans).map(([span, depth]) => {
    const [start, end] = spanMs(span);
    const bar = h("span", { class: `bar${span.status === TraceSpanStatus.ERROR ? " error" : ""}` });
    // CSSOM, not a style attribute: the CSP allows no inline styles.
    bar.style.left = `${((start - t0) / total) * 100}%`;
    bar.style.width = `${Math.max(0.4, ((end - start) / total) * 100)}%`;
    const name = h("span", { class: "span-name" }, userText(shortName(span.name)));
    name.style.paddingInlineStart = `${depth * 0.9}rem`;
    const kind = TraceSpanKind[span.kind] ?? "";
    return h(
      "li",
      { class: "span-row", title: span.name },
      name,
      h("span", { class: "span-service muted small" }, userText(span.service), kind && kind !== "UNSPECIFIED" ? ` ${kind}` : ""),
      h("span", { class: "span-time small" }, `${(start - t0).toFixed(1)} ms +${(end - start).toFixed(1)} ms`),
      h("span", { class: "track", "aria-hidden": "true" }, bar),
      span.status === TraceSpanStatus.ERROR ? h("span", { class: "span-error small" }, "✗ ", userText(span.statusMessage || "error")) : null,
    );
  });
  return h(
    "div",
    { class: "waterfall" },
    h("p", { class: "muted small" }, `${spans.length} spans in ${traces.size} trace${traces.size === 1 ? "" : "s"} · ${total.toFixed(1)} ms · services: ${[...new Set(spans.map((s) => s.service))].sort().join(", ")}`),
    h("ol", { class: "spans", "aria-label": "Spans, parents before children" }, ...rows),
  );
}

function jaegerLink(view: TaskView): HTMLElement | null {
  const base = view.ctx.config.jaeger_url.replace(/\/+$/, "");
  if (!base || !view.task.requestId) return null;
  const tags = JSON.stringify({ "agentmesh.request_id": view.task.requestId });
  return externalLink(`${base}/search?service=dispatcher_svc&tags=${encodeURIComponent(tags)}`, "Open this request in Jaeger");
}

const trace: TaskSection = {
  id: "trace",
  title: "Trace",
  render(view, into) {
    const body = h("div", { class: "trace-body" });
    const state = h("p", { class: "muted small trace-state", role: "status" });
    // What is shown stays until the new answer replaces it: a reload does not collapse the section.
    const load = async () => {
      state.textContent = "Reading spans…";
      try {
        const answer = await view.api.dispatcher.getTaskTrace({ taskId: view.task.taskId }, { signal: view.ctx.signal });
        if (answer.spans.length === 0) {
          replace(body, h("p", { class: "muted" }, "No spans recorded for this task yet (spans reach the span file about a second after they end)."));
        } else {
          replace(body, waterfall(answer.spans), answer.truncated ? h("p", { class: "muted small" }, "Some spans were left out (a large span file is read from its end).") : null);
        }
        state.textContent = `${answer.spans.length} spans read at ${new Date().toLocaleTimeString()}.`;
      } catch (err) {
        if (isAbort(err)) return;
        state.textContent = "";
        const p = problem(err);
        if (p.code === "FailedPrecondition") {
          replace(body, h("p", null, "This dispatcher keeps no span file: ", userText(p.message)));
        } else replace(body, problemBox(p, "Trace"));
      }
    };
    const jaeger = jaegerLink(view);
    replace(into, h("div", { class: "buttons" }, h("button", { type: "button", class: "secondary", onclick: () => void load() }, "Reload trace"), jaeger), state, body);
    let ended = TERMINAL.has(view.task.status);
    view.onTask.push((task) => {
      if (!ended && TERMINAL.has(task.status)) {
        ended = true;
        window.setTimeout(() => void load(), 1200); // the last spans reach the file within about a second
      }
    });
    void load();
  },
};

/** The Task page's sections, in order. */
export const TASK_SECTIONS: TaskSection[] = [summary, pendingSection, timeline, trace];

async function render(ctx: PageContext): Promise<void> {
  const { api, main, signal } = ctx;
  const taskId = decodeURIComponent(ctx.params[0] ?? "");
  const heading = h("h1", { tabindex: -1 }, "Task ", userText(taskId, "mono"));
  replace(main, heading, h("p", { class: "muted" }, "Loading…"));
  let task: Task | undefined;
  try {
    task = (await api.dispatcher.getTask({ taskId }, { signal })).task;
  } catch (err) {
    if (!isAbort(err)) replace(main, heading, loadFailed(err, "Reading the task"));
    return;
  }
  if (task === undefined) return;
  const view: TaskView = {
    api,
    ctx,
    task,
    onEvent: [],
    onTask: [],
    async refresh() {
      try {
        const fresh = (await api.dispatcher.getTask({ taskId }, { signal })).task;
        if (fresh === undefined) return;
        view.task = fresh;
        for (const listener of view.onTask) listener(fresh);
      } catch (err) {
        if (!isAbort(err)) console.warn("refreshing the task failed", err);
      }
    },
  };
  replace(main, h("div", { class: "title-row" }, heading, copyButton(taskId, "task id")));
  for (const section of TASK_SECTIONS) {
    const into = h("div", { class: "section-body" });
    const headingId = `section-${section.id}`;
    append(main, h("section", { class: `task-section section-${section.id}`, "aria-labelledby": headingId }, h("h2", { id: headingId }, section.title), into));
    section.render(view, into);
  }
}

export const taskPage: Page = { id: "task", title: "Task", nav: false, pattern: /^\/tasks\/([^/?]+)$/, render };
