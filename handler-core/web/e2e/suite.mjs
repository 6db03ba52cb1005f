// The web UI's browser suite (issue 17): Debian's chromium through playwright-core against the
// handlerd that bins/tests/it/web_ui.rs started (HANDLER_URL, HANDLER_TOKEN, HANDLER_SCOPE).
// Prints one JSON summary line last: {passed: [...], bundleGzipBytes, firstSessionRenderMs}.
// Screenshots of the main pages go to HANDLER_UI_SCREENSHOTS when set (docs/ui/).
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync, readdirSync, readFileSync, mkdirSync, writeFileSync, chownSync, statSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { gzipSync } from "node:zlib";
import assert from "node:assert/strict";

const URL_ = process.env.HANDLER_URL;
const TOKEN = process.env.HANDLER_TOKEN;
const SCOPE = process.env.HANDLER_SCOPE;
const SHOTS = process.env.HANDLER_UI_SCREENSHOTS || "";
// Generous: CI runs every test at once on 2 cores, and a step may start a sandbox.
const T = 60_000;
const passed = [];
const step = async (name, f) => {
  const t0 = Date.now();
  await f();
  passed.push(name);
  console.error(`ok ${name} (${Date.now() - t0} ms)`);
};

const dir = mkdtempSync(join(tmpdir(), "handler-ui-"));
const ctx = await chromium.launchPersistentContext(dir, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  viewport: { width: 1280, height: 860 },
});
ctx.setDefaultTimeout(T);
const urls = [];
ctx.on("request", (r) => urls.push(r.url()));
const wsUrls = [];
const consoleErrors = [];
const watch = (p) => {
  p.on("websocket", (w) => wsUrls.push(w.url()));
  p.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
};
ctx.on("page", watch);
const shot = async (page, name) => {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: false });
};
const api = async (method, path, body) => {
  const r = await fetch(`${URL_}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  return r.status === 204 ? null : r.json();
};

let exit = 0;
try {
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  watch(page);
  let sessionUrl = "";

  await step("the token is taken from the fragment and the CSP refuses an inline script", async () => {
    const res = await page.goto(`${URL_}/#token=${TOKEN}`);
    await page.getByRole("heading", { name: "Projects" }).waitFor();
    // HANDLER_UI_DEV=1: against `npm run dev` (no CSP there), while changing the UI.
    if (process.env.HANDLER_UI_DEV === "1") return;
    const csp = res.headers()["content-security-policy"] ?? "";
    assert.match(csp, /script-src 'self'/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.equal(res.headers()["x-content-type-options"], "nosniff");
    await page.getByRole("heading", { name: "Projects" }).waitFor();
    assert.ok(!page.url().includes(TOKEN), `the token stays in the address bar: ${page.url()}`);
    const refused = await page.evaluate(() => new Promise((ok) => {
      document.addEventListener("securitypolicyviolation", (e) => ok(e.violatedDirective), { once: true });
      const s = document.createElement("script");
      s.textContent = "window.__inlineRan = true";
      document.body.append(s);
      setTimeout(() => ok(window.__inlineRan ? "ran" : "no event"), 3000);
    }));
    assert.match(String(refused), /^script-src/, `inline script: ${refused}`);
    assert.equal(await page.evaluate(() => window.__inlineRan), undefined);
  });

  await step("handler ui's one-time code: exchanged for the token, gone from the URL, refused a second time", async () => {
    const { code } = await api("POST", "/v1/ui/code", {});
    assert.match(code, /^[0-9a-f]{32}$/);
    // A new tab: its own sessionStorage, no token yet.
    const tab = await ctx.newPage();
    await tab.goto(`${URL_}/#code=${code}`);
    await tab.getByRole("heading", { name: "Projects" }).waitFor();
    assert.ok(!tab.url().includes(code), `the code stays in the address bar: ${tab.url()}`);
    assert.equal(await tab.evaluate(() => sessionStorage.getItem("handler.token")), TOKEN);
    await tab.close();
    // Used once: another tab with the same URL gets no token and asks for one.
    const tab2 = await ctx.newPage();
    await tab2.goto(`${URL_}/#code=${code}`);
    await tab2.getByText("paste the daemon's token").waitFor();
    assert.equal(await tab2.evaluate(() => sessionStorage.getItem("handler.token")), null);
    await tab2.close();
  });

  await step("a project from the Locked down preset, with its first agent", async () => {
    await page.getByRole("button", { name: "New project" }).click();
    const form = page.getByRole("form", { name: "New project" });
    // D.13: the folder picker suggests the folders of what is typed, inside the work folders.
    const work = SCOPE.replace(/\/app$/, "");
    await form.getByLabel("Folder", { exact: true }).fill(`${work}/a`);
    await page.waitForFunction((want) => [...document.querySelectorAll("datalist#project-folders option")].some((o) => o.value === want), SCOPE);
    await form.getByLabel("Folder", { exact: true }).fill(SCOPE);
    // Its first agent's model: an account or a provider (none yet here); its caches its own.
    assert.match(await form.getByLabel("Model", { exact: true }).inputValue(), /^account:/);
    assert.equal(await form.getByLabel("Caches").inputValue(), "project");
    await form.getByLabel("Name (default: the folder's)").fill("Web app");
    await form.getByLabel("Locked down").check();
    await shot(page, "projects-new");
    await form.getByRole("button", { name: "Create project" }).click();
    await page.getByRole("heading", { name: "Web app" }).waitFor();
    await page.getByText("network: none").waitFor();
    await page.getByText("permissions: ask").waitFor();
    await shot(page, "project");
  });

  await step("widening the agent shows the risks and saves once confirmed", async () => {
    await page.getByRole("link", { name: "Edit" }).click();
    await page.getByLabel("Permissions").selectOption("bypass");
    await shot(page, "agent-form");
    await page.getByRole("button", { name: "Save", exact: true }).click();
    const risks = page.getByRole("alert", { name: "Risks" });
    await risks.waitFor();
    assert.match(await risks.innerText(), /bypass/i);
    await shot(page, "agent-risks");
    await risks.getByRole("button", { name: "Confirm and save" }).click();
    await page.getByText("permissions: bypass").waitFor();
    // A.6: the display toggle is saved, with what it gives said; nested says its warning too.
    await page.getByRole("link", { name: "Edit" }).click();
    await page.getByLabel("Confinement").selectOption("nested");
    await page.getByRole("note").getByText("Nested: the agent runs containers of its own").waitFor();
    await page.getByLabel("Confinement").selectOption("strict");
    await page.getByLabel("Show windows on my screen and paste images").check();
    await page.getByRole("note").getByText("Its sandboxes draw on your screen").waitFor();
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByText("permissions: bypass").waitFor();
    const project = (await api("GET", "/v1/projects"))[0];
    const shown = (await api("GET", `/v1/agents?project=${project.id}`)).find((a) => a.display);
    assert.ok(shown, "the agent was saved with display");
    // Taken back: the next steps' sessions run where there is no Wayland display.
    await page.getByRole("link", { name: "Edit" }).click();
    await page.getByLabel("Show windows on my screen and paste images").uncheck();
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByText("permissions: bypass").waitFor();
    assert.equal((await api("GET", `/v1/agents/${shown.id}`)).display ?? false, false);
    // Decision 0154: "Start from my own settings" saved with what it copies said.
    await page.getByRole("link", { name: "Edit" }).click();
    await page.getByLabel("Start from my own settings").check();
    await page.getByRole("note").getByText("never a login or a key").waitFor();
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByText("permissions: bypass").waitFor();
    assert.equal((await api("GET", `/v1/agents/${shown.id}`)).seedState, true);
  });

  let firstRenderMs = 0;
  let reloadRenderMs = 0;
  await step("a session: a prompt, streamed text and a tool call", async () => {
    const t0 = Date.now();
    await page.getByRole("button", { name: "New session" }).click();
    await page.waitForSelector("body[data-session-ready]");
    firstRenderMs = Date.now() - t0;
    sessionUrl = page.url();
    const box = page.getByLabel(/^Message/);
    await box.fill("hello from the browser");
    await box.press("Enter");
    await page.locator(".msg.agent", { hasText: "hello from the browser" }).waitFor();
    await box.fill("write:README.md=new text from the agent");
    await box.press("Enter");
    const card = page.getByLabel("Tool call Write README.md");
    await card.getByText("completed").waitFor();
    await card.getByText("new text from the agent").first().waitFor();
    // An edit's diff is open: its file's name and each line's numbers (earlier file, new file).
    const diff = card.getByRole("figure", { name: /^Diff of .*README\.md$/ });
    await diff.locator(".added", { hasText: "new text from the agent" }).waitFor();
    assert.deepEqual(
      await diff.locator(".added .ln").allTextContents(),
      ["", "1"],
      "an added line has no earlier number and its new one",
    );
  });

  await step("agent output is sanitized markdown: raw HTML as text, only safe links", async () => {
    const box = page.getByLabel(/^Message/);
    await box.fill('**bold** <img src=x onerror="window.__xss=1"> [bad](javascript:window.__xss=2) [good](https://example.com/)');
    await box.press("Enter");
    const msg = page.locator(".msg.agent", { hasText: "bold" }).last();
    await msg.locator("strong", { hasText: "bold" }).waitFor();
    assert.equal(await msg.locator("img").count(), 0);
    assert.match(await msg.innerText(), /<img src=x/);
    assert.equal(await msg.locator('a[href^="javascript"]').count(), 0);
    const good = msg.getByRole("link", { name: "good" });
    assert.equal(await good.getAttribute("rel"), "noopener noreferrer");
    assert.equal(await page.evaluate(() => window.__xss), undefined);
  });

  await step("the Files pane shows the change and its earlier version", async () => {
    await page.getByRole("button", { name: /^Files \(/ }).click();
    const pane = page.getByRole("region", { name: "Files" });
    await pane.getByRole("list", { name: "Changed files" }).getByRole("button", { name: "README.md" }).click();
    const diff = pane.getByLabel("Changes of the file");
    await diff.locator(".removed", { hasText: "old text" }).waitFor();
    await diff.locator(".added", { hasText: "new text from the agent" }).waitFor();
    await shot(page, "session-files");
    await pane.getByRole("tab", { name: "All files" }).click();
    await pane.getByRole("list", { name: "All files" }).getByText("notes.txt").waitFor();
  });

  await step("@ in the composer names a file of the folder", async () => {
    const box = page.getByLabel(/^Message/);
    await box.fill("");
    await box.pressSequentially("look at @note");
    const list = page.getByRole("listbox", { name: "Files" });
    await list.getByRole("option", { name: "notes.txt" }).waitFor();
    await box.press("Enter");
    assert.equal(await box.inputValue(), "look at @notes.txt ");
    await box.fill("");
  });

  await step("reload while a permission waits: the prompt is there, answered, the turn completes", async () => {
    const box = page.getByLabel(/^Message/);
    await box.fill("ask: may I run the tests?");
    await box.press("Enter");
    await page.getByRole("group", { name: "Permission request" }).waitFor();
    await shot(page, "session-permission");
    const r0 = Date.now();
    await page.reload();
    await page.waitForSelector("body[data-session-ready]");
    reloadRenderMs = Date.now() - r0;
    const prompt = page.getByRole("group", { name: "Permission request" });
    await prompt.getByText("ask: may I run the tests?").waitFor();
    await page.locator(".msg.agent", { hasText: "hello from the browser" }).waitFor();
    await prompt.getByRole("button", { name: "Allow" }).click();
    await page.locator(".msg.agent", { hasText: 'answered "yes"' }).waitFor();
    await page.getByRole("button", { name: "Send" }).and(page.locator(":enabled")).waitFor();
  });

  await step("two tabs see the same prompt; the first answer wins, the other's is withdrawn", async () => {
    const second = await ctx.newPage();
    await second.goto(`${URL_}/#token=${TOKEN}`);
    await second.getByRole("heading", { name: "Projects" }).waitFor();
    await second.goto(sessionUrl);
    await second.waitForSelector("body[data-session-ready]");
    const box = page.getByLabel(/^Message/);
    await box.fill("ask: both tabs?");
    await box.press("Enter");
    const p1 = page.getByRole("group", { name: "Permission request" });
    const p2 = second.getByRole("group", { name: "Permission request" });
    await p1.waitFor();
    await p2.waitFor();
    await p2.getByRole("button", { name: "Reject" }).click();
    await p1.waitFor({ state: "detached" });
    await page.locator(".msg.agent", { hasText: 'answered "no"' }).waitFor();
    await second.close();
  });

  await step("the network panel shows the agent's network", async () => {
    await page.getByRole("button", { name: "Network" }).click();
    await page.getByRole("region", { name: "Network" }).getByText("Network none").waitFor();
  });

  await step("the model selector (configOptions) and the Files pane's Access tab", async () => {
    const model = page.getByLabel("Model");
    assert.equal(await model.inputValue(), "fake-small");
    await model.selectOption("fake-large");
    const files = page.getByRole("region", { name: "Files" });
    if (!(await files.isVisible())) await page.getByRole("button", { name: /^Files/ }).click();
    await files.getByRole("tab", { name: "Access" }).click();
    const scope = files.getByRole("list", { name: "Mounts" }).locator("li[data-kind=scope]");
    await scope.getByText("can change").waitFor();
    await shot(page, "session-files-access");
    // A second tab gets the model chosen (the daemon's configOptions in its session/load).
    const other = await ctx.newPage();
    await other.goto(`${URL_}/#token=${TOKEN}`);
    await other.getByRole("heading", { name: "Projects" }).waitFor();
    await other.goto(sessionUrl);
    await other.waitForSelector("body[data-session-ready]");
    assert.equal(await other.getByLabel("Model").inputValue(), "fake-large");
    await other.close();
  });

  await step("stop, then resume from the project's page with the history", async () => {
    await page.getByRole("button", { name: "Stop session" }).click();
    await page.getByLabel("State").getByText("stopped").waitFor();
    await page.getByRole("link", { name: "Project", exact: true }).click();
    await page.getByRole("heading", { name: "Past sessions" }).waitFor();
    await page.getByRole("link", { name: "Resume" }).first().click();
    await page.waitForSelector("body[data-session-ready]");
    await page.locator(".msg.agent", { hasText: "hello from the browser" }).waitFor();
    await page.getByLabel("State").getByText("running").waitFor();
  });

  let longReplayMs = 0;
  let longReplayMeasureMs = 0;
  let longReplaySplit = null;
  await step("a long session: 10 001 updates replayed, tool calls folded, keys, the sessions beside it", async () => {
    const resumedUrl = page.url();
    await page.getByRole("link", { name: "Project", exact: true }).click();
    await page.getByRole("button", { name: "New session" }).click();
    await page.waitForSelector("body[data-session-ready]");
    const box = page.getByLabel(/^Message/);
    // 5 000 tool calls, each announced then completed, and the context's usage: 10 001 updates.
    await box.fill("tools:5000");
    await box.press("Enter");
    await page.getByRole("button", { name: "Send" }).and(page.locator(":enabled")).waitFor({ timeout: 120_000 });
    const log = page.getByRole("log", { name: "Transcript" });
    // The prompt, the agent's echo of it, then one entry per tool call (its update merged in).
    await page.waitForFunction(() => document.querySelector('[aria-label="Transcript"]')?.getAttribute("data-entries") === "5002");
    // Replayed on reload: timed to the page's ready mark, the transcript in the page.
    const r0 = Date.now();
    await page.reload();
    await page.waitForSelector("body[data-session-ready]");
    longReplayMs = Date.now() - r0;
    longReplayMeasureMs = await page.evaluate(() => performance.getEntriesByName("handler:first-session-render").at(-1)?.duration ?? -1);
    // Where the replay's time goes: the page's start to the attachment's socket open, to the
    // first replayed update, to session/load's answer (every update in), to the page rendered.
    longReplaySplit = await page.evaluate(() => {
      const at = (n) => Math.round(performance.getEntriesByName(n).at(-1)?.startTime ?? -1);
      const r = performance.getEntriesByName("handler:first-session-render").at(-1);
      return { open: at("handler:attach-open"), firstUpdate: at("handler:first-update"), loaded: at("handler:loaded"), rendered: Math.round((r?.startTime ?? 0) + (r?.duration ?? 0)) };
    });
    assert.equal(await log.getAttribute("data-entries"), "5002", "the replay gives the same transcript");
    // The same replay read by a bare WebSocket in the page (no ACP SDK, no rendering): what the
    // daemon and the socket cost alone.
    const sid = page.url().split("/sessions/")[1];
    const rec = await api("GET", `/v1/sessions/${sid}`);
    longReplaySplit.bareSocket = await page.evaluate(async ([sid, acpId, cwd, token]) => {
      const t0 = performance.now();
      const ws = new WebSocket(`ws://${location.host}/v1/sessions/${sid}/acp`, ["acp.v1", `bearer.${token}`]);
      let updates = 0;
      await new Promise((ok, fail) => {
        ws.onopen = () => {
          ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } }));
          ws.send(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "session/load", params: { sessionId: acpId, cwd, mcpServers: [] } }));
        };
        ws.onmessage = (e) => {
          const m = JSON.parse(e.data);
          if (m.method === "session/update") updates++;
          if (m.id === 2) ok();
        };
        ws.onclose = (e) => fail(new Error(`closed ${e.code}`));
      });
      ws.close(1000);
      return { ms: Math.round(performance.now() - t0), updates };
    }, [sid, rec.acpSessionId, rec.scope, TOKEN]);
    // Only the newest entries are in the page; the earlier ones come on request.
    const inPage = await log.locator('[data-kind="tool"]').count();
    assert.ok(inPage > 0 && inPage < 1000, `${inPage} tool calls in the page`);
    await log.getByRole("button", { name: /^Show earlier \(\d+\)$/ }).waitFor();
    // A read is folded (kind and status in its summary), an edit shows its diff with line numbers.
    const read = log.getByLabel("Tool call Read notes/f4999.txt", { exact: true });
    assert.equal(await read.evaluate((d) => d.open), false, "a read is folded");
    await read.locator("summary").getByText("read", { exact: true }).waitFor();
    await read.locator("summary").getByText("completed").waitFor();
    await read.locator("summary").getByText("f4999.txt:2").waitFor();
    await read.locator("summary").click();
    assert.equal(await read.evaluate((d) => d.open), true, "opened on a click");
    const edit = log.getByLabel("Tool call Edit notes/f5000.txt", { exact: true });
    const diff = edit.getByRole("figure", { name: "Diff of notes/f5000.txt" });
    const changed = diff.locator(".added", { hasText: "5000" });
    assert.equal(await changed.locator(".ln").nth(1).textContent(), "2", "the new line's number");
    await page.getByRole("status", { name: "Context usage" }).getByText("6.0k / 200k tokens").waitFor();
    await shot(page, "session-long");
    // Scrolling up to "Show earlier" brings the earlier entries in.
    await log.getByRole("button", { name: /^Show earlier/ }).scrollIntoViewIfNeeded();
    await page.waitForFunction((n) => document.querySelectorAll('[aria-label="Transcript"] [data-kind="tool"]').length > n, inPage);
    // ↑ in the empty composer brings the last prompt back; Esc cancels a turn.
    await box.click();
    await box.press("ArrowUp");
    assert.equal(await box.inputValue(), "tools:5000");
    await box.fill("ask: may I go on?");
    await box.press("Enter");
    const asked = page.getByRole("group", { name: "Permission request" });
    await asked.waitFor();
    await page.getByLabel("State").getByText("running, working").waitFor();
    await box.press("Escape");
    await page.getByRole("button", { name: "Send" }).and(page.locator(":enabled")).waitFor();
    await asked.waitFor({ state: "detached" });
    // The project's sessions beside it: this one current, each with its state light.
    const nav = page.getByRole("navigation", { name: "Sessions" });
    const current = nav.locator('a[aria-current="page"]');
    await current.waitFor();
    assert.equal(await current.locator(".light").getAttribute("data-state"), "idle");
    assert.ok((await nav.getByRole("link").count()) >= 2, "the earlier session is listed too");
    await page.goto(resumedUrl);
    await page.waitForSelector("body[data-session-ready]");
  });

  await step("settings: accounts with tokens by reference, images, a secret set and never shown", async () => {
    await page.getByRole("link", { name: "Settings" }).click();
    const accounts = page.getByRole("list", { name: "Accounts" });
    await accounts.getByText("perso").waitFor();
    await accounts.getByRole("listitem").filter({ hasText: "perso" }).getByText("token pasted (in the secret store)").waitFor();
    // D.9: a token where the person keeps it — a command on a new account, then a bad variable
    // refused next to the field with the API's detail, then a file.
    const add = page.getByRole("form", { name: "New account" });
    await add.getByLabel("Name").fill("reffed");
    await add.getByLabel("Harness").selectOption("fake");
    await add.getByLabel("Where the token is").selectOption("command");
    await add.getByLabel("Command printing it").fill("pass show claude-pro");
    await add.getByRole("button", { name: "Add account" }).click();
    const card = accounts.getByRole("listitem").filter({ hasText: "reffed" });
    await card.getByText("token from the command pass show claude-pro").waitFor();
    await card.getByRole("button", { name: "Token…" }).click();
    const tf = card.getByRole("form", { name: "Token of reffed" });
    assert.equal(await tf.getByLabel("Where the token is").inputValue(), "command");
    await tf.getByLabel("Where the token is").selectOption("env");
    await tf.getByLabel("Environment variable of handlerd").fill("NOT A VAR");
    await tf.getByRole("button", { name: "Set token" }).click();
    await tf.getByRole("alert").getByText('token.env: "NOT A VAR" is not an environment variable name').waitFor();
    await tf.getByLabel("Where the token is").selectOption("file");
    // The file must be there: the daemon checks it at save (a regular file of at most 1 MiB),
    // made as the daemon's user beside the scope (it cannot read the suite's own folders).
    const owner = statSync(SCOPE);
    const tokenFile = join(dirname(SCOPE), "claude-token");
    writeFileSync(tokenFile, "sk-file-token\n", { mode: 0o600 });
    chownSync(tokenFile, owner.uid, owner.gid);
    await tf.getByLabel("File (its first line)").fill(tokenFile);
    await shot(page, "settings-accounts-token");
    await tf.getByRole("button", { name: "Set token" }).click();
    await card.getByText(`token from the file ${tokenFile}`).waitFor();
    assert.deepEqual((await api("GET", "/v1/accounts/reffed")).token, { file: tokenFile });
    await shot(page, "settings-accounts");
    await api("DELETE", "/v1/accounts/reffed");
    // B.1 tokenLifetimeDays: a Claude token lasts a year; given 350 days ago, it is time to renew.
    const cc = await api("POST", "/v1/accounts", { name: "yearly", harness: "claude-code", token: { value: "sk-ant-oat01-ui-0123456789" } });
    const ccCard = accounts.getByRole("listitem").filter({ hasText: "yearly" });
    await page.reload();
    await ccCard.getByText(`token until ${cc.expiresAt.slice(0, 10)}`).waitFor();
    const store = JSON.parse(readFileSync(process.env.HANDLER_SECRETS_FILE, "utf8"));
    const then = new Date(Date.now() - 350 * 86400 * 1000);
    store["accounts/yearly/token"].updatedAt = then.toISOString().replace(/\.\d+Z$/, "Z");
    writeFileSync(process.env.HANDLER_SECRETS_FILE, JSON.stringify(store));
    const due = new Date(then.getTime() + 365 * 86400 * 1000).toISOString().slice(0, 10);
    await page.reload();
    await ccCard.getByRole("note").getByText(`token expires ${due}: give a new one (Token…)`).waitFor();
    await shot(page, "settings-accounts-expiry");
    await api("DELETE", "/v1/accounts/yearly");
    await page.getByRole("link", { name: "Images" }).click();
    await page.getByRole("list", { name: "Images" }).getByText("Fake ACP agent").waitFor();
    await shot(page, "settings-images");
    await page.getByRole("link", { name: "Secrets" }).click();
    const form = page.getByRole("form", { name: "Set a secret" });
    await form.getByLabel("Path").fill("web/probe");
    await form.getByLabel("Description").fill("a probe");
    await form.getByLabel(/^Value/).fill("s3cret-UiValue-9999zzzz");
    await form.getByRole("button", { name: "Set" }).click();
    await page.getByRole("list", { name: "Secrets" }).getByText("web/probe").waitFor();
    assert.ok(!(await page.content()).includes("s3cret-UiValue-9999zzzz"), "the secret's value is shown");
    const listed = await api("GET", "/v1/secrets");
    assert.ok(listed.some((x) => x.path === "web/probe") && !JSON.stringify(listed).includes("s3cret-UiValue"));
    await shot(page, "settings-secrets");
  });

  await step("settings: Log in opens the file login in a terminal window and follows the account", async () => {
    await api("POST", "/v1/accounts", { name: "filed", harness: "filefake" });
    await page.goto(`${URL_}/#/settings/accounts`);
    const card = page.getByRole("list", { name: "Accounts" }).getByRole("listitem").filter({ hasText: "filed" });
    await card.getByText("not logged in").waitFor();
    await card.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("status").getByText(/Log in in the terminal window/).waitFor();
    const fs = await import("node:fs");
    let opened = "";
    for (let i = 0; i < 100 && !opened; i++) {
      try { opened = fs.readFileSync(process.env.HANDLER_LOGIN_WINDOW, "utf8").trim(); } catch { await page.waitForTimeout(100); }
    }
    assert.equal(opened, "-e /opt/handler/handler account login --keep-open -- filed");
    // What `handler account login` does when the harness's login ends: its file to handlerd.
    await api("PUT", "/v1/accounts/filed/login", { content: "{\"refresh\":\"ui-login-file\"}" });
    await page.getByRole("status").getByText("filed: logged in.").waitFor({ timeout: 15000 });
    await card.getByText("logged in", { exact: true }).waitFor();
    assert.ok(!(await page.content()).includes("ui-login-file"), "the credential is shown");
  });

  await step("settings: a provider from a template with its key never shown, a context, the toolbox", async () => {
    await page.goto(`${URL_}/#/settings/providers`);
    const pf = page.getByRole("form", { name: "New provider" });
    await pf.getByLabel("Template").selectOption("mistral");
    await pf.getByLabel("Name").fill("ui-mistral");
    await pf.getByLabel(/^API key/).fill("sk-UiProviderKey-7777qqqq");
    await pf.getByRole("button", { name: "Add provider" }).click();
    const row = page.getByRole("list", { name: "Providers" }).getByRole("listitem").filter({ hasText: "ui-mistral" });
    await row.getByText("key set").waitFor();
    assert.ok(!(await page.content()).includes("sk-UiProviderKey"), "the key is shown");
    const prov = await api("GET", "/v1/providers/ui-mistral");
    assert.equal(prov.keySet, true);
    assert.equal(prov.endpoints["openai-chat"], "https://api.mistral.ai/v1", "the template's endpoint");
    assert.ok(!JSON.stringify(prov).includes("sk-UiProviderKey"));
    await shot(page, "settings-providers");

    await page.getByRole("link", { name: "Contexts" }).click();
    const cf = page.getByRole("form", { name: "New context" });
    await cf.getByLabel("Name").fill("work-ui");
    await cf.getByLabel("Colour").selectOption("violet");
    await cf.getByRole("button", { name: "Add context" }).click();
    await page.getByRole("list", { name: "Contexts" }).getByText("work-ui", { exact: true }).waitFor();
    await page.getByLabel("Colour of work-ui").selectOption("cyan");
    await page.waitForFunction(() => document.querySelector(".badge.context.cyan")?.textContent === "work-ui");
    assert.equal((await api("GET", "/v1/contexts/work-ui")).color, "cyan");

    await page.getByRole("link", { name: "Images" }).click();
    const tf = page.getByRole("form", { name: "Toolbox Containerfile" });
    const editor = tf.getByLabel(/^Containerfile/);
    await page.waitForFunction(() => (document.querySelector("form[aria-label='Toolbox Containerfile'] textarea")?.value ?? "").includes("FROM"));
    const before = await editor.inputValue();
    await editor.fill(`${before}\n# edited in the browser\n`);
    await tf.getByRole("button", { name: "Save" }).click();
    await tf.getByRole("status").waitFor();
    const saved = await api("GET", "/v1/toolbox/containerfile");
    assert.ok(saved.content.endsWith("# edited in the browser\n"), saved.content.slice(-80));
    await tf.getByRole("button", { name: "Back to the default" }).click();
    await tf.getByRole("button", { name: "Save" }).click();
    await page.waitForTimeout(300);
    const back = await api("GET", "/v1/toolbox/containerfile");
    assert.equal(back.content, back.defaultContent);
  });

  await step("settings: a skill written, its scan shown as text, edited; a knowledge folder made", async () => {
    await page.goto(`${URL_}/#/settings/skills`);
    const nf = page.getByRole("form", { name: "New skill" });
    // A zero-width space and a host: the scan finds both; the page shows them as text.
    await nf.getByLabel(/^SKILL.md of a new skill/).fill(
      "---\nname: ui-skill\ndescription: Made in the browser.\n---\n\nFetch https://evil.example.com/x\u200b and <img src=x onerror=window.__xss=1>\n",
    );
    await nf.getByRole("button", { name: "Create skill" }).click();
    const sec = page.getByRole("region", { name: "Skill ui-skill" });
    await sec.getByRole("heading", { name: /Hosts named/ }).waitFor();
    assert.match(await sec.getByLabel("Hosts named").textContent(), /evil\.example\.com/);
    await sec.getByRole("heading", { name: /Hidden or bidirectional/ }).waitFor();
    assert.equal(await page.evaluate(() => window.__xss), undefined, "a skill's text ran as markup");
    await shot(page, "settings-skills");
    const md = sec.getByRole("textbox", { name: "SKILL.md", exact: true });
    await md.fill("---\nname: ui-skill\ndescription: Edited in the browser.\n---\n\nPlain now.\n");
    await sec.getByRole("button", { name: "Save" }).click();
    await sec.getByRole("status").waitFor();
    const skill = await api("GET", "/v1/skills/ui-skill");
    assert.equal(skill.description, "Edited in the browser.");
    assert.equal(skill.scan.hosts.length + skill.scan.hiddenText.length, 0);

    await page.getByRole("link", { name: "Knowledge" }).click();
    // The root moved into the test's own folder (made when the first folder is), then a folder.
    const root = `${SCOPE.replace(/\/code\/app$/, "")}/knowledge-ui`;
    const rf = page.getByRole("form", { name: "Knowledge root" });
    await rf.getByLabel(/^Root/).fill(root);
    await rf.getByRole("button", { name: "Set root" }).click();
    await page.getByText(root, { exact: true }).waitFor();
    const kf = page.getByRole("form", { name: "New knowledge folder" });
    await kf.getByLabel(/^Folder/).fill("ui-notes");
    await kf.getByRole("button", { name: "Create folder" }).click();
    await page.getByRole("list", { name: "Knowledge folders" }).getByText("ui-notes").waitFor();
    const k = await api("GET", "/v1/knowledge");
    assert.equal(k.root, root);
    assert.ok(k.exists && k.folders.includes("ui-notes"), JSON.stringify(k));
    await kf.getByLabel(/^Folder/).fill("_hidden");
    await kf.getByRole("button", { name: "Create folder" }).click();
    await page.getByRole("alert").waitFor();
  });

  await step("the agent form: an account and a provider as two models in order, a knowledge folder, a skill, a checkout of its own", async () => {
    const project = (await api("GET", "/v1/projects"))[0];
    await page.goto(`${URL_}/#/projects/${project.id}/agents/new`);
    const form = page.getByRole("form", { name: "Agent" });
    await form.getByLabel("Name (its goal)").fill("Reviewer");
    const models = form.getByRole("group", { name: "Models" });
    await models.getByRole("button", { name: "Add a model" }).click();
    const second = models.getByLabel("Model 2 runs on");
    const values = await second.evaluate((sel) => [...sel.options].map((o) => o.value));
    const viaProvider = values.find((v) => v.startsWith("provider:ui-mistral:"));
    assert.ok(viaProvider, `the provider is offered through a harness that speaks its protocol: ${values}`);
    assert.ok(values.some((v) => v.startsWith("account:")), `${values}`);
    await second.selectOption(viaProvider);
    // Its models are suggested; the provider becomes the default by moving it first.
    assert.ok((await models.locator("datalist#models-1 option").count()) > 0, "the provider's models are suggested");
    await models.getByRole("button", { name: "Move model 2 up" }).click();
    assert.equal(await models.getByLabel("Model 1 runs on").inputValue(), viaProvider);
    await form.getByRole("group", { name: "Knowledge" }).getByLabel("Knowledge ui-notes").check();
    await form.getByRole("group", { name: "Skills" }).getByLabel("Skill ui-skill").check();
    await form.getByLabel("At the scope").selectOption("copy");
    await models.scrollIntoViewIfNeeded();
    await shot(page, "agent-form-models");
    await form.getByRole("button", { name: "Save", exact: true }).click();
    const risks = page.getByRole("alert", { name: "Risks" });
    await Promise.race([risks.waitFor(), page.getByRole("heading", { name: "Web app" }).waitFor()]);
    if (await risks.isVisible()) await risks.getByRole("button", { name: "Confirm and save" }).click();
    await page.getByRole("heading", { name: "Web app" }).waitFor();
    const made = (await api("GET", `/v1/agents?project=${project.id}`)).find((a) => a.name === "Reviewer");
    assert.ok(made, "the agent was saved");
    assert.equal(made.models.length, 2, JSON.stringify(made.models));
    assert.equal(made.models[0].provider, "ui-mistral", JSON.stringify(made.models));
    assert.equal(made.models[0].harness, viaProvider.split(":")[2]);
    assert.ok(made.models[1].account, JSON.stringify(made.models));
    assert.deepEqual(made.knowledge, ["ui-notes"]);
    assert.deepEqual(made.skills, ["ui-skill"]);
    assert.equal(made.sessionTree, "copy");
    // Opened again, the form shows what was saved; a model removed is gone after a save.
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${made.id}`);
    assert.equal(await models.getByLabel("Model 1 runs on").inputValue(), viaProvider);
    assert.ok(await form.getByLabel("Knowledge ui-notes").isChecked());
    assert.ok(await form.getByLabel("Skill ui-skill").isChecked());
    assert.equal(await form.getByLabel("At the scope").inputValue(), "copy");
    await models.getByRole("button", { name: "Remove model 2" }).click();
    await form.getByLabel("Skill ui-skill").uncheck();
    await form.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByRole("heading", { name: "Web app" }).waitFor();
    const after = await api("GET", `/v1/agents/${made.id}`);
    assert.equal(after.models.length, 1);
    assert.deepEqual(after.skills ?? [], []);
    assert.deepEqual(after.knowledge, ["ui-notes"], "what the form did not touch is kept");
    await api("DELETE", `/v1/agents/${made.id}`);
  });

  await step("a run: Review with… on a skill, its form from the interface, its result with the verdict and the lines handlerd reads", async () => {
    const project = (await api("GET", "/v1/projects"))[0];
    const first = (await api("GET", `/v1/agents?project=${project.id}`))[0];
    const iface = {
      fields: { type: "object", required: ["expectation"], properties: { expectation: { type: "string", title: "What you expect it to do" } } },
      subject: "skill",
      result: {
        type: "object",
        required: ["verdict"],
        properties: {
          verdict: { enum: ["no-concerns", "caution", "do-not-install"], "x-handler": "verdict", title: "Verdict" },
          summary: { type: "string", title: "Summary" },
          findings: { type: "array", items: { type: "object", properties: { text: { type: "string" }, where: { type: "object", "x-handler": "code-ref" } } } },
        },
      },
      timeoutSec: 120,
    };
    const made = await api("POST", `/v1/projects/${project.id}/agents`, {
      name: "UI reviewer",
      models: first.models.map((m) => (m.account ? { account: m.account } : { provider: m.provider, harness: m.harness })),
      network: "none", permissions: "bypass", interface: iface, confirmRisks: true,
    });
    assert.ok(made.id, JSON.stringify(made));
    // The fake agent's answer for the run (restored after): the agent quotes nothing; the lines
    // shown are SKILL.md's own.
    const script = join(SCOPE, ".fake-agent-script.json");
    const before = readFileSync(script, "utf8");
    const result = { verdict: "caution", summary: "Names a host.", findings: [{ text: "Its header", where: { path: "SKILL.md", lines: [1, 3] } }] };
    writeFileSync(script, JSON.stringify({ ...JSON.parse(before), answers: ["Reviewed.\n```json handler-result\n" + JSON.stringify(result) + "\n```\n"] }));
    try {
      await page.goto(`${URL_}/#/settings/skills`);
      await page.getByRole("link", { name: "Review with UI reviewer" }).click();
      const form = page.getByRole("form", { name: "Run" });
      assert.equal(await form.getByLabel("Skill").inputValue(), "ui-skill");
      await form.getByLabel("What you expect it to do").fill("keeps notes plain");
      await form.getByRole("button", { name: "Start the run" }).click();
      const res = page.getByRole("region", { name: "Result" });
      await res.waitFor({ timeout: 60000 });
      assert.equal(await res.getByLabel("Verdict").textContent(), "caution");
      assert.match(await res.getByLabel("Verdict").getAttribute("class"), /warn/);
      await res.getByText("Names a host.").waitFor();
      const ref = res.getByRole("figure", { name: "SKILL.md lines 1–3" });
      await ref.getByText("name: ui-skill").waitFor();
      await page.getByRole("region", { name: "Run input" }).getByText("keeps notes plain").waitFor();
      await page.getByRole("region", { name: "Run input" }).getByText("What you expect it to do").waitFor();
      assert.equal(await page.getByLabel(/^Message/).count(), 0, "a run takes no message");
      await shot(page, "run-result");
      const runs = (await api("GET", "/v1/sessions")).filter((x) => x.agentId === made.id);
      assert.equal(runs.length, 1);
      assert.equal(runs[0].output.valid, true, JSON.stringify(runs[0].output));
      // D.17: the skill's page says its last review, and that it changed since once edited.
      await page.goto(`${URL_}/#/settings/skills`);
      await page.getByRole("list", { name: "Skills" }).getByRole("button", { name: "ui-skill", exact: true }).click();
      const sec = page.getByRole("region", { name: "Skill ui-skill" });
      await sec.getByLabel("Last review").getByText("caution").waitFor();
      assert.equal(await sec.getByText("changed since its review").count(), 0);
      const md = sec.getByRole("textbox", { name: "SKILL.md", exact: true });
      await md.fill(`${await md.inputValue()}\nOne more line.\n`);
      await sec.getByRole("button", { name: "Save" }).click();
      await sec.getByText("changed since its review").waitFor();
    } finally {
      writeFileSync(script, before);
    }
    await api("DELETE", `/v1/agents/${made.id}`);
  });

  await step("the built-in agents: what each is and fetches; the skill reviewer set up with a model, then offered on skills", async () => {
    await page.goto(`${URL_}/#/agents`);
    const list = page.getByRole("list", { name: "Built-in agents" });
    const reviewer = list.getByRole("listitem", { name: "Built-in Skill reviewer" });
    await reviewer.getByText("runs", { exact: true }).waitFor();
    await reviewer.getByText("permissions: ask").waitFor();
    const creator = list.getByRole("listitem", { name: "Built-in Skill creator" });
    await creator.getByText("Fetches at set-up").waitFor();
    await creator.getByText("a conversation", { exact: true }).waitFor();
    await shot(page, "agents-builtin");
    await reviewer.getByRole("button", { name: "Set up Skill reviewer" }).click();
    const risks = reviewer.getByRole("alert");
    const failed = page.locator("p.error[role=alert]");
    await Promise.race([risks.waitFor(), reviewer.getByText("set up", { exact: true }).waitFor(), failed.waitFor()]);
    if (await failed.count()) assert.fail(await failed.first().textContent());
    if (await risks.isVisible()) await risks.getByRole("button", { name: "Confirm and set up" }).click();
    await reviewer.getByText("set up", { exact: true }).waitFor();
    const agent = (await api("GET", "/v1/agents")).find((a) => a.origin === "skill-review");
    assert.ok(agent, "the reviewer was set up");
    assert.equal(agent.permissions, "ask");
    assert.equal(agent.interface.subject, "skill");
    assert.equal(agent.models.length, 1);
    await page.goto(`${URL_}/#/settings/skills`);
    await page.getByRole("link", { name: "Review with Skill reviewer" }).first().waitFor();
    await api("DELETE", `/v1/agents/${agent.id}`);
  });

  await step("a folderless agent: Edit with an agent on a skill, the agent's edit, Save to library after a confirm", async () => {
    const acct = await api("POST", "/v1/accounts", { name: "free", harness: "fakefree", token: { value: "fk-FolderlessToken0000aaaa1111bbbb" } });
    assert.equal(acct.name, "free", JSON.stringify(acct));
    const ed = await api("POST", "/v1/agents", {
      name: "Skill editor", models: [{ account: "free" }], knowledge: ["fakebin"],
      network: "none", permissions: "bypass", confirmRisks: true,
    });
    assert.ok(ed.id && !ed.scope, JSON.stringify(ed));
    await page.goto(`${URL_}/#/settings/skills`);
    await page.reload(); // the same address as the step before: read the agents again
    await page.getByLabel("Folderless agent").selectOption(ed.id);
    await page.getByRole("list", { name: "Skills" }).getByRole("button", { name: "ui-skill", exact: true }).click();
    await page.getByRole("region", { name: "Skill ui-skill" }).getByRole("button", { name: "Edit with an agent" }).click();
    await page.waitForSelector("body[data-session-ready]");
    const box = page.getByLabel(/^Message/);
    await box.fill("write:SKILL.md=---\nname: ui-skill\ndescription: Edited by an agent.\n---\n\nBetter now.\n");
    await box.press("Enter");
    await page.getByLabel("Tool call Write SKILL.md").getByText("completed").waitFor();
    // The library has ui-skill: the person is asked, naming it, before it is replaced.
    let asked = "";
    page.once("dialog", (d) => { asked = d.message(); d.accept(); });
    await page.getByRole("button", { name: "Save to library" }).click();
    await page.getByRole("status").filter({ hasText: "Saved to the library as the skill ui-skill" }).waitFor();
    assert.match(asked, /skill named "ui-skill"/);
    const sk = await api("GET", "/v1/skills/ui-skill");
    assert.equal(sk.description, "Edited by an agent.");
    await shot(page, "session-save-to-library");
    await page.getByRole("button", { name: "Stop session" }).click();
    await page.getByLabel("State").getByText("stopped").waitFor();
    await api("DELETE", `/v1/agents/${ed.id}`);
    await api("DELETE", "/v1/accounts/free");
  });

  await step("settings: automatic image updates scheduled, and the host's runtime check", async () => {
    const was = (await api("GET", "/v1/image-updates")).schedule;
    await page.goto(`${URL_}/#/settings/images`);
    const up = page.getByRole("region", { name: "Automatic updates" });
    await up.getByLabel("Update schedule").selectOption("weekly");
    await up.getByRole("status").getByText("Images are rebuilt weekly").waitFor();
    const saved = await api("GET", "/v1/image-updates");
    assert.equal(saved.schedule, "weekly");
    assert.ok(saved.nextRun, JSON.stringify(saved));
    await up.getByText(/Next /).waitFor();
    const rt = page.getByRole("region", { name: "Runtime check" });
    await rt.getByText(/podman|docker/i).first().waitFor({ timeout: 30000 });
    await shot(page, "settings-updates");
    await up.getByLabel("Update schedule").selectOption(was);
    await up.getByRole("status").getByText(was === "off" ? "Automatic updates are off" : `Images are rebuilt ${was}`).waitFor();
    assert.equal((await api("GET", "/v1/image-updates")).schedule, was);
  });

  await step("narrow width and the dark scheme: the session page still works", async () => {
    await page.setViewportSize({ width: 390, height: 800 });
    await page.goto(sessionUrl);
    await page.waitForSelector("body[data-session-ready]");
    await page.getByLabel(/^Message/).waitFor();
    // The page opens at the transcript's end; the picture shows its top (title, toolbar, list).
    await page.evaluate(() => window.scrollTo(0, 0));
    await shot(page, "session-narrow");
    await page.emulateMedia({ colorScheme: "dark" });
    const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    assert.notEqual(bg, "rgb(251, 251, 250)", "the dark scheme is not applied");
    await shot(page, "session-narrow-dark");
    await page.emulateMedia({ colorScheme: "light" });
    await page.setViewportSize({ width: 1280, height: 860 });
  });

  await step("Duplicate copies an agent's settings into a new agent", async () => {
    await page.goto(sessionUrl);
    await page.waitForSelector("body[data-session-ready]");
    await page.getByRole("link", { name: "Project", exact: true }).click();
    await page.getByRole("link", { name: "Duplicate" }).click();
    assert.equal(await page.getByLabel("Name (its goal)").inputValue(), "Dev copy");
    assert.equal(await page.getByLabel("Permissions").inputValue(), "bypass");
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByText("Dev copy").waitFor();
    const project = (await api("GET", "/v1/projects"))[0];
    const copy = project.agents.find((a) => a.name === "Dev copy");
    assert.equal(copy?.permissions, "bypass");
    assert.equal(copy?.network, "none");
  });

  await step("open git is a risk to confirm, shown with its warning, and narrowing back needs none", async () => {
    const project = (await api("GET", "/v1/projects"))[0];
    const copy = project.agents.find((a) => a.name === "Dev copy");
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${copy.id}`);
    await page.getByLabel("Git").selectOption("open");
    await page.getByRole("note").filter({ hasText: "hooks and config" }).waitFor();
    await page.getByRole("button", { name: "Save", exact: true }).click();
    const risks = page.getByRole("alert", { name: "Risks" });
    await risks.waitFor();
    assert.match(await risks.innerText(), /git/i);
    assert.equal((await api("GET", `/v1/agents/${copy.id}`)).gitGuard ?? "fetch", "fetch", "saved before confirming");
    await risks.getByRole("button", { name: "Confirm and save" }).click();
    await page.getByRole("heading", { name: "Past sessions" }).waitFor();
    const opened = await api("GET", `/v1/agents/${copy.id}`);
    assert.equal(opened.gitGuard, "open");
    assert.ok((opened.warnings ?? []).length > 0, JSON.stringify(opened));
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${copy.id}`);
    await page.locator("p.warning").first().waitFor();
    await page.getByLabel("Git").selectOption("fetch");
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByRole("heading", { name: "Past sessions" }).waitFor();
    assert.equal((await api("GET", `/v1/agents/${copy.id}`)).gitGuard ?? "fetch", "fetch");
  });

  await step("agents outside projects: an ad-hoc agent's session; a terminal on its project with its network page", async () => {
    // An ad-hoc agent in the project's folder, as `handler run --anyway` makes (the fake agent's
    // program lives in that folder, so a folderless agent could not start it here).
    const made = await fetch(`${URL_}/v1/agents`, {
      method: "POST",
      headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
      body: JSON.stringify({ name: "scratch-ui", scope: SCOPE, models: [{ account: "perso" }], network: "none", permissions: "bypass", confirmRisks: true }),
    });
    assert.equal(made.status, 201, await made.text());
    await page.goto(`${URL_}/#/`);
    await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Agents" }).click();
    const card = page.getByRole("list", { name: "Agents outside projects" }).getByRole("listitem").filter({ hasText: "scratch-ui" }).first();
    await card.getByText(SCOPE, { exact: true }).waitFor();
    await card.getByRole("button", { name: "New session" }).click();
    await page.waitForSelector("body[data-session-ready]");
    const box = page.getByLabel(/^Message/);
    await box.fill("hello outside projects");
    await box.press("Enter");
    await page.locator(".msg.agent", { hasText: "hello outside projects" }).waitFor();
    await page.goto(`${URL_}/#/agents`);
    await page.getByRole("list", { name: "Sessions of scratch-ui" }).getByRole("link").first().waitFor();
    await shot(page, "agents");

    const project = (await api("GET", "/v1/projects"))[0];
    const copy = project.agents.find((a) => a.name === "Dev copy");
    const t = await api("POST", `/v1/agents/${copy.id}/terminal`, { term: "xterm-256color" });
    assert.ok(t.sandbox && Array.isArray(t.attach), JSON.stringify(t));
    await page.goto(`${URL_}/#/projects/${project.id}`);
    await page.getByRole("link", { name: "Terminal of Dev copy" }).click();
    await page.getByLabel("Terminal", { exact: true }).getByText("account perso").waitFor();
    assert.match(await page.getByLabel("Terminal", { exact: true }).innerText(), new RegExp(t.sandbox));
    await page.getByRole("region", { name: "Network" }).getByText("Network none").waitFor();
    // Deleting the agent stops its terminal: the page says it has ended.
    await api("DELETE", `/v1/agents/${copy.id}`);
    await page.getByText("This terminal has ended").waitFor();
  });

  await step("a denied host is asked in the session and allowed; Learn hosts adds a host tried", async () => {
    // A filtered, enforced agent that asks about denied hosts; its fake agent fetches through
    // the real network filter (`fetch:`, a GET through the sandbox's HTTP_PROXY).
    const made = await api("POST", "/v1/agents", { name: "net-ui", scope: SCOPE, models: [{ account: "perso" }], network: "filtered", egress: "enforce", askDeniedHosts: true, permissions: "bypass", confirmRisks: true });
    assert.ok(made.id, JSON.stringify(made));
    const fetchOf = (host) => `fetch:http://${host}/x`;
    await page.goto(`${URL_}/#/agents`);
    const card = page.getByRole("list", { name: "Agents outside projects" }).getByRole("listitem").filter({ hasText: "net-ui" }).first();
    await card.getByRole("button", { name: "New session" }).click();
    await page.waitForSelector("body[data-session-ready]");
    const box = page.getByLabel(/^Message/);
    const ask = "ask-ui.example.test:80";
    await box.fill(fetchOf(ask));
    await box.press("Enter");
    const q = page.getByRole("group", { name: "Permission request" }).filter({ hasText: ask });
    await q.waitFor();
    // The question's title is inline markdown: the host in code, no backticks shown.
    await q.locator("code", { hasText: ask }).waitFor();
    assert.ok(!(await q.innerText()).includes("`"), await q.innerText());
    await shot(page, "session-denied-host");
    await q.getByRole("button", { name: "Allow always" }).click();
    await q.waitFor({ state: "detached" });
    const allowOf = async () => (await api("GET", `/v1/agents/${made.id}`)).allow ?? [];
    for (let i = 0; !(await allowOf()).includes(ask); i++) {
      assert.ok(i < 100, `allow always did not save ${ask}: ${JSON.stringify(await allowOf())}`);
      await new Promise((r) => setTimeout(r, 300));
    }
    // Allow once: this sandbox only, the agent's list unchanged.
    const once = "once-ui.example.test:80";
    await page.getByRole("button", { name: "Send" }).and(page.locator(":enabled")).waitFor();
    await box.fill(fetchOf(once));
    await box.press("Enter");
    const q2 = page.getByRole("group", { name: "Permission request" }).filter({ hasText: once });
    await q2.getByRole("button", { name: "Allow once" }).click();
    await q2.waitFor({ state: "detached" });
    assert.ok(!(await allowOf()).includes(once), JSON.stringify(await allowOf()));

    // Learn hosts (A.4): log only, the host tried listed, chosen, allowed, enforced again.
    await page.getByRole("button", { name: "Send" }).and(page.locator(":enabled")).waitFor();
    const net = page.getByRole("region", { name: "Network" });
    if (!(await net.isVisible())) await page.getByRole("button", { name: "Network" }).click();
    await net.getByRole("button", { name: "Learn hosts" }).click();
    await net.getByText("log only").waitFor();
    assert.equal((await api("GET", `/v1/agents/${made.id}`)).egress, "log-only");
    const learnt = "learn-ui.example.test:80";
    await box.fill(fetchOf(learnt));
    await box.press("Enter");
    const hosts = net.getByRole("group", { name: "Hosts not on the allow-list" });
    await hosts.getByLabel(learnt).check();
    await shot(page, "session-learn-hosts");
    await net.getByRole("button", { name: "Allow the chosen and enforce" }).click();
    await net.getByText("enforced").waitFor();
    const after = await api("GET", `/v1/agents/${made.id}`);
    assert.equal(after.egress ?? "enforce", "enforce", JSON.stringify(after));
    assert.ok(after.allow.includes(learnt) && after.allow.includes(ask), JSON.stringify(after.allow));
    await page.getByRole("button", { name: "Stop session" }).click();
    await page.getByLabel("State").getByText("stopped").waitFor();
  });

  await step("settings: caches listed with their sizes and one emptied after a confirm", async () => {
    // A project of its own (no sandbox ever mounts its caches), one cache with content, made as
    // the daemon's user (the runtime's verbs only take that user's folders).
    const owner = statSync(SCOPE);
    const folder = join(dirname(SCOPE), "caches-ui");
    mkdirSync(folder, { recursive: true });
    chownSync(folder, owner.uid, owner.gid);
    const p = await api("POST", "/v1/projects", { folder, name: "caches-ui", agent: { name: "Dev", models: [{ account: "perso" }] } });
    assert.ok(p.id, JSON.stringify(p));
    const own = (await api("GET", "/v1/caches")).projects.find((x) => x.projectId === p.id);
    const npm = join(own.path, "npm");
    for (const d of [dirname(own.path), own.path, npm]) {
      if (!existsSync(d)) mkdirSync(d);
      chownSync(d, owner.uid, owner.gid);
    }
    writeFileSync(join(npm, "blob"), Buffer.alloc(3000, 1));
    chownSync(join(npm, "blob"), owner.uid, owner.gid);
    await page.goto(`${URL_}/#/settings/caches`);
    await page.getByRole("region", { name: "What is kept" }).getByText("~/.cargo").waitFor();
    const table = page.getByRole("table", { name: "Caches of caches-ui" });
    const row = table.getByRole("row").filter({ hasText: "npm" });
    // The runtime's count (`du --apparent-size`: the folders' own entries too), at least the file.
    const sizeCell = row.getByRole("cell").nth(1);
    await sizeCell.getByText(/^[0-9.]+ (B|KB)$/).waitFor();
    const before = await sizeCell.innerText();
    const npmOf = async () => (await api("GET", "/v1/caches")).projects.find((x) => x.projectId === p.id).caches.find((c) => c.name === "npm");
    const full = await npmOf();
    assert.ok(full.bytes >= 3000, JSON.stringify(full));
    await table.getByRole("row").filter({ hasText: "pip" }).getByText("not made yet").waitFor();
    await shot(page, "settings-caches");
    await row.getByRole("button", { name: "Empty npm of caches-ui" }).click();
    await row.getByRole("button", { name: "Empty npm of caches-ui now" }).click();
    await page.getByRole("status").filter({ hasText: "Emptied npm of caches-ui" }).waitFor();
    assert.ok(!existsSync(join(npm, "blob")) && existsSync(npm), "emptied, the folder kept");
    for (let i = 0; (await sizeCell.innerText()) === before; i++) {
      assert.ok(i < 100, `the size stayed ${before}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const left = await npmOf();
    assert.ok(left.bytes !== null && left.bytes <= full.bytes - 3000, JSON.stringify(left));
  });

  await step("settings: a catalog addon installed and configured, its binding edited, its uninstall refused while bound", async () => {
    await page.goto(`${URL_}/#/settings/addons`);
    await page.getByRole("button", { name: "Install shopify" }).click();
    const pv = page.getByRole("region", { name: "Preview of shopify" });
    await pv.getByText("*.myshopify.com:443").waitFor();
    await pv.getByText("themeToken").waitFor();
    await pv.getByRole("note").getByText("Containerfile runs code").waitFor();
    await shot(page, "settings-addons-preview");
    await pv.getByRole("button", { name: "Install shopify" }).click();
    await page.getByRole("status").filter({ hasText: "Installed shopify" }).waitFor();
    const card = page.getByRole("listitem", { name: "Addon shopify" });
    await card.getByText("from catalog:shopify").waitFor();
    await card.getByRole("button", { name: "Reinstall shopify from catalog:shopify" }).waitFor();
    await page.getByRole("region", { name: "Available to install" }).getByRole("button", { name: "Reinstall shopify" }).waitFor();
    // G.5: right after the install, its Configure form (the bindings page's own form).
    const form = page.getByRole("form", { name: "Configure shopify" });
    await form.getByLabel("Name").fill("shop-ui");
    await form.getByLabel(/^store/).fill("ui-test.myshopify.com");
    const secret = "shpat-ui-never-shown-0123";
    assert.equal(await form.getByLabel(/^Secret themeToken/).inputValue(), "value");
    await form.getByLabel(/^Value of themeToken/).fill(secret);
    await shot(page, "settings-addons-configure");
    await form.getByRole("button", { name: "Create binding" }).click();
    await page.getByRole("status").filter({ hasText: "Created binding shop-ui of shopify" }).waitFor();
    await card.getByText("bound by shop-ui").waitFor();
    assert.ok(!(await page.content()).includes(secret), "the secret is shown");
    await shot(page, "settings-addons");
    // D.15: Edit opens it filled in; a 400 is shown by the field it names; saved with PUT.
    await page.goto(`${URL_}/#/settings/bindings`);
    const b = page.getByRole("listitem", { name: "Binding shop-ui" });
    await b.getByText("ui-test.myshopify.com").waitFor();
    await b.getByRole("button", { name: "Edit shop-ui" }).click();
    const ed = page.getByRole("form", { name: "Edit binding shop-ui" });
    assert.equal(await ed.getByLabel(/^store/).inputValue(), "ui-test.myshopify.com");
    assert.equal(await ed.getByLabel(/^Secret themeToken/).inputValue(), "keep");
    await ed.getByLabel(/^store/).fill("ui-edited.myshopify.com");
    await ed.getByLabel(/^Secret themeToken/).selectOption("path:web/probe");
    await ed.getByLabel("Name").fill("shop ui");
    await ed.getByRole("button", { name: "Save binding" }).click();
    await ed.getByRole("alert").getByText('name: "shop ui" is not a name').waitFor();
    assert.equal(await ed.getByLabel("Name").getAttribute("aria-invalid"), "true");
    await ed.getByLabel("Name").fill("shop-ui");
    await shot(page, "settings-bindings-edit");
    await ed.getByRole("button", { name: "Save binding" }).click();
    await page.getByRole("status").filter({ hasText: "Saved shop-ui" }).waitFor();
    await page.reload();
    await b.getByText("ui-edited.myshopify.com").waitFor();
    await b.getByText("web/probe").waitFor();
    const saved = await api("GET", "/v1/bindings/shop-ui");
    assert.deepEqual(saved.secretPaths, { themeToken: "web/probe" });
    assert.ok(!(await api("GET", "/v1/secrets")).some((x) => x.path.startsWith("bindings/shop-ui/")), "its own value stayed");
    assert.ok(!(await page.content()).includes("s3cret-UiValue"), "a store value is shown");
    await shot(page, "settings-bindings");
    // D.15: the agent form picks it; another agent's use is said; taken back for what follows.
    const project = (await api("GET", "/v1/projects"))[0];
    const agent = (await api("GET", `/v1/agents?project=${project.id}`))[0];
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${agent.id}`);
    const picks = page.getByRole("form", { name: "Agent" }).getByRole("group", { name: "Addons" });
    await picks.getByLabel("Binding shop-ui").check();
    await page.getByRole("button", { name: "Save", exact: true }).click();
    const risks = page.getByRole("alert", { name: "Risks" });
    await Promise.race([risks.waitFor(), page.getByRole("heading", { name: "Web app" }).waitFor()]);
    if (await risks.isVisible()) await risks.getByRole("button", { name: "Confirm and save" }).click();
    await page.getByRole("heading", { name: "Web app" }).waitFor();
    assert.deepEqual((await api("GET", `/v1/agents/${agent.id}`)).bindings, ["shop-ui"]);
    const dup = await api("POST", `/v1/projects/${project.id}/agents`, { name: "Binder", models: (await api("GET", `/v1/agents/${agent.id}`)).models.map((m) => (m.account ? { account: m.account } : { provider: m.provider, harness: m.harness })) });
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${dup.id}`);
    const row = page.getByRole("form", { name: "Agent" }).getByRole("group", { name: "Addons" });
    await row.getByText("used by 1 other agent").waitFor();
    await api("DELETE", `/v1/agents/${dup.id}`);
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${agent.id}`);
    await picks.getByLabel("Binding shop-ui").uncheck();
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByRole("heading", { name: "Web app" }).waitFor();
    assert.deepEqual((await api("GET", `/v1/agents/${agent.id}`)).bindings ?? [], []);
    await page.goto(`${URL_}/#/settings/addons`);
    await page.getByRole("button", { name: "Uninstall shopify" }).click();
    await page.getByRole("alert").filter({ hasText: "shop-ui" }).waitFor();
    await page.goto(`${URL_}/#/settings/bindings`);
    await page.getByRole("button", { name: "Delete shop-ui" }).click();
    await page.getByRole("status").filter({ hasText: "Deleted shop-ui" }).waitFor();
    await page.goto(`${URL_}/#/settings/addons`);
    await page.getByRole("button", { name: "Uninstall shopify" }).click();
    await page.getByRole("status").filter({ hasText: "Uninstalled shopify" }).waitFor();
    await page.getByRole("listitem", { name: "Addon shopify" }).waitFor({ state: "detached" });
  });

  await step("machines: made from the page, live from the change channel, stats, stopped elsewhere, deleted after a confirm", async () => {
    await page.goto(`${URL_}/#/machines`);
    await page.getByRole("heading", { name: "Machines" }).waitFor();
    await page.getByText("No machines yet.").waitFor();
    const form = page.getByRole("form", { name: "Make a machine" });
    // An image the daemon does not allow: refused, the field named.
    await form.getByLabel("Name").fill("uibox");
    await form.getByLabel("Image").fill("node:22");
    await form.getByRole("button", { name: "Make" }).click();
    await page.getByRole("alert").filter({ hasText: "image:" }).waitFor();
    await form.getByLabel("Image").fill(process.env.HANDLER_MACHINE_IMAGE);
    await form.getByRole("button", { name: "Make" }).click();
    await page.getByRole("status").filter({ hasText: "Made uibox" }).waitFor();
    const card = page.getByRole("listitem", { name: "Machine uibox" });
    const state = card.getByLabel("State of uibox");
    await state.filter({ hasText: "running" }).waitFor();
    await card.getByRole("button", { name: "Stats" }).click();
    const stats = card.getByLabel("Stats of uibox");
    await stats.waitFor();
    assert.match(await stats.innerText(), /Processes/);
    // Another client stops it: the page follows the channel, with no reload.
    await api("POST", "/v1/machines/uibox/stop");
    await state.filter({ hasText: "stopped" }).waitFor();
    await card.getByRole("button", { name: "Start" }).click();
    await state.filter({ hasText: "running" }).waitFor();
    await card.getByRole("button", { name: "Stats" }).click();
    await stats.getByText("CPU").waitFor();
    await shot(page, "machines");
    // Delete asks first; Cancel keeps it.
    await card.getByRole("button", { name: "Delete uibox" }).click();
    const confirm = page.getByRole("group", { name: "Confirm deleting uibox" });
    await confirm.getByRole("button", { name: "Cancel" }).click();
    assert.equal((await api("GET", "/v1/machines")).length, 1);
    await card.getByRole("button", { name: "Delete uibox" }).click();
    await confirm.getByRole("button", { name: "Delete uibox and everything in it" }).click();
    await card.waitFor({ state: "detached" });
    await page.getByText("No machines yet.").waitFor();
    assert.deepEqual(await api("GET", "/v1/machines"), []);
    assert.ok(wsUrls.some((u) => u.endsWith("/v1/machines/events")), `WebSockets: ${wsUrls}`);
    // Decision 0156: made from a profile (its image), shown with its badge.
    await form.getByLabel("Name").fill("uipbox");
    await form.getByLabel("Profile").selectOption({ label: "Plain" });
    await form.getByLabel("Image").fill("");
    await form.getByRole("button", { name: "Make" }).click();
    await page.getByRole("status").filter({ hasText: "Made uipbox" }).waitFor();
    await page.getByRole("listitem", { name: "Machine uipbox" }).getByText("profile plain").waitFor();
    assert.equal((await api("GET", "/v1/machines/uipbox")).request.profile, "plain");
    await api("DELETE", "/v1/machines/uipbox");
    // Decision 0164: parts picked in the form, each with the version built now. This daemon's
    // toolbox is not built, so Node's part cannot be: the machine is made without it, the
    // card naming it left out with the build's reason.
    const partsBox = form.getByRole("group", { name: "Parts" });
    await partsBox.getByText("not built").first().waitFor();
    await form.getByLabel("Name").fill("uipartbox");
    await form.getByLabel("Image").fill(process.env.HANDLER_MACHINE_IMAGE);
    await partsBox.getByLabel("node").check();
    await form.getByRole("button", { name: "Make" }).click();
    await page.getByRole("status").filter({ hasText: "Made uipartbox without node" }).waitFor({ timeout: T });
    const left = page.getByRole("listitem", { name: "Machine uipartbox" }).getByText("node left out");
    await left.waitFor();
    assert.match(await left.getAttribute("title"), /toolbox|node/);
    await shot(page, "machines-parts");
    const pm = await api("GET", "/v1/machines/uipartbox");
    assert.deepEqual(pm.partsLeftOut.map((p) => p.id), ["node"]);
    assert.deepEqual(pm.request.parts, ["node"]);
    await api("DELETE", "/v1/machines/uipartbox");
    // Decision 0168: more folders of the person's, one a line; a bad one refused, named.
    await form.getByLabel("Name").fill("uimbox");
    await partsBox.getByLabel("node").uncheck();
    const folders = form.getByLabel("Folders");
    await folders.fill("relative/data:/data:ro");
    await form.getByRole("button", { name: "Make" }).click();
    await page.getByRole("alert").filter({ hasText: "mounts[0].source" }).waitFor();
    await folders.fill(`${SCOPE}:/data:ro`);
    await form.getByRole("button", { name: "Make" }).click();
    await page.getByRole("status").filter({ hasText: "Made uimbox" }).waitFor({ timeout: T });
    await page.getByRole("listitem", { name: "Machine uimbox" }).getByText(`${SCOPE} → /data (read-only)`).waitFor();
    assert.deepEqual((await api("GET", "/v1/machines/uimbox")).request.mounts, [{ source: SCOPE, target: "/data", readOnly: true }]);
    await api("DELETE", "/v1/machines/uimbox");
    // Decision 0161: made from a folder's dev container by the Dev Container CLI, shown with its
    // folder and the user and folder its execs run as and in.
    const owner = statSync(SCOPE);
    const repo = join(dirname(SCOPE), "dc-app");
    mkdirSync(join(repo, ".devcontainer"), { recursive: true });
    writeFileSync(join(repo, ".devcontainer/devcontainer.json"), `// the project's own\n${JSON.stringify({ image: process.env.HANDLER_MACHINE_IMAGE, remoteEnv: { RE: "r" } })}\n`);
    for (const p of [repo, join(repo, ".devcontainer"), join(repo, ".devcontainer/devcontainer.json")]) chownSync(p, owner.uid, owner.gid);
    await form.getByLabel("Name").fill("uidevbox");
    await form.getByLabel("Made from").selectOption({ label: "a folder's dev container" });
    await form.getByLabel("Folder").fill(repo);
    await form.getByRole("button", { name: "Make" }).click();
    await page.getByRole("status").filter({ hasText: "Made uidevbox" }).waitFor({ timeout: T });
    const dc = page.getByRole("listitem", { name: "Machine uidevbox" });
    await dc.getByText(`devcontainer ${repo}`).waitFor();
    await dc.getByText("in /workspaces/dc-app").waitFor();
    await shot(page, "machines-devcontainer");
    const made = await api("GET", "/v1/machines/uidevbox");
    assert.equal(made.request.source, "devcontainer");
    assert.deepEqual(made.devcontainer.env, ["RE"]);
    await api("DELETE", "/v1/machines/uidevbox");
    await form.getByLabel("Made from").selectOption({ label: "an image" });
  });

  await step("a machine made for an agent, picked in the agent's form, deleted with its session stopped; a disposable machine per session", async () => {
    const project = (await api("GET", "/v1/projects"))[0];
    const boxed = await api("POST", `/v1/projects/${project.id}/agents`, { name: "Boxed", models: [{ account: "perso" }], network: "none", permissions: "bypass", confirmRisks: true });
    // The page is already #/machines: reload so it lists the agent just made.
    await page.goto(`${URL_}/#/machines`);
    await page.reload();
    const form = page.getByRole("form", { name: "Make a machine" });
    await form.getByLabel("Name").fill("uiagentbox");
    await form.getByLabel("For agent").selectOption({ label: "Boxed" });
    await form.getByLabel("Image").fill("");
    await form.getByRole("button", { name: "Make" }).click();
    await page.getByRole("status").filter({ hasText: "Made uiagentbox" }).waitFor({ timeout: T });
    const card = page.getByRole("listitem", { name: "Machine uiagentbox" });
    await card.getByText("for Boxed").waitFor();
    // The agent's form offers it (made for this agent) and saves it.
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${boxed.id}`);
    await page.getByLabel("Machine").selectOption("uiagentbox");
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByRole("heading", { name: "Past sessions" }).waitFor();
    assert.equal((await api("GET", `/v1/agents/${boxed.id}`)).machine, "uiagentbox");
    // A session runs in it: the delete is refused naming it, then done with its sessions stopped.
    const s = await api("POST", "/v1/sessions", { agentId: boxed.id, origin: "ui" });
    assert.equal(s.state, "running", JSON.stringify(s));
    await page.goto(`${URL_}/#/machines`);
    await card.getByRole("button", { name: "Delete uiagentbox" }).click();
    await page.getByRole("group", { name: "Confirm deleting uiagentbox" }).getByRole("button", { name: "Delete uiagentbox and everything in it" }).click();
    const inUse = page.getByRole("alert", { name: "uiagentbox is in use" });
    await inUse.filter({ hasText: s.id }).waitFor();
    await inUse.getByRole("button", { name: "Stop its sessions and delete" }).click();
    await card.waitFor({ state: "detached", timeout: T });
    assert.notEqual((await api("GET", `/v1/sessions/${s.id}`)).state, "running");
    // Decision 0148: "a disposable machine for each session", kept 2 s after it: its session's
    // machine listed with its badge, gone once the session has stopped and the delay passed.
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${boxed.id}`);
    await page.getByLabel("Machine").selectOption("disposable");
    await page.getByLabel("Seconds a disposable machine is kept").fill("2");
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByRole("heading", { name: "Past sessions" }).waitFor();
    const saved = await api("GET", `/v1/agents/${boxed.id}`);
    assert.equal(saved.machine, "disposable");
    assert.equal(saved.disposableDelayMs, 2000);
    const s2 = await api("POST", "/v1/sessions", { agentId: boxed.id, origin: "ui" });
    assert.equal(s2.state, "running", JSON.stringify(s2));
    await page.goto(`${URL_}/#/machines`);
    await page.reload();
    const own = page.getByRole("listitem", { name: `Machine d-${s2.id.slice(2)}` });
    await own.getByText(`disposable, session ${s2.id}`).waitFor({ timeout: T });
    await api("POST", `/v1/sessions/${s2.id}/stop`, {});
    await own.waitFor({ state: "detached", timeout: T });
    // Decision 0156: a disposable profile is a row of its own, saved as disposable:<profile>.
    await page.goto(`${URL_}/#/projects/${project.id}/agents/${boxed.id}`);
    await page.getByLabel("Machine", { exact: true }).selectOption({ label: "A machine from profile Scratch for each session" });
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await page.getByRole("heading", { name: "Past sessions" }).waitFor();
    assert.equal((await api("GET", `/v1/agents/${boxed.id}`)).machine, "disposable:scratch");
    await api("DELETE", `/v1/agents/${boxed.id}`);
  });

  await step("apps: a folder registered, deployed, its added needs and secret asked first, rolled back, opened at its own origin, deleted", async () => {
    // The sample UI-only app, written where an agent would, owned by the daemon's user.
    const owner = statSync(SCOPE);
    const folder = join(dirname(SCOPE), "hello-app");
    const from = new URL("../../../fixtures/miniapps/hello/", import.meta.url).pathname;
    const copy = (src, dst) => {
      mkdirSync(dst, { recursive: true });
      chownSync(dst, owner.uid, owner.gid);
      for (const e of readdirSync(src, { withFileTypes: true })) {
        if (e.isDirectory()) copy(join(src, e.name), join(dst, e.name));
        else {
          writeFileSync(join(dst, e.name), readFileSync(join(src, e.name)));
          chownSync(join(dst, e.name), owner.uid, owner.gid);
        }
      }
    };
    copy(from, folder);
    await page.goto(`${URL_}/#/apps`);
    await page.getByRole("heading", { name: "Apps" }).waitFor();
    await page.getByText("No apps yet.").waitFor();
    const form = page.getByRole("form", { name: "Register an app" });
    await form.getByLabel("Folder").fill(folder);
    await form.getByRole("button", { name: "Register" }).click();
    await page.getByRole("status").filter({ hasText: "Registered hello" }).waitFor();
    const card = page.getByRole("listitem", { name: "App hello" });
    await card.getByLabel("Version of hello").filter({ hasText: "not deployed" }).waitFor();
    await card.getByRole("button", { name: "Deploy 1.0.0" }).click();
    await card.getByLabel("Version of hello").filter({ hasText: "serves 1.0.0" }).waitFor();
    // The agent writes a version that reaches a host and needs a secret: shown, asked first.
    const manifest = readFileSync(join(folder, "app.toml"), "utf8")
      .replace('version = "1.0.0"', 'version = "1.1.0"') + '[needs]\negress = ["api.example.com:443"]\nsecrets = ["API_KEY"]\nnotify = true\n';
    writeFileSync(join(folder, "app.toml"), manifest);
    const adds = card.getByRole("note", { name: "What deploying hello adds" });
    await adds.getByText("egress api.example.com:443").waitFor();
    await adds.getByText("secret API_KEY").waitFor();
    await card.getByRole("button", { name: "Deploy 1.1.0" }).click();
    const allow = card.getByRole("group", { name: "Confirm what deploying hello adds" });
    await allow.getByRole("button", { name: "Allow and deploy 1.1.0" }).click();
    await page.getByRole("alert").filter({ hasText: "API_KEY has no value" }).waitFor();
    const secret = card.getByRole("form", { name: "Secret API_KEY of hello" });
    await secret.getByLabel(/API_KEY/).fill("sk-ui-app-Secret0");
    await secret.getByRole("button", { name: "Set" }).click();
    await page.getByRole("status").filter({ hasText: "Set hello's API_KEY" }).waitFor();
    await secret.getByText("API_KEY (set)").waitFor();
    await card.getByRole("button", { name: "Deploy 1.1.0" }).click();
    await allow.getByRole("button", { name: "Allow and deploy 1.1.0" }).click();
    await card.getByLabel("Version of hello").filter({ hasText: "serves 1.1.0" }).waitFor();
    await card.getByLabel("Needs of hello").filter({ hasText: "api.example.com:443" }).waitFor();
    assert.ok(!(await page.content()).includes("sk-ui-app-Secret0"), "the secret is never shown");
    await adds.waitFor({ state: "detached" });
    await card.getByLabel("Needs of hello").filter({ hasText: "may notify you" }).waitFor();
    // Notifications (H.9): the page lists the app's last ones, and one that arrives while it is
    // open is raised through the browser's Notification (recorded here: headless Chromium shows
    // none). The list is what handlerd's notify keeper writes (daemon_apps sends them for real).
    const tab2 = await ctx.newPage();
    await tab2.addInitScript(() => {
      window.__raised = [];
      window.Notification = class {
        static permission = "granted";
        static requestPermission = async () => "granted";
        constructor(title, o) { window.__raised.push(`${title} | ${o?.body ?? ""}`); }
      };
    });
    await tab2.goto(`${URL_}/#token=${TOKEN}`);
    await tab2.getByRole("heading", { name: "Projects" }).waitFor();
    await tab2.goto(`${URL_}/#/apps`);
    const notes = tab2.getByRole("region", { name: "Notifications of hello" });
    await notes.getByText("No notification yet.").waitFor();
    const kept = join(dirname(process.env.HANDLER_SECRETS_FILE), "apps/hello/notifications.json");
    writeFileSync(kept, JSON.stringify({ notifications: [{ at: new Date().toISOString(), version: "1.1.0", title: "Run logged", body: "5 km" }] }));
    await notes.getByText("Run logged").waitFor();
    const raised = await tab2.waitForFunction(() => window.__raised.length > 0 && window.__raised);
    assert.deepEqual(await raised.jsonValue(), ["hello: Run logged | 5 km"]);
    await tab2.close();
    await shot(page, "apps");
    await card.getByRole("button", { name: "Roll back to 1.0.0" }).click();
    await card.getByLabel("Version of hello").filter({ hasText: "serves 1.0.0" }).waitFor();
    // Open: a one-time login to the app's own origin, in a new tab.
    const [tab] = await Promise.all([ctx.waitForEvent("page"), card.getByRole("button", { name: "Open hello" }).click()]);
    await tab.getByRole("heading", { name: "Hello from version 1" }).waitFor();
    const appUrl = new URL(tab.url());
    assert.equal(appUrl.hostname, "hello.localhost");
    assert.equal(appUrl.pathname, "/");
    // Its script ran under the app's policy (no inline script); Handler's API is not there.
    await tab.locator("#greeting[data-ready='yes']").waitFor();
    const v1 = await tab.evaluate(async () => {
      const r = await fetch("/v1/apps");
      return `${r.status} ${r.headers.get("content-type")}`;
    });
    assert.equal(v1, "200 text/html", "the app's own page, never Handler's API");
    await tab.close();
    await card.getByRole("button", { name: "Log" }).click();
    await card.getByLabel("Log of hello").filter({ hasText: "rolled back to 1.0.0" }).waitFor();
    await card.getByRole("button", { name: "Delete hello" }).click();
    await card.getByRole("group", { name: "Confirm deleting hello" }).getByRole("button", { name: "Delete hello, its data and secrets" }).click();
    await card.waitFor({ state: "detached" });
    assert.deepEqual(await api("GET", "/v1/apps"), []);
    assert.ok(readFileSync(join(folder, "app.toml"), "utf8").includes("1.1.0"), "the folder stays");
  });

  await step("remote control: a session shared by its switch, a gateway set up, a phone paired from the QR code's page, attached and prompting", async () => {
    const id = sessionUrl.split("/sessions/")[1];
    await page.goto(sessionUrl);
    await page.waitForSelector("body[data-session-ready]");
    const share = page.getByLabel("Share with my devices");
    assert.equal(await share.isChecked(), false);
    await share.check();
    for (let i = 0; i < 50 && !(await api("GET", `/v1/sessions/${id}`)).remote; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal((await api("GET", `/v1/sessions/${id}`)).remote, true);
    await page.goto(`${URL_}/#/settings/remote`);
    const light = page.getByLabel("Remote control light");
    assert.equal(await light.getAttribute("data-state"), "off");
    // A plain-http gateway off loopback is refused, the field named.
    await page.getByLabel("Gateway URL").fill("http://gw.example.com");
    await page.getByRole("button", { name: "Set up" }).click();
    await page.getByRole("alert").filter({ hasText: "gateway:" }).waitFor();
    await page.getByLabel("Gateway URL").fill(process.env.HANDLER_GATEWAY_URL);
    await page.getByRole("button", { name: "Set up" }).click();
    await page.locator('[data-state="idle"]').waitFor();
    await page.getByText("1 shared session(s)").waitFor();
    await page.getByRole("button", { name: "Pair a device" }).click();
    const code = await page.getByTestId("pairing-code").innerText();
    assert.match(code, /^[A-Z2-7]{4}(-[A-Z2-7]{4}){4}$/);
    const qr = page.getByAltText("QR code to pair a device");
    await qr.waitFor();
    assert.ok(await qr.evaluate((img) => img.complete && img.naturalWidth >= 200), "the QR code renders");
    await shot(page, "remote");
    // A phone: the gateway's device page pairs from the QR code's fragment (then drops it from
    // the address bar), lists the shared session, attaches and prompts; the light goes ok and a
    // local tab sees the phone's prompt.
    const phone = await ctx.newPage();
    await phone.setViewportSize({ width: 390, height: 760 });
    await phone.goto(`${process.env.HANDLER_GATEWAY_URL}/device#code=${code}`);
    await phone.getByRole("button", { name: "Pair" }).click();
    await phone.waitForSelector("body[data-paired]", { timeout: T });
    assert.equal(new URL(phone.url()).hash, "");
    await phone.getByRole("button", { name: `Open ${id}` }).click();
    await phone.waitForSelector(`body[data-attached="${id}"]`, { timeout: T });
    await page.locator('[data-state="ok"]').waitFor({ timeout: T });
    await phone.getByLabel("Message").fill("hello from the phone");
    await phone.getByRole("button", { name: "Send" }).click();
    await phone.locator(".msg.agent", { hasText: "hello from the phone" }).waitFor({ timeout: T });
    await shot(phone, "remote-device");
    await page.goto(sessionUrl);
    await page.waitForSelector("body[data-session-ready]");
    await page.locator('[data-kind="user"]', { hasText: "hello from the phone" }).waitFor({ timeout: T });
    await page.goto(`${URL_}/#/settings/remote`);
    await page.getByRole("button", { name: "Turn off" }).click();
    await page.locator('[data-state="off"]').waitFor();
    // The phone is detached and revoked: its page says so and offers to pair again.
    await phone.getByRole("alert").filter({ hasText: "revoked" }).waitFor({ timeout: T });
    await phone.close();
    await page.goto(sessionUrl);
    await page.waitForSelector("body[data-session-ready]");
    await page.getByLabel("Share with my devices").uncheck();
    for (let i = 0; i < 50 && (await api("GET", `/v1/sessions/${id}`)).remote; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal((await api("GET", `/v1/sessions/${id}`)).remote, false);
  });

  await step("the token never appears in a request URL", async () => {
    const all = [...urls, ...wsUrls];
    assert.ok(all.length > 10, `requests seen: ${all.length}`);
    // What reaches the server is the URL without its fragment (`#token=…` stays in the browser).
    const leaked = all.filter((u) => u.split("#")[0].includes(TOKEN));
    assert.deepEqual(leaked, []);
  });

  // The first load: index.html and what it loads, gzipped.
  const dist = new URL("../dist/", import.meta.url).pathname;
  const html = readFileSync(join(dist, "index.html"));
  let bytes = gzipSync(html).length;
  for (const f of readdirSync(join(dist, "assets"))) bytes += gzipSync(readFileSync(join(dist, "assets", f))).length;
  console.log(JSON.stringify({ passed, bundleGzipBytes: bytes, firstSessionRenderMs: firstRenderMs, reloadSessionRenderMs: reloadRenderMs, longReplayMs, longReplayMeasureMs, longReplaySplit, consoleErrors: consoleErrors.length, consoleErrorTexts: [...new Set(consoleErrors)].slice(0, 20) }));
} catch (e) {
  console.error(`FAILED after [${passed.join(", ")}]: ${e?.stack ?? e}`);
  const failure = join(tmpdir(), `handler-ui-failure-${process.pid}.png`);
  await ctx.pages()[0]?.screenshot({ path: failure }).then(() => console.error(`the page then: ${failure}`)).catch(() => {});
  exit = 1;
} finally {
  await ctx.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(exit);
