// Loads a page in Debian's headless Chromium with playwright-core and prints, as one JSON line, what the
// page wrote into #status once it set data-done (and the events it listed).
//   node drive.mjs <url> <chromium> <user-data-dir>
import { chromium } from "playwright-core";

const [url, executablePath, userDataDir] = process.argv.slice(2);
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const console_ = [];
  page.on("console", (message) => console_.push(message.text()));
  await page.goto(url);
  await page.waitForSelector("#status[data-done]", { timeout: 90_000 });
  const status = await page.textContent("#status");
  const events = await page.$$eval("#events li", (items) => items.map((item) => item.textContent));
  console.log(JSON.stringify({ status, events, console: console_ }));
} finally {
  await context.close();
}
