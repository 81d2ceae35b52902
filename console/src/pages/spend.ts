// Spend: what the caller may see of the model gateway's spend (provider_svc over its Connect edge, two
// read-only RPCs): the budgets of API keys, agents and tenants with today's and this month's spend
// (ListBudgets), and spend summed by day, agent, key, model or task tag over a range of days
// (GetSpendSummary), with the total. provider_svc decides what a token sees: an operator all, an agent
// its own, an API key itself.

import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { BudgetScopeKind, SpendGroup, type Budget, type SpendGroupRow } from "../../gen/agentmesh/v1/provider_pb";
import { isAbort, problem } from "../api";
import { h, replace, userText } from "../dom";
import { every, type Page, type PageContext } from "../page";
import { problemBox, usd } from "../widgets";

const POLL_MS = 15_000;
const GROUPS: [string, SpendGroup, string][] = [
  ["day", SpendGroup.DAY, "Day"],
  ["agent", SpendGroup.AGENT, "Agent"],
  ["key", SpendGroup.API_KEY, "API key"],
  ["model", SpendGroup.MODEL, "Model"],
  ["tag", SpendGroup.TASK_TAG, "Task tag"],
];
const KIND_NAMES: Record<number, string> = {
  [BudgetScopeKind.API_KEY]: "API key",
  [BudgetScopeKind.AGENT]: "agent",
  [BudgetScopeKind.TENANT]: "tenant",
};

/** A budget's use as a meter (its text says the numbers; the bar only repeats them). */
function meter(spent: number, budget: number | undefined, label: string): HTMLElement {
  if (budget === undefined) return h("span", null, usd(spent), h("span", { class: "muted small" }, " (no budget)"));
  const share = budget > 0 ? spent / budget : 1;
  const level = share >= 1 ? "over" : share >= 0.8 ? "high" : "ok";
  const bar = h("meter", { min: 0, max: budget > 0 ? budget : 1, value: Math.min(spent, budget > 0 ? budget : 1), low: budget * 0.5, high: budget * 0.8, optimum: 0 });
  bar.setAttribute("aria-label", `${label}: ${usd(spent)} of ${usd(budget)}`);
  return h("span", { class: `budget budget-${level}` }, bar, " ", `${usd(spent)} of ${usd(budget)} (${Math.round(share * 100)} %)`);
}

function budgetRows(budgets: Budget[]): HTMLElement[] {
  return budgets.map((b) =>
    h(
      "tr",
      { "data-scope": b.scope },
      h(
        "td",
        { "data-label": "Scope" },
        h("span", { class: "badge" }, KIND_NAMES[b.kind] ?? "?"),
        " ",
        h("code", null, userText(b.scope)),
        b.name ? h("span", null, " ", userText(b.name)) : null,
        b.agentId ? h("span", { class: "muted small" }, " for ", userText(b.agentId)) : null,
        b.revoked ? h("span", { class: "badge warn" }, "revoked") : null,
      ),
      h("td", { class: "col-day", "data-label": "Today" }, meter(b.spentDayUsd, b.budgetUsdDay, "Today")),
      h("td", { class: "col-month", "data-label": "This month" }, meter(b.spentMonthUsd, b.budgetUsdMonth, "This month")),
      h("td", { "data-label": "In flight" }, usd(b.reservedUsd)),
      h(
        "td",
        { "data-label": "Rate limits" },
        `${b.rpm !== undefined ? `${b.rpm} rpm` : "—"} · ${b.tpm !== undefined ? `${b.tpm.toLocaleString()} tpm` : "—"}`,
      ),
    ),
  );
}

function spendRow(row: SpendGroupRow, group: string, total = false): HTMLElement {
  const usage = row.usage;
  const label = total ? h("strong", null, "Total") : row.key ? h("code", null, userText(row.key)) : h("span", { class: "muted" }, group === "key" ? "(identity tokens)" : "(none)");
  return h(
    "tr",
    { class: total ? "total" : "", "data-key": total ? null : row.key },
    h(total ? "th" : "td", { scope: total ? "row" : null, "data-label": "Group" }, label),
    h("td", { class: "num", "data-label": "Calls" }, row.calls.toLocaleString()),
    h("td", { class: "num", "data-label": "Tokens in" }, (usage?.inputTokens ?? 0n).toLocaleString()),
    h("td", { class: "num", "data-label": "Tokens out" }, (usage?.outputTokens ?? 0n).toLocaleString()),
    h("td", { class: "num col-cost", "data-label": "Cost" }, usd(row.costUsd)),
  );
}

function isoDay(date: Date): string {
  return date.toISOString().slice(0, 10);
}

async function render(ctx: PageContext): Promise<void> {
  const { api, main, signal, query } = ctx;
  const groupName = GROUPS.some(([n]) => n === query.get("by")) ? (query.get("by") as string) : "day";
  const today = new Date();
  const from = query.get("from") ?? isoDay(new Date(today.getTime() - 29 * 86_400_000));
  const to = query.get("to") ?? isoDay(today);
  const by = h("select", { id: "s-by", name: "by" }, ...GROUPS.map(([n, , label]) => h("option", { value: n, selected: n === groupName }, label)));
  const start = h("input", { id: "s-from", name: "from", type: "date", value: from });
  const end = h("input", { id: "s-to", name: "to", type: "date", value: to });
  const agent = h("input", { id: "s-agent", name: "agent", value: query.get("agent") ?? "", autocomplete: "off", spellcheck: "false" });
  const form = h(
    "form",
    {
      class: "filters",
      role: "search",
      "aria-label": "Spend filters",
      onsubmit: (e: Event) => {
        e.preventDefault();
        const next = new URLSearchParams({ by: by.value, from: start.value, to: end.value });
        if (agent.value.trim()) next.set("agent", agent.value.trim());
        location.hash = `#/spend?${next.toString()}`;
      },
    },
    h("div", { class: "field" }, h("label", { for: "s-by" }, "Sum by"), by),
    h("div", { class: "field" }, h("label", { for: "s-from" }, "From (UTC day)"), start),
    h("div", { class: "field" }, h("label", { for: "s-to" }, "To"), end),
    h("div", { class: "field" }, h("label", { for: "s-agent" }, "Agent"), agent),
    h("button", { type: "submit", class: "secondary" }, "Show"),
  );
  const budgetBody = h("tbody");
  const budgetNote = h("p", { class: "muted", role: "status" });
  const spendBody = h("tbody");
  const spendFoot = h("tfoot");
  const spendNote = h("p", { class: "muted", role: "status" });
  const problemSlot = h("div");
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "Show more");
  const heads = (names: string[]) => h("thead", null, h("tr", null, ...names.map((t) => h("th", { scope: "col" }, t))));
  replace(
    main,
    h("h1", { tabindex: -1 }, "Spend"),
    problemSlot,
    h("h2", null, "Budgets"),
    budgetNote,
    h(
      "div",
      { class: "table-wrap" },
      h("table", { class: "budgets" }, h("caption", { class: "sr-only" }, "Budgets and their spend"), heads(["Scope", "Today", "This month", "In flight", "Rate limits"]), budgetBody),
    ),
    h("h2", null, "Spend"),
    form,
    spendNote,
    h(
      "div",
      { class: "table-wrap" },
      h("table", { class: "spend" }, h("caption", { class: "sr-only" }, "Spend by group"), heads(["Group", "Calls", "Tokens in", "Tokens out", "Cost"]), spendBody, spendFoot),
    ),
    more,
  );
  const failed = (err: unknown, what: string) => {
    if (isAbort(err)) return;
    const p = problem(err);
    const box = problemBox(p, what);
    if (p.code === "Unknown" || p.code === "Unavailable") {
      box.append(
        h(
          "p",
          { class: "small" },
          "provider_svc's Connect edge is at ",
          h("code", null, userText(api.providerUrl)),
          ". If it is up, its server.cors_allowed_origins must list this console's origin ",
          h("code", null, userText(location.origin)),
          " (or set console.provider_url to an address this browser reaches).",
        ),
      );
    }
    replace(problemSlot, box);
  };
  const loadBudgets = async () => {
    try {
      const all: Budget[] = [];
      let token = "";
      let month = "";
      do {
        const answer = await api.provider.listBudgets({ pageSize: 500, pageToken: token }, { signal });
        all.push(...answer.budgets);
        token = answer.nextPageToken;
        month = answer.month;
      } while (token && all.length < 5000);
      budgetNote.textContent = all.length ? `${all.length} scope${all.length === 1 ? "" : "s"}; spend of UTC day and month ${month}.` : "No budget or quota applies to what this token may see.";
      replace(budgetBody, ...budgetRows(all));
    } catch (err) {
      failed(err, "Listing budgets");
    }
  };
  const group = GROUPS.find(([n]) => n === groupName) ?? GROUPS[0]!;
  const request = {
    groupBy: group[1],
    agentId: query.get("agent") ?? "",
    startTime: timestampFromDate(new Date(`${from}T00:00:00Z`)),
    endTime: timestampFromDate(new Date(`${to}T00:00:00Z`)),
    pageSize: 100,
  };
  let nextToken = "";
  const loadSpend = async (append: boolean) => {
    try {
      const answer = await api.provider.getSpendSummary({ ...request, pageToken: append ? nextToken : "" }, { signal });
      const rows = answer.rows.map((r) => spendRow(r, groupName));
      if (append) spendBody.append(...rows);
      else replace(spendBody, ...rows);
      replace(spendFoot, answer.total ? spendRow(answer.total, groupName, true) : null);
      nextToken = answer.nextPageToken;
      more.hidden = !nextToken;
      spendNote.textContent = answer.totalGroups ? `${answer.totalGroups} group${answer.totalGroups === 1 ? "" : "s"}, ${from} to ${to} (UTC days).` : `No spend from ${from} to ${to}.`;
    } catch (err) {
      failed(err, "Reading spend");
    }
  };
  more.addEventListener("click", () => void loadSpend(true));
  await Promise.all([loadBudgets(), loadSpend(false)]);
  every(POLL_MS, signal, loadBudgets);
}

export const spendPage: Page = { id: "spend", title: "Spend", nav: true, pattern: /^\/spend$/, render };
