// Development only: the first steps of suite.mjs against `npm run dev` (no sandbox needed).
import { chromium } from "playwright-core";
const [url, token, scope] = process.argv.slice(2);
const b = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
const page = await b.newPage();
page.setDefaultTimeout(8000);
page.on("console", (m) => console.log("console", m.type(), m.text()));
page.on("pageerror", (e) => console.log("pageerror", e.message));
try {
  await page.goto(`${url}/#token=${token}`);
  await page.getByRole("heading", { name: "Projects" }).waitFor();
  console.log("url", page.url());
  await page.getByRole("button", { name: "New project" }).click();
  const form = page.getByRole("form", { name: "New project" });
  await form.getByLabel("Folder", { exact: true }).fill(scope);
  await form.getByLabel("Name (default: the folder's)").fill("Web app");
  await form.getByLabel("Locked down").check();
  await form.getByRole("button", { name: "Create project" }).click();
  await page.getByRole("heading", { name: "Web app" }).waitFor();
  await page.getByText("network: none").waitFor();
  await page.getByText("permissions: ask").waitFor();
  await page.getByRole("link", { name: "Edit" }).click();
  await page.getByLabel("Permissions").selectOption("bypass");
  await page.getByRole("button", { name: "Save", exact: true }).click();
  const risks = page.getByRole("alert", { name: "Risks" });
  await risks.waitFor();
  console.log("risks", await risks.innerText());
  await risks.getByRole("button", { name: "Confirm and save" }).click();
  await page.getByText("permissions: bypass").waitFor();
  await page.getByRole("link", { name: "Settings" }).click();
  await page.getByText("perso").first().waitFor();
  console.log("OK");
} catch (e) {
  console.log("FAIL", e.message);
  console.log(await page.locator("main").innerHTML());
}
await b.close();
