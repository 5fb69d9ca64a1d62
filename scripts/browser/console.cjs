// Drives the console in Debian's headless Chromium for tests/console.rs, and prints what the
// browser saw as one JSON object on stdout. The Rust test sets up the daemon and its timers,
// runs this, and judges the figures against the API's and the store's.
//
// Input: one JSON argument with url, chromium, operatorToken, tenantToken, tenant,
// otherTenant, hostileId, cancelId, correlationId and screenshots (a directory, or null).
"use strict";

const { chromium } = require("playwright-core");

const input = JSON.parse(process.argv[2]);
const WAIT = { timeout: 15000 };

async function main() {
  const browser = await chromium.launch({
    executablePath: input.chromium,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  const out = { dialogs: 0 };
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    // Counts the page's Content-Security-Policy violations, from before its first script.
    await context.addInitScript(() => {
      window.__violations = [];
      document.addEventListener("securitypolicyviolation", (e) =>
        window.__violations.push(e.violatedDirective),
      );
    });
    const page = await context.newPage();
    page.on("dialog", async (dialog) => {
      out.dialogs += 1;
      await dialog.dismiss();
    });
    const shot = async (name) => {
      if (input.screenshots) {
        await page.screenshot({ path: `${input.screenshots}/${name}.png`, fullPage: true });
      }
    };
    const text = (selector) => page.locator(selector).first().textContent(WAIT);
    const go = (hash) => page.evaluate((h) => (location.hash = h), hash);
    const statusWith = async (part) => {
      await page.waitForFunction(
        (p) => document.getElementById("status").textContent.includes(p),
        part,
        WAIT,
      );
      return (await text("#status")).trim();
    };

    // The operator's overview.
    await page.goto(`${input.url}/console`);
    await page.fill("#token", input.operatorToken);
    await page.click("#sign-in-form button[type=submit]");
    await page.waitForSelector("#tenants tbody tr", WAIT);
    await page.waitForSelector("#actors tbody tr", WAIT);
    out.overview = await page.$$eval("#tenants tbody tr", (rows) =>
      rows.map((r) => {
        const cells = [...r.children].map((c) => c.textContent);
        return {
          tenant: cells[0],
          scheduled: Number(cells[1]),
          overdue: Number(cells[2]),
          firedLastMinute: Number(cells[4]),
          p50: cells[5],
          p99: cells[6],
          pendingOfQuota: cells[9],
        };
      }),
    );
    out.actors = await page.$$eval("#actors tbody tr", (rows) =>
      rows.map((r) => r.children[0].textContent),
    );
    out.lanes = await page.$$eval("#lanes tbody tr", (rows) =>
      rows.map((r) => r.children[0].textContent),
    );
    await shot("overview");

    // A tenant's page: its figures, its forecast chart, its timers.
    await page.click(`#tenants tbody tr[data-tenant="${input.tenant}"] a`);
    await page.waitForFunction(
      () => document.getElementById("stat-scheduled").textContent !== "",
      null,
      WAIT,
    );
    await page.waitForSelector("#forecast-chart canvas", WAIT);
    await page.waitForSelector("#lateness-chart canvas", WAIT);
    await page.waitForSelector("#week-chart canvas", WAIT);
    await page.waitForSelector("#timers tbody tr", WAIT);
    out.tenantScheduled = Number(await text("#stat-scheduled"));
    out.tenantAccepted = Number(await text("#act-accepted"));
    out.tenantQuota = (await text("#quota-pending")).trim();
    out.tenantOverdue = Number(await text("#stat-overdue"));
    out.timers = await page.$$eval("#timers tbody tr", (rows) =>
      rows.map((r) => r.dataset.serviceCallId),
    );
    await shot("tenant");

    // The timer whose id and data are built to attack the page: shown as text, never run.
    await page
      .locator("#timers tbody tr", { hasText: input.hostileId })
      .locator("a")
      .click(WAIT);
    await page.waitForFunction(
      () => document.getElementById("timer-data").textContent.includes("__pwned"),
      null,
      WAIT,
    );
    out.hostile = {
      idShown: await text("#timer-id"),
      traceShown: await page.$$eval("#timer-fields tr", (rows) =>
        rows
          .filter((r) => r.children[0].textContent === "Trace id")
          .map((r) => r.children[1].textContent)
          .join(""),
      ),
      history: await page.$$eval("#timer-history li", (items) => items.map((i) => i.textContent)),
      dataShown: await text("#timer-data"),
      pwned: await page.evaluate(() => window.__pwned === 1),
      images: await page.evaluate(() => document.querySelectorAll("img").length),
    };
    await shot("timer");

    // The page's policy forbids inline script: one added now does not run, and the browser
    // reports the violation.
    out.inlineRan = await page.evaluate(() => {
      const script = document.createElement("script");
      script.textContent = "window.__inline = 1";
      document.body.appendChild(script);
      return window.__inline === 1;
    });
    out.violations = await page.evaluate(() => window.__violations.slice());

    // Cancel one timer from its page.
    await go(`#/tenant/${encodeURIComponent(input.tenant)}/timer/${encodeURIComponent(input.cancelId)}`);
    // Its own page, not the one shown before it (whose button the page hides as it leaves it).
    await page.waitForFunction(
      (id) =>
        !document.getElementById("timer-cancel").hidden &&
        [...document.querySelectorAll("#timer-fields tr")].some(
          (r) => r.children[0].textContent === "Service call id" && r.children[1].textContent === id,
        ),
      input.cancelId,
      WAIT,
    );
    await page.click("#timer-cancel");
    out.cancelOne = await statusWith("Cancel:");
    // The timer the cancel's reply showed, as its page renders it (for a failure's message).
    out.cancelOneState = (await text("#timer-fields")).replace(/\s+/g, " ").trim();

    // Cancel many by the current filter: the dry run's count first, then the confirmation.
    await go(`#/tenant/${encodeURIComponent(input.tenant)}`);
    await page.waitForSelector("#filter", { state: "visible", ...WAIT });
    await page.fill("#f-correlation", input.correlationId);
    await page.click("#filter button[type=submit]");
    await page.click("#cancel-many");
    await page.waitForSelector("#cancel-many-confirm:not([hidden])", WAIT);
    out.dryRun = (await text("#cancel-many-count")).trim();
    await page.click("#cancel-many-confirm");
    out.cancelMany = await statusWith("cancelled.");

    // A tenant's token: its own tenant only, whatever the page asks for.
    await page.click("#sign-out");
    await page.fill("#token", input.tenantToken);
    await page.click("#sign-in-form button[type=submit]");
    await page.waitForFunction(
      (t) =>
        document.getElementById("who").textContent === `tenant ${t}` &&
        document.getElementById("tenant-name").textContent === t &&
        document.getElementById("stat-scheduled").textContent !== "",
      input.tenant,
      WAIT,
    );
    out.tenantWho = (await text("#who")).trim();
    await go(`#/tenant/${encodeURIComponent(input.otherTenant)}`);
    out.otherTenantPage = await statusWith("(403)");
    out.otherTenantAction = await page.evaluate(async ([other, token]) => {
      const response = await fetch(`/console/api/tenants/${other}/cancel-many`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: JSON.stringify({ all: true }),
      });
      return response.status;
    }, [input.otherTenant, input.tenantToken]);
    out.tenantOverview = await page.evaluate(async (token) => {
      const response = await fetch("/console/api/overview", {
        headers: { Authorization: `Bearer ${token}` },
      });
      const body = await response.json();
      return { daemon: body.daemon !== undefined, tenants: body.tenants.map((t) => t.tenantId) };
    }, input.tenantToken);
    out.tokenInUrl = page.url().includes(input.tenantToken);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
