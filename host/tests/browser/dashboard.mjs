// The loopbox serve dashboard in a real browser: Debian's chromium, driven by
// playwright-core (no browser download). host/tests/it/serve/web.rs starts the
// real server and runs `node dashboard.mjs SCENARIO` with:
//
//   LOOPBOX_URL        the server, http://127.0.0.1:PORT
//   LOOPBOX_TOKENS     {"viewer": "lbx_…", "operator": …, "approver": …, "admin": …} of one tenant
//   LOOPBOX_ARTIFACTS  where screenshots go (target/artifacts/dashboard)
//
// Each scenario prints `RESULT {json}` lines for the Rust side to check
// against the store, then `1 passed, 0 failed` (or the failure and exit 1).

import { chromium } from "playwright-core";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";

const BASE = process.env.LOOPBOX_URL;
const TOKENS = JSON.parse(process.env.LOOPBOX_TOKENS || "{}");
const ARTIFACTS = process.env.LOOPBOX_ARTIFACTS || join(tmpdir(), "loopbox-dashboard");
const WAIT = 30_000;
mkdirSync(ARTIFACTS, { recursive: true });

const result = (v) => console.log("RESULT " + JSON.stringify(v));

/// The API with a bearer token (setting up, and checking what a click did).
async function api(role, method, path, body) {
  const r = await fetch(BASE + path, {
    method,
    headers: { Authorization: "Bearer " + TOKENS[role], "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  return { status: r.status, json, text };
}

/// Start a probe run through the API; its id.
async function startProbe(op) {
  const r = await api("operator", "POST", "/api/v1/runs", { policy: "probe", workspace: "proj", input: op });
  assert.equal(r.status, 201, r.text);
  return r.json.id;
}

/// Poll the API until `done(view)` holds for run `id`; the view.
async function waitRun(id, done, what) {
  const until = Date.now() + WAIT;
  for (;;) {
    const r = await api("viewer", "GET", "/api/v1/runs/" + id);
    assert.equal(r.status, 200, r.text);
    if (done(r.json)) return r.json;
    if (Date.now() > until) throw new Error(`run ${id} never ${what}: ${r.text}`);
    await new Promise((ok) => setTimeout(ok, 100));
  }
}

const pendingOf = (v) => (v.approvals || []).find((a) => a.status === "pending");

async function withBrowser(fn) {
  const profile = mkdtempSync(join(tmpdir(), "loopbox-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
    viewport: { width: 1200, height: 860 },
  });
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(WAIT);
  const dialogs = [];
  page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss(); });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  try {
    await fn(page, { dialogs, errors });
  } catch (e) {
    await page.screenshot({ path: join(ARTIFACTS, "failed-" + scenarioName + ".png"), fullPage: true }).catch(() => {});
    throw e;
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

async function shot(page, name, fullPage = true) {
  await page.screenshot({ path: join(ARTIFACTS, name + ".png"), fullPage });
}

async function signIn(page, role) {
  await page.goto(BASE + "/login");
  await page.fill("#token", TOKENS[role]);
  await Promise.all([page.waitForURL(BASE + "/runs"), page.click("button[type=submit]")]);
  assert.match(await page.textContent("header.top"), new RegExp(role + "-1"));
}

/// Start a run from the dashboard's form; the run's id (from the page it lands on).
async function startFromForm(page, input) {
  await page.click("text=Start a run");
  await page.waitForURL(/\/runs\/new$/);
  await page.selectOption("#policy", "probe");
  await page.fill("#workspace", "proj");
  await page.fill("#input", JSON.stringify(input));
  await Promise.all([page.waitForURL(/\/runs\/r[0-9a-f]+\?note=started$/), page.click("button:has-text('Start')")]);
  return new URL(page.url()).pathname.split("/")[2];
}

const scenarios = {
  // Sign in, start a run of a policy that asks to run a command, see the approval
  // appear, click approve, see the command's output in the live log.
  async approve() {
    const marker = "approved from the dashboard " + Date.now();
    await withBrowser(async (page) => {
      await signIn(page, "approver");
      const run = await startFromForm(page, { op: "exec", argv: ["tee", "-a", "count.txt"], stdin: marker + "\n" });
      // The run page follows the run: the approval appears without a reload.
      const card = page.locator("#approvals article.approval");
      await card.waitFor();
      assert.match(await card.locator("[data-field=command]").textContent(), /^tee -a count\.txt$/);
      const digest = (await card.locator("[data-field=digest]").textContent()).trim();
      const v = await waitRun(run, (v) => pendingOf(v), "asked");
      assert.equal(digest, pendingOf(v).digest, "the card names the digest of the request");
      await shot(page, "run-waiting");
      // The inbox has it too, with the exact request.
      await page.click("header.top >> text=Approvals");
      const inboxCard = page.locator(`#approval-${pendingOf(v).id}`);
      await inboxCard.waitFor();
      assert.match(await inboxCard.textContent(), /\/usr\/bin\/tee/);
      await shot(page, "approvals");
      await page.goto(BASE + "/runs/" + run);
      await page.fill(`#reason-${pendingOf(v).id}`, "appending is fine");
      await Promise.all([
        page.waitForURL(new RegExp(`/runs/${run}\\?note=approved$`)),
        page.click("#approvals button.approve"),
      ]);
      // The command's output, in the live log.
      await page.waitForFunction((m) => document.getElementById("log").textContent.includes(m), marker);
      await page.locator("#log").getByText("the run ended: done").waitFor();
      await page.locator("#summary .s-done").waitFor();
      await shot(page, "run-approved");
      const done = await waitRun(run, (v) => v.status === "done", "ended");
      assert.equal(done.approvals[0].status, "approved");
      assert.equal(done.approvals[0].reason, "appending is fine");
      assert.equal(done.journal[0].stdout, marker + "\n");
      result({ run, marker });
    });
  },

  // Click deny with a reason: the policy hears `declined`, and the page says so.
  async deny() {
    const marker = "denied from the dashboard " + Date.now();
    await withBrowser(async (page) => {
      await signIn(page, "approver");
      const run = await startFromForm(page, { op: "exec", argv: ["tee", "-a", "count.txt"], stdin: marker + "\n" });
      const v = await waitRun(run, (v) => pendingOf(v), "asked");
      const id = pendingOf(v).id;
      await page.click("header.top >> text=Approvals");
      await page.locator(`#approval-${id}`).waitFor();
      await page.fill(`#reason-${id}`, "not today");
      await Promise.all([
        page.waitForURL(/\/approvals\?note=denied$/),
        page.click(`#approval-${id} button.deny`),
      ]);
      assert.equal(await page.locator(`#approval-${id}`).count(), 0, "gone from the pending inbox");
      await page.goto(BASE + "/runs/" + run);
      await page.locator("#summary .s-done").waitFor();
      const journal = await page.locator("#journal").textContent();
      assert.match(journal, /declined/);
      assert.match(journal, /not today/);
      assert.match(await page.locator("#summary .outcome").textContent(), /declined/);
      await shot(page, "run-denied");
      const done = await waitRun(run, (v) => v.status === "done", "ended");
      assert.equal(done.outcome.data.err.kind, "declined");
      assert.match(done.outcome.data.err.message, /not today/);
      result({ run, marker });
    });
  },

  // A form posted without its CSRF token, or with a forged one, is refused and changes nothing.
  async csrf() {
    const run = await startProbe({ op: "exec", argv: ["tee", "-a", "count.txt"], stdin: "csrf\n" });
    const v = await waitRun(run, (v) => pendingOf(v), "asked");
    const id = pendingOf(v).id;
    await withBrowser(async (page) => {
      // A sign-in form whose CSRF field is not its cookie's is refused: no session.
      await page.goto(BASE + "/login");
      await page.locator("form input[name=csrf_token]").evaluate((i) => { i.value = "forged"; });
      await page.fill("#token", TOKENS.approver);
      const [signIn403] = await Promise.all([
        page.waitForResponse((r) => r.url() === BASE + "/login" && r.request().method() === "POST"),
        page.click("button[type=submit]"),
      ]);
      assert.equal(signIn403.status(), 403);
      assert.match(await page.locator("main").textContent(), /sign-in form's CSRF token is missing or wrong/);
      const cookies = await page.context().cookies();
      assert.ok(!cookies.some((c) => c.name === "loopbox_session"), "no session");
      await signIn(page, "approver");
      for (const [how, forge] of [
        ["without", (f) => f.querySelector("input[name=csrf_token]").remove()],
        ["forged", (f) => { f.querySelector("input[name=csrf_token]").value = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"; }],
      ]) {
        await page.goto(BASE + "/approvals");
        const form = page.locator(`#approval-${id} form.decide`);
        await form.evaluate(forge);
        const [resp] = await Promise.all([
          page.waitForResponse((r) => r.url().includes(`/approvals/${id}/approve`)),
          page.click(`#approval-${id} button.approve`),
        ]);
        assert.equal(resp.status(), 403, how);
        assert.match(await page.locator("main").textContent(), /CSRF token is missing or wrong/, how);
        if (how === "forged") await shot(page, "csrf-refused");
      }
    });
    // Nothing changed: the approval still waits, the run too.
    const after = await waitRun(run, () => true, "read");
    assert.equal(after.status, "waiting");
    assert.equal(pendingOf(after)?.id, id);
    result({ run, approval: id });
    // Leave the tenant's inbox clean.
    const r = await api("approver", "POST", `/api/v1/approvals/${id}/deny`, { reason: "csrf test done" });
    assert.equal(r.status, 200, r.text);
  },

  // A viewer sees no button it cannot use, and the server refuses the post anyway.
  async viewer() {
    const run = await startProbe({ op: "exec", argv: ["tee", "-a", "count.txt"], stdin: "viewer\n" });
    const v = await waitRun(run, (v) => pendingOf(v), "asked");
    const id = pendingOf(v).id;
    await withBrowser(async (page) => {
      await signIn(page, "viewer");
      assert.equal(await page.locator("text=Start a run").count(), 0, "no start button");
      assert.equal(await page.locator("header.top >> text=Tokens").count(), 0, "no tokens page");
      await page.goto(BASE + "/approvals");
      const card = page.locator(`#approval-${id}`);
      await card.waitFor();
      assert.match(await card.textContent(), /tee -a count\.txt/);
      assert.equal(await card.locator("button").count(), 0, "no approve or deny button");
      await shot(page, "viewer-approvals");
      await page.goto(BASE + "/runs/" + run);
      assert.equal(await page.locator("main button").count(), 0, "no button on the run page");
      // The server refuses the act anyway, with the session's real CSRF token.
      const refused = await page.evaluate(async ([id, digest]) => {
        const csrf = document.querySelector("form.who input[name=csrf_token]").value;
        const body = new URLSearchParams({ csrf_token: csrf, digest, reason: "a viewer tries" });
        const r = await fetch(`/approvals/${id}/approve?from=inbox`, { method: "POST", body });
        return { status: r.status, text: await r.text() };
      }, [id, pendingOf(v).digest]);
      assert.equal(refused.status, 403, refused.text);
      assert.match(refused.text, /has the viewer role; to approve an action it needs the approver role/);
      const r = await page.goto(BASE + "/tokens");
      assert.equal(r.status(), 403);
    });
    const after = await waitRun(run, () => true, "read");
    assert.equal(pendingOf(after)?.id, id, "still pending");
    result({ run, approval: id });
    const r = await api("approver", "POST", `/api/v1/approvals/${id}/deny`, { reason: "viewer test done" });
    assert.equal(r.status, 200, r.text);
  },

  // Words a policy logs and a command it runs render as text, never as markup.
  async xss() {
    const img = `"><img src=x onerror="window.__pwned='img'">`;
    const script = `<script>window.__pwned='script'</script>`;
    const logged = await startProbe({ op: "log", text: script + " " + img });
    const ran = await startProbe({ op: "exec", argv: ["echo", img, script] });
    // Words that reorder themselves, or start a line that looks like the host's.
    const reversed = "\u202etxt.exe";
    const bidi = await startProbe({ op: "log", text: "ok " + reversed + "\n[host] info: forged" });
    const printed = await startProbe({ op: "exec", argv: ["echo", reversed] });
    await waitRun(logged, (v) => v.status === "done", "ended");
    await waitRun(ran, (v) => v.status === "done", "ended");
    await waitRun(bidi, (v) => v.status === "done", "ended");
    await waitRun(printed, (v) => v.status === "done", "ended");
    await withBrowser(async (page, { dialogs }) => {
      const violations = [];
      await page.exposeFunction("reportViolation", (v) => violations.push(v));
      await page.addInitScript(() => {
        document.addEventListener("securitypolicyviolation", (e) => window.reportViolation(e.violatedDirective));
      });
      await signIn(page, "viewer");
      for (const run of [logged, ran]) {
        const resp = await page.goto(BASE + "/runs/" + run);
        assert.match(resp.headers()["content-security-policy"], /script-src 'self'/);
        await page.locator("#log").getByText("the run ended: done").waitFor();
        const seen = await page.evaluate(() => ({
          pwned: window.__pwned,
          imgs: document.querySelectorAll("img").length,
          scripts: [...document.scripts].map((s) => s.getAttribute("src")),
          log: document.getElementById("log").textContent,
          main: document.querySelector("main").textContent,
        }));
        assert.equal(seen.pwned, undefined);
        assert.equal(seen.imgs, 0, "no img element");
        assert.deepEqual(seen.scripts, ["/assets/app.js"]);
        assert.ok(seen.main.includes(img) || seen.log.includes(img), "the words are shown as text");
        if (run === logged) assert.ok(seen.log.includes(script), seen.log);
        if (run === ran) assert.ok(seen.log.includes(img), "the command's output, as text");
      }
      for (const run of [bidi, printed]) {
        await page.goto(BASE + "/runs/" + run);
        await page.locator("#log").getByText("the run ended: done").waitFor();
        const log = await page.evaluate(() => document.getElementById("log").textContent);
        assert.ok(!log.includes("\u202e"), "a bidi override reached the live log: " + JSON.stringify(log));
        assert.ok(log.includes("\\u{202e}txt.exe"), "shown as an escape: " + JSON.stringify(log));
        if (run === bidi) {
          assert.ok(!log.includes("\n[host] info: forged"), "a forged line: " + JSON.stringify(log));
          assert.ok(log.includes("\\n[host] info: forged"), JSON.stringify(log));
        }
      }
      await page.goto(BASE + "/runs");
      await shot(page, "xss-runs");
      assert.deepEqual(dialogs, []);
      assert.deepEqual(violations, [], "nothing even tried to run");
    });
    result({ runs: [logged, ran, bidi, printed] });
  },

  // Issue 45, item 11 (tenant `webloop`): a YAML loop of the workspace started
  // from the form; its page names the loop, follows its path of states and the
  // state it is in, and shows its journal as commands and outcomes. Meanwhile,
  // on the form (a page that does not refresh), the navigation's approval count
  // shows an approval asked elsewhere without a reload.
  async loop() {
    await withBrowser(async (page) => {
      await signIn(page, "approver");
      await page.click("text=Start a run");
      await page.waitForURL(/\/runs\/new$/);
      await page.fill("#loop-workspace", "proj");
      await Promise.all([page.waitForURL(/workspace=proj/), page.click("button:has-text('List its loops')")]);
      assert.deepEqual(await page.locator("#loop option").allTextContents(), ["loops/tidy.yaml"]);
      assert.equal(await page.locator("#pending-count").isVisible(), false, "no approval pending yet");
      const asking = await startProbe({ op: "exec", argv: ["tee", "-a", "count.txt"], stdin: "asked\n" });
      await page.locator("#pending-count").waitFor({ state: "visible" });
      assert.equal((await page.textContent("#pending-count")).trim(), "1");
      await shot(page, "loop-form-pending");
      await page.fill("#loop-input", JSON.stringify({ seconds: "3" }));
      await Promise.all([
        page.waitForURL(/\/runs\/r[0-9a-f]+\?note=started$/),
        page.click("button:has-text('Start the loop')"),
      ]);
      const run = new URL(page.url()).pathname.split("/")[2];
      assert.match(await page.textContent("h1"), /^tidy /);
      // The page follows the loop: the state it is in while its `sleep` runs.
      await page.locator("#summary .loop", { hasText: "In state wait" }).waitFor();
      assert.deepEqual(await page.locator("#summary ol.path li").allTextContents(), ["look", "wait"]);
      await shot(page, "loop-running");
      await page.locator("#summary .s-done").waitFor();
      assert.deepEqual(
        await page.locator("#summary ol.path li").allTextContents(),
        ["look", "wait", "check", "fixed", "done"]);
      const journal = await page.textContent("#journal");
      assert.match(journal, /cat nothing\.txt/);
      assert.match(journal, /no \(exit 1\) → fixed/, "the verdict and the route");
      assert.doesNotMatch(journal, /"exec"|\{"/, "commands, not request JSON");
      await shot(page, "loop-done");
      // Denied: the count goes again, on this page that no longer refreshes.
      const v = await waitRun(asking, (v) => pendingOf(v), "asked");
      const r = await api("approver", "POST", `/api/v1/approvals/${pendingOf(v).id}/deny`, { reason: "loop test done" });
      assert.equal(r.status, 200, r.text);
      await page.locator("#pending-count").waitFor({ state: "hidden" });
      result({ run, asking });
    });
  },

  // A phone: every page fits 390 px without scrolling sideways.
  async phone() {
    const long = "x".repeat(300);
    const big = await startProbe({ op: "exec", argv: ["echo", long + "/" + long] });
    await waitRun(big, (v) => v.status === "done", "ended");
    const asks = await startProbe({ op: "exec", argv: ["tee", "-a", "count.txt"], stdin: long + "\n" });
    const v = await waitRun(asks, (v) => pendingOf(v), "asked");
    await withBrowser(async (page) => {
      await page.setViewportSize({ width: 390, height: 844 });
      await signIn(page, "admin");
      for (const [path, name] of [
        ["/runs", "runs"], ["/runs/" + big, "run"], ["/runs/" + asks, "run-waiting"], ["/approvals", "approvals"],
        ["/policies", "policies"], ["/audit", "audit"], ["/tokens", "tokens"], ["/runs/new", "start"],
      ]) {
        await page.goto(BASE + path);
        const w = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
        await shot(page, "phone-" + name, false);
        assert.ok(w[0] <= 390 && w[1] === 390, `${path} is ${w[0]} px wide at 390`);
      }
    });
    const r = await api("approver", "POST", `/api/v1/approvals/${pendingOf(v).id}/deny`, { reason: "phone test done" });
    assert.equal(r.status, 200, r.text);
    result({ runs: [big, asks] });
  },
};

const scenarioName = process.argv[2];
const run = scenarios[scenarioName];
if (!run) {
  console.error(`usage: node dashboard.mjs ${Object.keys(scenarios).join("|")}`);
  process.exit(2);
}
try {
  await run();
  console.log(`ok - ${scenarioName}`);
  console.log("1 passed, 0 failed");
} catch (e) {
  console.log(`not ok - ${scenarioName}: ${e.stack || e}`);
  console.log("0 passed, 1 failed");
  process.exit(1);
}
