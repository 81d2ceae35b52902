// Drives Debian's headless Chromium with playwright-core for the console's browser tests
// (tests/console/browser.py): one JSON command a line on stdin, one JSON answer a line on stdout.
// Each "context" is a separate browser profile (its own sessionStorage): one per operator.
//   node driver.mjs <chromium> <axe.min.js>
// Commands: {op: "open", ctx, viewport: [w, h], timezone, locale} | {op: "goto", ctx, url}
//   | {op: "click"|"fill"|"press"|"wait"|"text"|"count"|"eval"|"screenshot"|"axe"|"log"|"close", ctx, ...}
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const [executablePath, axePath] = process.argv.slice(2);
const axeSource = readFileSync(axePath, "utf8");
const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--font-render-hinting=none"],
});
const contexts = new Map();

// Recorded in every page before its own scripts: CSP violations, layout shifts not caused by input,
// and whether any hostile script ran (it would set window.__pwned).
const INIT = `
  window.__csp = [];
  document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
  window.__shifts = [];
  try {
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) if (!entry.hadRecentInput) window.__shifts.push(entry.value);
    }).observe({ type: "layout-shift", buffered: true });
  } catch (e) {}
`;

async function open({ ctx, viewport = [1280, 800], timezone = "UTC", locale = "en-US" }) {
  const context = await browser.newContext({
    viewport: { width: viewport[0], height: viewport[1] },
    timezoneId: timezone,
    locale,
    reducedMotion: "reduce",
  });
  await context.grantPermissions(["clipboard-read", "clipboard-write"]);
  await context.addInitScript(INIT);
  const page = await context.newPage();
  const log = [];
  page.on("console", (m) => log.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
  contexts.set(ctx, { context, page, log });
  return {};
}

const TIMEOUT = 20_000;

async function run(cmd) {
  if (cmd.op === "open") return open(cmd);
  const entry = contexts.get(cmd.ctx);
  if (!entry) throw new Error(`no context ${cmd.ctx}`);
  const { page } = entry;
  switch (cmd.op) {
    case "goto":
      await page.goto(cmd.url, { waitUntil: "load" });
      return {};
    case "reload":
      await page.reload({ waitUntil: "load" });
      return {};
    case "click":
      await page.click(cmd.selector, { timeout: cmd.timeout ?? TIMEOUT });
      return {};
    case "fill":
      await page.fill(cmd.selector, cmd.value, { timeout: TIMEOUT });
      return {};
    case "select":
      await page.selectOption(cmd.selector, cmd.value, { timeout: TIMEOUT });
      return {};
    case "press":
      if (cmd.selector) await page.press(cmd.selector, cmd.key, { timeout: TIMEOUT });
      else await page.keyboard.press(cmd.key);
      return {};
    case "wait": {
      // A selector, optionally until its text contains `text`.
      const timeout = cmd.timeout ?? TIMEOUT;
      if (cmd.text === undefined) {
        await page.waitForSelector(cmd.selector, { timeout, state: cmd.state ?? "visible" });
      } else {
        await page.waitForFunction(
          ([selector, text]) => [...document.querySelectorAll(selector)].some((e) => (e.textContent ?? "").includes(text)),
          [cmd.selector, cmd.text],
          { timeout, polling: 100 },
        );
      }
      return {};
    }
    case "until": {
      // An expression that becomes true, polled from here: waitForFunction with a string would eval it
      // inside the page, which the console's CSP forbids.
      const deadline = Date.now() + (cmd.timeout ?? TIMEOUT);
      while (!(await page.evaluate(cmd.expression))) {
        if (Date.now() > deadline) throw new Error(`still false: ${cmd.expression}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return {};
    }
    case "text":
      return { value: await page.$$eval(cmd.selector, (els) => els.map((e) => e.textContent ?? "")) };
    case "count":
      return { value: await page.locator(cmd.selector).count() };
    case "eval":
      return { value: await page.evaluate(cmd.expression) };
    case "screenshot": {
      const options = { path: cmd.path, animations: "disabled", caret: "hide" };
      if (cmd.selector) await page.locator(cmd.selector).screenshot(options);
      else await page.screenshot({ ...options, fullPage: cmd.fullPage ?? false });
      return {};
    }
    case "axe": {
      // Evaluated through the DevTools protocol: the page's CSP (no inline or eval'd script) does not apply.
      if (!(await page.evaluate("typeof window.axe !== 'undefined'"))) await page.evaluate(axeSource);
      const result = await page.evaluate(() =>
        window.axe.run(document, { resultTypes: ["violations"], runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] } }),
      );
      return {
        value: result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) })),
      };
    }
    case "log":
      return { value: entry.log.splice(0) };
    case "close":
      await entry.context.close();
      contexts.delete(cmd.ctx);
      return {};
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const cmd = JSON.parse(line);
  try {
    const answer = await run(cmd);
    process.stdout.write(JSON.stringify({ ok: true, ...answer }) + "\n");
  } catch (err) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(err?.message ?? err).slice(0, 4000) }) + "\n");
  }
}
await browser.close();
