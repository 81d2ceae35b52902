// Building the page safely. Every text the console shows (goals, answers, tool output, arguments, ids,
// error messages) enters the DOM as a text node: there is no innerHTML, no insertAdjacentHTML and no
// href built from data anywhere in the console, so a model's `<script>` or `javascript:` link is just
// characters. Bidirectional controls (a right-to-left override hiding what an argument says) are shown
// as visible markers, and user text is isolated (`dir=auto`, `unicode-bidi: isolate`) so it cannot
// reorder the page around it.

type Child = Node | string | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | ((event: Event) => void)>;

// Attributes that could load or run something: refused outright (links go through `link`).
const FORBIDDEN_ATTRIBUTES = /^(on|href$|src$|srcdoc$|formaction$|action$|style$|xlink:)/i;

/** An element with attributes (strings, numbers, booleans; `on*` only as listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs | null = null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === "function") {
      if (!name.startsWith("on")) throw new Error(`listener on attribute ${name}`);
      element.addEventListener(name.slice(2).toLowerCase(), value);
      continue;
    }
    if (FORBIDDEN_ATTRIBUTES.test(name)) throw new Error(`attribute ${name} is not set by h()`);
    element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, ...children);
  return element;
}

/** Appends children: strings become text nodes (never markup). */
export function append(parent: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
}

/** Replaces an element's children. */
export function replace(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, ...children);
}

/** A link inside the console: `#/...` only. */
export function link(route: string, ...children: Child[]): HTMLAnchorElement {
  if (!route.startsWith("#/")) throw new Error(`not a console route: ${route}`);
  const a = h("a", null, ...children);
  a.href = route;
  return a;
}

/** A link out of the console to a configured http(s) URL (the Jaeger UI), opened without a referrer. */
export function externalLink(url: string, ...children: Child[]): HTMLAnchorElement | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  if (parsed.protocol !== "https:" && parsed.protocol !== "http:") return null;
  const a = h("a", { rel: "noopener noreferrer", target: "_blank" }, ...children);
  a.href = parsed.href;
  return a;
}

// Bidi controls and other invisible format characters: LRM/RLM, ALM, embeddings and overrides,
// isolates, zero-width characters and the BOM.
const INVISIBLE = /[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;

/** `text` with every bidi control or invisible format character shown as a marker like ⟨U+202E⟩. */
export function reveal(text: string): string {
  return text.replace(INVISIBLE, (c) => `⟨U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}⟩`);
}

/** A span of untrusted text: revealed, isolated, direction from its own content. */
export function userText(text: string, className = ""): HTMLSpanElement {
  return h("span", { class: `user-text ${className}`.trim(), dir: "auto" }, reveal(text));
}

/** Display size of a text: "812 B", "1.0 MB". */
export function size(chars: number): string {
  if (chars < 1000) return `${chars} B`;
  if (chars < 1_000_000) return `${(chars / 1000).toFixed(1)} kB`;
  return `${(chars / 1_000_000).toFixed(1)} MB`;
}

export const CLAMP_CHARS = 4000;

/** A block of untrusted text (tool output, a prompt, an answer): the first CLAMP_CHARS characters, and a
 * button that shows the rest on demand (a 1 MB line must not freeze the page or widen it). */
export function textBlock(text: string, label: string, className = ""): HTMLElement {
  const pre = h("pre", { class: `text-block user-text ${className}`.trim(), dir: "auto", tabindex: 0 });
  pre.setAttribute("aria-label", label);
  const box = h("div", { class: "text-box" }, pre);
  if (text.length <= CLAMP_CHARS) {
    pre.textContent = reveal(text);
    return box;
  }
  pre.textContent = `${reveal(text.slice(0, CLAMP_CHARS))}…`;
  const more = h(
    "button",
    {
      type: "button",
      class: "secondary small",
      onclick: () => {
        pre.textContent = reveal(text);
        more.remove();
        pre.focus();
      },
    },
    `Show all ${label.toLowerCase()} (${size(text.length)})`,
  );
  box.append(more);
  return box;
}

/** JSON text pretty-printed when it parses (else as it is), invisible characters escaped as \uXXXX so
 * what an approver reads is what the tool receives. */
export function prettyJson(raw: string): string {
  let shown = raw;
  try {
    shown = JSON.stringify(JSON.parse(raw), null, 2);
  } catch {
    return raw;
  }
  return shown.replace(INVISIBLE, (c) => `\\u${c.codePointAt(0)!.toString(16).padStart(4, "0")}`);
}

const timeFormat = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
  timeZoneName: "short",
});

/** A <time> in the viewer's time zone; the UTC instant in its title and datetime. */
export function time(date: Date | undefined): HTMLElement {
  if (date === undefined || Number.isNaN(date.getTime()) || date.getTime() === 0) {
    return h("span", { class: "muted" }, "—");
  }
  const iso = date.toISOString();
  return h("time", { datetime: iso, title: iso }, timeFormat.format(date));
}

/** "in 4 min", "12 s ago". */
export function relative(date: Date, now = Date.now()): string {
  const seconds = Math.round((date.getTime() - now) / 1000);
  const abs = Math.abs(seconds);
  const value = abs < 90 ? `${abs} s` : abs < 5400 ? `${Math.round(abs / 60)} min` : `${Math.round(abs / 3600)} h`;
  return seconds >= 0 ? `in ${value}` : `${value} ago`;
}

let copyNotice: HTMLElement | null = null;

/** The live region that announces copies and other short notices to screen readers. */
export function notices(): HTMLElement {
  copyNotice ??= document.getElementById("notices");
  return copyNotice as HTMLElement;
}

/** Announces a short notice (aria-live region; also visible for a moment). */
export function announce(text: string): void {
  const region = notices();
  region.textContent = text;
}

/** A button that copies `id` (the clipboard API where the page is a secure context, else `fallback`'s
 * text is selected for Ctrl+C). */
export function copyButton(id: string, what: string, fallback?: HTMLElement): HTMLButtonElement {
  return h(
    "button",
    {
      type: "button",
      class: "copy",
      title: `Copy ${what}`,
      "aria-label": `Copy ${what} ${id}`,
      onclick: async () => {
        try {
          await navigator.clipboard.writeText(id);
          announce(`Copied ${what} ${id}`);
        } catch {
          if (fallback === undefined) {
            announce(`Copying needs a secure context (https or localhost): ${id}`);
            return;
          }
          const range = document.createRange();
          range.selectNodeContents(fallback);
          const selection = window.getSelection();
          selection?.removeAllRanges();
          selection?.addRange(range);
          announce(`Selected ${what}: press Ctrl+C to copy`);
        }
      },
    },
    "copy",
  );
}

/** An id in monospace with a button that copies it. */
export function copyableId(id: string, what: string): HTMLElement {
  const code = h("code", { class: "id", dir: "ltr" }, reveal(id));
  return h("span", { class: "id-wrap" }, code, copyButton(id, what, code));
}
