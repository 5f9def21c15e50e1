import { FIRST_PAGE_BUDGET_BYTES } from "../../src/modules/dashboard/assets";
// The dashboard in real headless Chromium, signed in through a real OpenID provider (authorization
// code with PKCE), against the whole service on a loopback port. Screenshots go to test/screenshots/.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Browser, Page } from "playwright-core";
import { demoGTIN } from "../../src/modules/ingest/demo-data";
import { CLIENT_ID, CLIENT_SECRET, startTestOpenIDProvider, type TestOpenIDProvider } from "../auth/oidc-provider";
import { fetchInPage, heading, launchChromium, openPage, reservePort, screenshot, startTestServer, type TestServer, type WatchedPage } from "./harness";

const BROWSER_TEST_MS = 90_000;
const FRESH_GTIN = demoGTIN(1); // the GTIN the quickstart's curl looks up
const BILLING_RETURN = /\/dashboard\/billing(\?checkout=success)?$/;

let browser: Browser;
let provider: TestOpenIDProvider;
let server: TestServer;
const pages: WatchedPage[] = [];

beforeAll(async () => {
  browser = await launchChromium();
  const reserved = reservePort();
  const port = reserved.port;
  provider = await startTestOpenIDProvider(
    {
      ada: { email: "ada@example.com", name: "Ada Lovelace" },
      grace: { email: "grace@example.com", name: "Grace Hopper" },
      alan: { email: "alan@example.com", name: "Alan Turing" },
      barbara: { email: "barbara@example.com", name: "Barbara Liskov" },
      marie: { email: "marie@example.com", name: "Marie Curie" },
    },
    { redirectURIs: [`http://127.0.0.1:${port}/api/v1/auth/oidc/callback`], requirePKCE: true },
  );
  await reserved.release();
  server = await startTestServer(port, { OIDC_ISSUER: provider.issuer, OIDC_CLIENT_ID: CLIENT_ID, OIDC_CLIENT_SECRET: CLIENT_SECRET });
  const now = Date.now();
  await server.services.store.applyFeedRecords(
    [
      {
        product: { gtin: FRESH_GTIN, title: "Wireless Mouse", brand: "Acme" },
        offer: {
          merchantId: "m-alpha",
          merchantName: "Alpha",
          priceAmount: 1299,
          currency: "EUR",
          shippingAmount: null,
          availability: "in_stock",
          condition: "new",
          url: null,
          observedAt: now - 60_000,
        },
      },
    ],
    now,
  );
}, BROWSER_TEST_MS);

afterAll(async () => {
  for (const { context } of pages) await context.close().catch(() => undefined);
  await browser?.close();
  await server?.stop();
  await provider?.close();
});

async function newPage(locale = "en-GB"): Promise<WatchedPage> {
  const watched = await openPage(browser, { locale, origin: server.url });
  pages.push(watched);
  return watched;
}

/** Signs in from the dashboard's sign-in page through the provider's login and consent pages; ends on `landing`. */
async function signInThroughProvider(page: Page, account: string, landing = "/dashboard/keys"): Promise<void> {
  await page.getByRole("link", { name: "Sign in with your identity provider" }).click();
  await page.waitForURL(`${provider.issuer}/interaction/**`);
  await page.locator('input[name="login"]').fill(account);
  await page.locator('input[name="password"]').fill("any password");
  await page.locator('button[type="submit"]').click();
  await page.getByRole("button", { name: "Continue" }).click();
  await page.waitForURL(`${server.url}${landing}`);
  await heading(page);
}

/** Status code of a request with an API key, straight to the service. */
async function statusWithKey(secret: string, path = "/api/v1/customer/billing/balance"): Promise<number> {
  return (await fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${secret}` } })).status;
}

/** Presses Tab until `isThere` holds in the page (at most 30 times). */
async function tabUntil(page: Page, isThere: () => boolean): Promise<void> {
  for (let presses = 0; presses < 30; presses++) {
    if (await page.evaluate(isThere)) return;
    await page.keyboard.press("Tab");
  }
  throw new Error("Tab never reached the element");
}

function keyRow(page: Page, prefix: string) {
  return page.locator("tbody tr", { has: page.locator("code", { hasText: prefix }) });
}

describe("the customer dashboard in Chromium", () => {
  test(
    "a customer signs in through the OpenID provider, creates a key, reads its secret once, rotates it and revokes it",
    async () => {
      const { page, misdeeds } = await newPage();
      const transferred = new Map<string, number>();
      page.on("requestfinished", async (request) => transferred.set(new URL(request.url()).pathname, (await request.sizes()).responseBodySize));

      // The first page: / → /dashboard → the sign-in page, since nobody is signed in.
      await page.goto(`${server.url}/`);
      expect(await heading(page)).toBe("Sign in");
      expect(new URL(page.url()).pathname).toBe("/dashboard/sign-in");
      await page.waitForLoadState("networkidle");
      const firstPage = [...transferred].filter(([path]) => path.startsWith("/dashboard")).reduce((sum, [, size]) => sum + size, 0);
      console.log(`first page transferred (gzip): ${firstPage} bytes`, Object.fromEntries(transferred));
      expect(firstPage).toBeLessThan(FIRST_PAGE_BUDGET_BYTES);
      await screenshot(page, "sign-in");

      await signInThroughProvider(page, "ada");
      expect(await page.locator(".account").textContent()).toContain("Ada Lovelace");
      expect(await page.getByRole("link", { name: "API keys" }).getAttribute("aria-current")).toBe("page");
      await page.getByText("No key yet").waitFor();

      // Create: the secret appears once, in a live region, with the warning and a copy button.
      await page.getByLabel("Key name").fill("production");
      await page.getByRole("button", { name: "Create key" }).click();
      const secretField = page.getByLabel("Secret key");
      await secretField.waitFor();
      const secret = await secretField.inputValue();
      expect(secret).toMatch(/^pps_[0-9A-Za-z]{38}$/);
      expect(await page.locator('[aria-live="polite"]').filter({ has: secretField }).count()).toBe(1);
      expect(await page.getByText("It is shown only this once and cannot be retrieved later").isVisible()).toBe(true);
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Copy");
      await page.getByRole("button", { name: "Copy", exact: true }).click();
      await page.getByRole("status").getByText("Copied to the clipboard.").waitFor();
      expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret);
      const row = keyRow(page, secret.slice(0, 8));
      expect(await row.locator("td").allTextContents()).toEqual([
        "Active",
        `${secret.slice(0, 8)}…`,
        "Ada Lovelace",
        expect.any(String),
        "Never",
        "0 credits this month, no monthly limit",
        expect.stringContaining("Rotate"),
      ]);
      expect(await statusWithKey(secret)).toBe(200);
      await screenshot(page, "keys-secret");

      // Reload: the secret is gone for good, the key stays.
      await page.reload();
      await row.waitFor();
      expect(await page.getByLabel("Secret key").count()).toBe(0);
      expect(await page.content()).not.toContain(secret);
      expect(await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }))).not.toContain(secret);

      await screenshot(page, "keys");

      // Rotate, after a confirmation: a new secret, the old one dead at once.
      await page.getByRole("button", { name: `Rotate production (${secret.slice(0, 8)})` }).click();
      const dialog = page.getByRole("dialog", { name: "Rotate the key “production”?" });
      await dialog.waitFor();
      expect(await dialog.textContent()).toContain("stops working immediately");
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Cancel");
      await screenshot(page, "keys-rotate-confirm");
      await dialog.getByRole("button", { name: "Rotate" }).click();
      await page.waitForFunction(
        (old) =>
          (document.getElementById("secret-key") as HTMLInputElement | null)?.value.startsWith("pps_") &&
          (document.getElementById("secret-key") as HTMLInputElement).value !== old,
        secret,
      );
      const rotated = await page.getByLabel("Secret key").inputValue();
      expect(rotated).toMatch(/^pps_[0-9A-Za-z]{38}$/);
      expect(await statusWithKey(secret)).toBe(401);
      expect(await statusWithKey(rotated)).toBe(200);
      await keyRow(page, rotated.slice(0, 8)).waitFor();
      expect(await row.locator(".badge").textContent()).toBe("Rotated");
      expect(await row.getByRole("button").count()).toBe(0);
      await page.getByRole("button", { name: "I have stored it" }).click();
      expect(await page.getByLabel("Secret key").count()).toBe(0);

      // Revoke: Cancel changes nothing; confirming revokes for good.
      const rotatedRow = keyRow(page, rotated.slice(0, 8));
      const revoke = page.getByRole("button", { name: `Revoke production (${rotated.slice(0, 8)})` });
      await revoke.click();
      await page.getByRole("dialog").getByRole("button", { name: "Cancel" }).click();
      expect(await page.getByRole("dialog").count()).toBe(0);
      expect(await rotatedRow.locator(".badge").textContent()).toBe("Active");
      expect(await statusWithKey(rotated)).toBe(200);
      await revoke.click();
      await page.getByRole("dialog", { name: "Revoke the key “production”?" }).getByRole("button", { name: "Revoke" }).click();
      await page.getByRole("status").getByText("Key “production” revoked.").waitFor();
      await rotatedRow.locator(".badge", { hasText: "Revoked" }).waitFor();
      expect(await statusWithKey(rotated)).toBe(401);
      await screenshot(page, "keys-revoked");

      // Every call the dashboard made was to the public API of the service.
      server.services.logger.flush();
      expect(server.logs.join("")).not.toContain(secret);
      expect(server.logs.join("")).not.toContain(rotated);
      expect(misdeeds).toEqual([]);
    },
    BROWSER_TEST_MS,
  );

  test(
    "a customer buys a pack and subscribes through the local checkout's Pay button, and the balance, usage chart, transactions and invoices follow",
    async () => {
      const { page, misdeeds } = await newPage();
      await page.goto(`${server.url}/dashboard/billing`);
      expect(await heading(page)).toBe("Sign in");
      // The sign-in started from the billing page comes back to it.
      await signInThroughProvider(page, "grace", "/dashboard/billing");
      expect(await heading(page)).toBe("Billing");
      await page.locator("#available", { hasText: "0" }).waitFor();
      await page.getByText("No credits yet").waitFor();

      // Buy the first pack: the local provider's checkout page, its Pay button, back to the dashboard.
      const pack = page.locator(".card", { hasText: "1,000 credits" }).first();
      await pack.getByRole("button", { name: "Buy 1,000 credits" }).click();
      await page.waitForURL(`${server.url}/billing/checkout/ord_*`);
      await screenshot(page, "checkout");
      await page.getByRole("button", { name: /^Pay / }).click();
      await page.waitForURL(BILLING_RETURN);
      await page.getByRole("status").getByText("Payment received").waitFor();
      await page.locator("#available", { hasText: "1,000" }).waitFor();
      const bucket = page.locator("#balance tbody tr").first();
      expect(await bucket.locator("th, td").allTextContents()).toEqual(["Pack", "1,000", "1,000", "Never", expect.any(String)]);

      // Subscribe to a plan the same way: its credits come with an expiry date.
      await page.getByRole("button", { name: "Subscribe Basic" }).click();
      await page.waitForURL(`${server.url}/billing/checkout/ord_*`);
      await page.getByRole("button", { name: /^Pay / }).click();
      await page.waitForURL(BILLING_RETURN);
      await page.locator("#available", { hasText: "6,000" }).waitFor();
      const expiring = page.locator("#balance tbody tr", { hasText: "Subscription" });
      expect(await expiring.locator("td").nth(2).textContent()).not.toBe("Never");

      // Three billed look-ups with a key of this organization, then the usage chart counts them today.
      const created = await fetchInPage<{ clearKey: string }>(page, "POST", "/api/v1/customer/api-keys", { name: "chart" });
      expect(created.status).toBe(201);
      for (let i = 0; i < 3; i++) expect(await statusWithKey(created.body.clearKey, `/api/v1/products/${FRESH_GTIN}/price`)).toBe(200);
      await page.reload();
      await page.locator("#usage-summary", { hasText: "3 credits used in 30 days" }).waitFor();
      const bars = page.locator("svg.chart rect.bar");
      expect(await bars.count()).toBe(30);
      expect(Number(await bars.last().getAttribute("height"))).toBeGreaterThan(0);
      expect(Number(await bars.first().getAttribute("height"))).toBe(0);
      expect(await page.locator("svg.chart").getAttribute("role")).toBe("img");
      expect(await page.locator("svg.chart").getAttribute("aria-label")).toContain("3 credits used");

      // The ledger and the invoices, newest first.
      await page.getByRole("region", { name: "Ledger transactions, newest first" }).getByText("Usage").first().waitFor();
      const ledger = await page
        .getByRole("region", { name: "Ledger transactions, newest first" })
        .locator("tbody tr")
        .evaluateAll((rows) => rows.map((row) => [row.children[1]!.textContent, row.children[2]!.textContent]));
      expect(ledger).toEqual([
        ["Usage", "-1"],
        ["Usage", "-1"],
        ["Usage", "-1"],
        ["Subscription", "+5,000"],
        ["Purchase", "+1,000"],
      ]);
      const invoices = page.getByRole("region", { name: "Invoices, newest first" });
      expect(await invoices.locator("tbody tr").count()).toBe(2);
      expect(await invoices.locator(".badge").allTextContents()).toEqual(["Paid", "Paid"]);
      await screenshot(page, "billing");

      // The key's "Last used" follows the look-ups (written behind).
      await server.services.keyUsage.flush();
      await page.getByRole("link", { name: "API keys" }).click();
      const chartKey = keyRow(page, created.body.clearKey.slice(0, 8));
      await chartKey.waitFor();
      expect(await chartKey.locator("td").nth(4).textContent()).not.toBe("Never");
      await page.getByRole("link", { name: "Billing" }).click();
      await heading(page);

      // The portal of the local provider shows the subscription; its back link returns to the dashboard.
      await page.getByRole("button", { name: "Open the billing portal" }).click();
      await page.waitForURL(/\/billing\/portal\?return=/);
      expect(await page.locator("body").textContent()).toContain("Basic");
      await screenshot(page, "portal");
      await page.getByRole("link", { name: "← Back" }).click();
      await page.waitForURL(BILLING_RETURN);
      expect(await heading(page)).toBe("Billing");
      expect(misdeeds).toEqual([]);
    },
    BROWSER_TEST_MS,
  );

  test(
    "the quickstart gives curl commands for the key prefix that work as written once the secret is in the variable",
    async () => {
      const { page, misdeeds } = await newPage();
      await page.goto(`${server.url}/dashboard/quickstart`);
      await signInThroughProvider(page, "alan", "/dashboard/quickstart");
      await page.getByText("You have no active key yet.").waitFor();

      const created = await fetchInPage<{ clearKey: string }>(page, "POST", "/api/v1/customer/api-keys", { name: "staging" });
      const secret = created.body.clearKey;
      await page.reload();
      const blocks = page.locator("#quickstart-steps pre");
      await blocks.first().waitFor();
      const [variable, price, balance] = await blocks.allTextContents();
      expect(variable).toBe(
        `# paste the full secret of “staging” (it starts with ${secret.slice(0, 8)}), then press Enter\nread -rs PRICE_SERVICE_KEY && export PRICE_SERVICE_KEY`,
      );
      expect(price).toContain(`${server.url}/api/v1/products/${FRESH_GTIN.slice(1)}/price?language=en`);
      await screenshot(page, "quickstart");

      // With the real secret in the variable, the commands run as shown.
      const curl = Bun.which("curl");
      if (curl === null) throw new Error("curl is needed to run the quickstart's commands: apt-get install curl");
      // Asynchronously: the server answering curl runs in this very process.
      const run = async (command: string) => {
        const shell = Bun.spawn(["bash", "-c", command], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PRICE_SERVICE_KEY: secret }, stdout: "pipe" });
        const output = await new Response(shell.stdout).text();
        expect(await shell.exited).toBe(0);
        return JSON.parse(output);
      };
      expect((await run(price!)).meta).toMatchObject({ gtin: FRESH_GTIN, reason: "insufficient-credits" });
      expect(await run(balance!)).toMatchObject({ available: 0, reserved: 0, buckets: [] });
      expect(misdeeds).toEqual([]);
    },
    BROWSER_TEST_MS,
  );

  test(
    "the dashboard works from the keyboard alone, with visible focus, and reads problems out",
    async () => {
      const { page, misdeeds } = await newPage();
      await page.goto(`${server.url}/dashboard/sign-in?error=expired`);
      expect(await page.getByRole("alert").textContent()).toBe("The sign-in expired or was started in another window. Please try again.");
      await signInThroughProvider(page, "barbara");

      // The skip link comes first and moves to the content.
      await page.keyboard.press("Tab");
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Skip to content");
      expect((await page.locator(".skip").boundingBox())!.y).toBeGreaterThanOrEqual(0);
      await page.keyboard.press("Enter");
      expect(await page.evaluate(() => document.activeElement?.id)).toBe("main");

      // Tab to the name field, type, press Enter: the key is created and focus lands on Copy.
      await tabUntil(page, () => document.activeElement?.id === "key-name");
      expect(await page.evaluate(() => document.activeElement?.id)).toBe("key-name");
      await page.keyboard.type("keyboard");
      await page.keyboard.press("Enter");
      await page.getByLabel("Secret key").waitFor();
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Copy");
      const focusRing = await page.evaluate(() => {
        const style = getComputedStyle(document.activeElement!);
        return { style: style.outlineStyle, width: Number.parseFloat(style.outlineWidth) };
      });
      expect(focusRing.style).toBe("solid");
      expect(focusRing.width).toBeGreaterThanOrEqual(2);

      // Revoke from the keyboard, then Escape: the dialog closes, focus returns, nothing is revoked.
      await tabUntil(page, () => document.activeElement?.textContent?.startsWith("Revoke") === true);
      await page.keyboard.press("Enter");
      await page.getByRole("dialog").waitFor();
      await page.keyboard.press("Escape");
      expect(await page.getByRole("dialog").count()).toBe(0);
      expect(await page.evaluate(() => document.activeElement?.textContent)).toStartWith("Revoke");
      expect(await page.locator("tbody .badge").first().textContent()).toBe("Active");

      // A key revoked elsewhere: rotating it from this stale page reads the service's problem out loud.
      const list = await fetchInPage<{ items: Array<{ id: string }> }>(page, "GET", "/api/v1/customer/api-keys");
      expect((await fetchInPage(page, "POST", `/api/v1/customer/api-keys/${list.body.items[0]!.id}/revoke`)).status).toBe(200);
      await page.getByRole("button", { name: /^Rotate keyboard/ }).click();
      await page.getByRole("dialog").getByRole("button", { name: "Rotate" }).click();
      const alert = page.getByRole("alert");
      await alert.getByText("Only an ACTIVE key can be rotated or revoked.").waitFor();
      expect(await alert.textContent()).toMatch(/Request id: req_[0-9a-z]+/);
      await page.locator("tbody .badge", { hasText: "Revoked" }).waitFor();
      await screenshot(page, "keys-problem");
      expect(misdeeds).toEqual([]);
    },
    BROWSER_TEST_MS,
  );

  test(
    "a French browser gets the dashboard in French, and the language switch is remembered across reloads",
    async () => {
      const { page, misdeeds } = await newPage("fr-FR");
      await page.goto(`${server.url}/dashboard`);
      expect(await heading(page)).toBe("Connexion");
      expect(await page.evaluate(() => document.documentElement.lang)).toBe("fr");
      await screenshot(page, "sign-in-fr");
      await page.getByRole("link", { name: "Se connecter avec votre fournisseur d'identité" }).click();
      await page.waitForURL(`${provider.issuer}/interaction/**`);
      await page.locator('input[name="login"]').fill("marie");
      await page.locator('input[name="password"]').fill("any password");
      await page.locator('button[type="submit"]').click();
      await page.getByRole("button", { name: "Continue" }).click();
      await page.waitForURL(`${server.url}/dashboard/keys`);
      expect(await heading(page)).toBe("Clés d'API");

      await page.getByRole("link", { name: "Facturation" }).click();
      expect(await heading(page)).toBe("Facturation");
      // Money and numbers in French, from the API (Accept-Language) and from Intl.
      await page.locator("#available", { hasText: "0" }).waitFor();
      await page.getByText("Aucun crédit pour l'instant").waitFor();
      expect(await page.locator(".card .price").first().textContent()).toBe("10,00 €");
      await screenshot(page, "billing-fr");

      await page.getByLabel("Langue").selectOption("en");
      expect(await heading(page)).toBe("Billing");
      expect(await page.evaluate(() => document.documentElement.lang)).toBe("en");
      await page.reload();
      expect(await heading(page)).toBe("Billing");
      expect(await page.evaluate(() => localStorage.getItem("price-service.language"))).toBe("en");

      // Signing out ends the session server-side and says so.
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.waitForURL(`${server.url}/dashboard/sign-in?signed-out=1`);
      await page.getByRole("status").getByText("You are signed out.").waitFor();
      expect((await fetchInPage(page, "GET", "/api/v1/auth/me")).status).toBe(401);
      expect(misdeeds).toEqual([]);
    },
    BROWSER_TEST_MS,
  );
});
