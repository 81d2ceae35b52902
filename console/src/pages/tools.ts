// Tools: the registry as tool_svc lists it (ListTools over its Connect edge, a read-only RPC), with each
// tool's permission (environment, group, access), approval and idempotency, executor, availability,
// its input and output schemas, and the circuit breakers that are not closed (the answering replica's
// view). Filter by group, or by what the caller's own token may use.

import { durationMs } from "@bufbuild/protobuf/wkt";
import { AccessMode } from "../../gen/agentmesh/v1/common_pb";
import { BreakerState, type ListToolsResponse, type ToolBreakerCount } from "../../gen/agentmesh/v1/tool_pb";
import { isAbort, problem } from "../api";
import { h, prettyJson, replace, textBlock, userText } from "../dom";
import { every, type Page, type PageContext } from "../page";
import { problemBox } from "../widgets";

const POLL_MS = 10_000;

function breakerBadges(counts: ToolBreakerCount[]): HTMLElement {
  if (counts.length === 0) return h("span", { class: "badge ok-badge" }, "closed");
  return h(
    "span",
    null,
    ...counts.map((c) =>
      h("span", { class: `badge breaker-${(BreakerState[c.state] ?? "").toLowerCase().replace(/_/g, "-")}` }, `${c.count} ${(BreakerState[c.state] ?? "?").toLowerCase().replace(/_/g, " ")}`),
    ),
  );
}

function toolRows(answer: ListToolsResponse): HTMLElement[] {
  const breakers = new Map<string, ToolBreakerCount[]>();
  for (const count of answer.breakers) breakers.set(count.tool, [...(breakers.get(count.tool) ?? []), count]);
  return answer.tools.map((tool) => {
    const permission = tool.permission;
    const access = permission ? (AccessMode[permission.access] ?? "").toLowerCase() : "";
    const breakerCell = h("td", { class: "col-breakers", "data-label": "Breakers" }, breakerBadges(breakers.get(tool.name) ?? []));
    return h(
      "tr",
      { "data-tool": tool.name },
      h(
        "td",
        { class: "col-tool", "data-label": "Tool" },
        h("code", null, userText(tool.name)),
        tool.unavailableReason ? h("p", { class: "problem small" }, "Unavailable: ", userText(tool.unavailableReason)) : null,
      ),
      h(
        "td",
        { class: "col-desc", "data-label": "Description" },
        userText(tool.description.length > 400 ? `${tool.description.slice(0, 400)}…` : tool.description),
        h(
          "details",
          { class: "schema" },
          h("summary", null, "Schemas and limits"),
          h("p", { class: "label" }, "Input schema"),
          textBlock(prettyJson(tool.inputSchemaJson || "{}"), "Input schema", "arguments"),
          tool.outputSchemaJson ? h("p", { class: "label" }, "Output schema") : null,
          tool.outputSchemaJson ? textBlock(prettyJson(tool.outputSchemaJson), "Output schema", "arguments") : null,
          h(
            "p",
            { class: "muted small" },
            `timeout ${tool.timeout ? `${durationMs(tool.timeout) / 1000} s` : "—"} · retries ${tool.retryPolicy?.maxAttempts ?? 1} attempt(s)`,
            tool.fallbackTool ? ` · fallback ${tool.fallbackTool}` : "",
            tool.httpMethod || tool.endpointUrl ? " · " : "",
            tool.httpMethod || tool.endpointUrl ? userText(`${tool.httpMethod || "POST"} ${tool.endpointUrl}`) : null,
            tool.mcpServer ? " · MCP server " : "",
            tool.mcpServer ? userText(tool.mcpServer) : null,
          ),
          tool.impact ? h("p", { class: "small" }, "Impact: ", userText(tool.impact)) : null,
        ),
      ),
      h("td", { class: "col-perm", "data-label": "Permission" }, h("code", null, userText(permission ? `${permission.environment}:${permission.group}:${access}` : "—"))),
      h(
        "td",
        { class: "col-flags", "data-label": "Calls" },
        tool.requiresApproval ? h("span", { class: "badge warn" }, "approval") : null,
        tool.idempotent ? h("span", { class: "badge" }, "idempotent") : null,
        h("span", { class: "badge" }, userText(tool.executor || "—")),
      ),
      breakerCell,
    );
  });
}

async function render(ctx: PageContext): Promise<void> {
  const { api, main, signal, query } = ctx;
  const group = h("input", { id: "t-group", name: "group", value: query.get("group") ?? "", autocomplete: "off", spellcheck: "false" });
  const mine = h("input", { id: "t-mine", name: "mine", type: "checkbox", checked: query.get("mine") === "1" });
  const form = h(
    "form",
    {
      class: "filters",
      role: "search",
      "aria-label": "Filter tools",
      onsubmit: (e: Event) => {
        e.preventDefault();
        const next = new URLSearchParams();
        if (group.value.trim()) next.set("group", group.value.trim());
        if (mine.checked) next.set("mine", "1");
        const q = next.toString();
        location.hash = `#/tools${q ? `?${q}` : ""}`;
      },
    },
    h("div", { class: "field" }, h("label", { for: "t-group" }, "Group"), group),
    h("div", { class: "field check" }, mine, h("label", { for: "t-mine" }, "Only tools my token may use")),
    h("button", { type: "submit", class: "secondary" }, "Filter"),
  );
  const body = h("tbody");
  const problemSlot = h("div");
  const count = h("p", { class: "muted", role: "status" });
  replace(
    main,
    h("h1", { tabindex: -1 }, "Tools"),
    form,
    count,
    problemSlot,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "tools" },
        h("caption", { class: "sr-only" }, "Registered tools, by name"),
        h("thead", null, h("tr", null, ...["Tool", "Description", "Permission", "Calls", "Breakers"].map((t) => h("th", { scope: "col" }, t)))),
        body,
      ),
    ),
  );
  let drawn = false;
  const load = async () => {
    try {
      const answer = await api.tools.listTools({ group: query.get("group") ?? "", permittedOnly: query.get("mine") === "1" }, { signal });
      replace(problemSlot);
      count.textContent = `${answer.tools.length} tool${answer.tools.length === 1 ? "" : "s"}.`;
      if (!drawn) {
        replace(body, ...toolRows(answer));
        drawn = true;
        return;
      }
      // Later polls update the breaker cells in place (the rows and any open schema stay as they are).
      for (const row of toolRows(answer)) {
        const name = row.dataset.tool ?? "";
        const shown = [...body.rows].find((r) => r.dataset.tool === name);
        const fresh = row.querySelector(".col-breakers");
        const old = shown?.querySelector(".col-breakers");
        if (old && fresh) old.replaceWith(fresh);
      }
    } catch (err) {
      if (isAbort(err)) return;
      const p = problem(err);
      const box = problemBox(p, "Listing tools");
      if (p.code === "Unknown" || p.code === "Unavailable") {
        box.append(
          h(
            "p",
            { class: "small" },
            "tool_svc's Connect edge is at ",
            h("code", null, userText(api.toolUrl)),
            ". If it is up, its server.cors_allowed_origins must list this console's origin ",
            h("code", null, userText(location.origin)),
            " (or set console.tool_url to an address this browser reaches).",
          ),
        );
      }
      replace(problemSlot, box);
    }
  };
  await load();
  every(POLL_MS, signal, load);
}

export const toolsPage: Page = { id: "tools", title: "Tools", nav: true, pattern: /^\/tools$/, render };
