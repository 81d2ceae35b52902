// What a page is, and what it is given. The console's pages are listed in pages.ts; a page is registered
// there once the RPCs it reads exist in the protos (no placeholder pages).

import type { Api } from "./api";
import type { ConsoleConfig } from "./config";

export interface PageContext {
  api: Api;
  config: ConsoleConfig;
  /** The page's <main>, emptied for it. */
  main: HTMLElement;
  /** Aborted when the viewer leaves the page: pass it to every call and stream, stop timers on it. */
  signal: AbortSignal;
  /** The pattern's capture groups (e.g. a task id). */
  params: string[];
  /** The route's query (after "?"), e.g. the Tasks page's filters. */
  query: URLSearchParams;
  /** The subject the token names (display only), "" when unknown. */
  subject: string;
}

export interface Page {
  /** Also the first path segment: `#/<id>`. */
  id: string;
  title: string;
  /** Listed in the navigation (the Task page is reached from Tasks, not listed). */
  nav: boolean;
  /** Matches the route after "#", without the query, e.g. /^\/tasks\/([^/]+)$/. */
  pattern: RegExp;
  render(context: PageContext): void | Promise<void>;
}

/** Calls `tick` now and every `ms` while the page is shown and the tab visible; stops with `signal`. */
export function every(ms: number, signal: AbortSignal, tick: () => Promise<void> | void): void {
  let running = false;
  const run = async () => {
    if (running || signal.aborted || document.visibilityState === "hidden") return;
    running = true;
    try {
      await tick();
    } finally {
      running = false;
    }
  };
  const timer = window.setInterval(run, ms);
  const onVisible = () => {
    if (document.visibilityState === "visible") void run();
  };
  document.addEventListener("visibilitychange", onVisible);
  signal.addEventListener("abort", () => {
    window.clearInterval(timer);
    document.removeEventListener("visibilitychange", onVisible);
  });
}
