// The console's entry point: reads /console/config.json, finishes an OIDC login when the identity
// provider sent the browser back, asks for a token when there is none, then routes `#/<page>` to the
// pages of pages.ts. Every page gets an AbortSignal: leaving it stops its streams and timers.

import { makeApi, type Api } from "./api";
import { beginOidcLogin, claims, completeOidcLogin, currentToken, forget, restoreToken, setToken } from "./auth";
import { loadConfig, type ConsoleConfig } from "./config";
import { announce, h, link, replace, time, userText } from "./dom";
import type { Page } from "./page";
import { PAGES } from "./pages";

const main = document.getElementById("main") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
const who = document.getElementById("who") as HTMLElement;

let current: AbortController | null = null;
let loginReason = "";

function routeOf(hash: string): { path: string; query: URLSearchParams } {
  const [path, query] = hash.replace(/^#/, "").split("?", 2);
  return { path: path || "/tasks", query: new URLSearchParams(query ?? "") };
}

function drawNav(active: Page | null): void {
  const signedIn = currentToken() !== "";
  replace(
    nav,
    signedIn
      ? h(
          "ul",
          null,
          ...PAGES.filter((p) => p.nav).map((p) => {
            const a = link(`#/${p.id}`, p.title);
            if (active?.id === p.id || (active?.id === "task" && p.id === "tasks")) a.setAttribute("aria-current", "page");
            return h("li", null, a);
          }),
        )
      : null,
  );
  const seen = claims(currentToken());
  replace(
    who,
    signedIn
      ? h(
          "span",
          { class: "who" },
          h("span", { class: "muted small" }, "Signed in as "),
          userText(seen?.subject || "(unknown subject)"),
          seen && seen.roles.length ? h("span", { class: "muted small" }, ` (${seen.roles.join(", ")})`) : null,
          seen?.expires ? h("span", { class: "muted small" }, " until ", time(seen.expires)) : null,
          " ",
          h("button", { type: "button", class: "secondary small", onclick: signOut }, "Sign out"),
        )
      : null,
  );
}

function signOut(): void {
  forget();
  loginReason = "Signed out.";
  void show();
}

function loginPage(config: ConsoleConfig): void {
  drawNav(null);
  document.title = "Sign in · agentmesh console";
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", spellcheck: "false", required: true });
  const form = h(
    "form",
    {
      class: "login",
      onsubmit: (e: Event) => {
        e.preventDefault();
        if (!input.value.trim()) return;
        setToken(input.value);
        input.value = "";
        loginReason = "";
        if (!location.hash.startsWith("#/")) location.hash = "#/tasks";
        void show(true);
      },
    },
    h("label", { for: "token" }, "Token"),
    h(
      "p",
      { class: "muted small", id: "token-help" },
      "Paste a token (for development: ",
      h("code", null, "agentmesh token --role operator"),
      "). It is kept in this tab only and sent to the agentmesh services only.",
    ),
    input,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  input.setAttribute("aria-describedby", "token-help");
  const oidc = config.oidc;
  replace(
    main,
    h("h1", { tabindex: -1 }, "Sign in"),
    loginReason ? h("p", { class: "problem", role: "alert" }, userText(loginReason)) : null,
    oidc
      ? h(
          "p",
          null,
          h(
            "button",
            { type: "button", class: "primary", onclick: () => void beginOidcLogin(oidc) },
            "Sign in with ",
            userText(new URL(oidc.issuer).host),
          ),
        )
      : null,
    form,
  );
  (main.querySelector("h1") as HTMLElement).focus();
}

let config: ConsoleConfig;
let api: Api;

/** Shows the route's page; `moveFocus` (a navigation inside the console) puts focus on its heading, so a
 * screen reader announces the new page (a first load leaves focus at the top: Tab reaches the skip link). */
async function show(moveFocus = false): Promise<void> {
  current?.abort();
  current = null;
  if (!currentToken()) {
    loginPage(config);
    return;
  }
  const hash = location.hash.startsWith("#/") ? location.hash : "#/tasks";
  const { path, query } = routeOf(hash);
  let page: Page | undefined;
  let params: string[] = [];
  for (const candidate of PAGES) {
    const match = candidate.pattern.exec(path);
    if (match) {
      page = candidate;
      params = match.slice(1);
      break;
    }
  }
  drawNav(page ?? null);
  const controller = new AbortController();
  current = controller;
  main.replaceChildren();
  if (page === undefined) {
    document.title = "Not found · agentmesh console";
    replace(main, h("h1", { tabindex: -1 }, "No such page"), h("p", null, "This address names no page of the console."));
    (main.querySelector("h1") as HTMLElement).focus();
    return;
  }
  document.title = `${page.title} · agentmesh console`;
  const subject = claims(currentToken())?.subject ?? "";
  await page.render({ api, config, main, signal: controller.signal, params, query, subject });
  if (moveFocus && !controller.signal.aborted) (main.querySelector("h1") as HTMLElement | null)?.focus({ preventScroll: true });
}

async function boot(): Promise<void> {
  try {
    config = await loadConfig();
  } catch (err) {
    replace(main, h("h1", null, "The console cannot start"), h("p", { role: "alert" }, String(err)));
    return;
  }
  restoreToken();
  try {
    const route = await completeOidcLogin(config.oidc);
    if (route !== null) location.hash = route;
  } catch (err) {
    forget();
    loginReason = err instanceof Error ? err.message : String(err);
  }
  api = makeApi(config, (reason) => {
    if (!currentToken()) return;
    forget();
    loginReason = `Your token was refused: ${reason}`;
    announce(loginReason);
    void show();
  });
  // The skip link moves focus without touching the route in the address bar.
  document.getElementById("skip")?.addEventListener("click", (event) => {
    event.preventDefault();
    main.focus();
  });
  window.addEventListener("hashchange", () => {
    if (location.hash === "" || location.hash.startsWith("#/")) void show(true);
  });
  await show();
}

void boot();
