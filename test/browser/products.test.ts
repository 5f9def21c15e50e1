// The dashboard's Products page in real Chromium: the billed notes before anything is sent, a GTIN's
// offers and its price history (chart, legend, table) asked with one of the organization's API keys,
// the "Watch this product" button, and the page in French.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { FeedRecord } from "../../src/db/store";
import {
  BROWSER_START_TIMEOUT,
  fetchInPage,
  freePort,
  heading,
  launchChromium,
  openPage,
  screenshot,
  startTestServer,
  type TestServer,
  type WatchedPage,
} from "./harness";
import type { Browser } from "playwright-core";

const GTIN = "04006381333931";
const DAY = 86_400_000;

let browser: Browser;
let server: TestServer;
const watched: WatchedPage[] = [];

beforeAll(async () => {
  browser = await launchChromium();
  server = await startTestServer(await freePort(), { TRIAL_CREDITS: "100" });
  // Two merchants, a price a day for five days, the last one now: fresh offers and a history.
  const now = Date.now();
  for (let day = 5; day >= 0; day--) {
    const observedAt = now - day * DAY - 60_000;
    const records: FeedRecord[] = ["alpha", "beta"].map((merchant, index) => ({
      product: { gtin: GTIN, title: "Wireless Mouse", brand: "Acme" },
      offer: {
        merchantId: `m-${merchant}`,
        merchantName: merchant === "alpha" ? "Alpha" : "Beta",
        priceAmount: 1000 + index * 200 + day * 10,
        currency: "EUR",
        shippingAmount: null,
        availability: "in_stock",
        condition: "new",
        url: null,
        observedAt,
      },
    }));
    await server.services.store.applyFeedRecords(records, observedAt);
  }
}, BROWSER_START_TIMEOUT);

afterAll(async () => {
  for (const { context } of watched) await context.close().catch(() => undefined);
  await browser?.close();
  await server?.stop();
});

/** A signed-in page on /dashboard/products (development sign-in) and a fresh API key of its organization. */
async function signedIn(locale: string, email: string): Promise<WatchedPage & { key: string }> {
  const page = await openPage(browser, { locale, origin: server.url });
  watched.push(page);
  await page.page.goto(`${server.url}/dashboard/products`);
  await page.page.locator("#email, input[type=email]").first().fill(email);
  await page.page.locator("form button[type=submit]").first().click();
  await page.page.waitForURL(`${server.url}/dashboard/products`);
  const created = await fetchInPage<{ clearKey: string }>(page.page, "POST", "/api/v1/customer/api-keys", { name: "dashboard" });
  expect(created.status).toBe(201);
  return { ...page, key: created.body.clearKey };
}

async function available(page: WatchedPage): Promise<number> {
  return (await fetchInPage<{ available: number }>(page.page, "GET", "/api/v1/customer/billing/balance")).body.available;
}

test("a customer looks a GTIN up with a key, sees its offers and its price history as a chart and a table, billed as the page says", async () => {
  const signed = await signedIn("en-US", "products@example.com");
  const { page, misdeeds, key } = signed;
  expect(await heading(page)).toBe("Products");
  expect(await page.getByRole("link", { name: "Products" }).getAttribute("aria-current")).toBe("page");
  // The page says the look-up is billed before anything is sent.
  await page.getByText("Billed: costs credits when fresh offers are found.").waitFor();
  const before = await available(signed);

  await page.getByLabel("API key").fill(key);
  await page.getByLabel("GTIN").fill("4006381333931");
  await page.getByRole("button", { name: "Look up (billed)" }).click();
  const offers = page.getByRole("table", { name: "Offers for Wireless Mouse" });
  await offers.waitFor();
  expect(await offers.locator("tbody tr").count()).toBe(2);
  expect(await offers.locator("tbody tr").first().locator("th").textContent()).toBe("Alpha");
  expect(await offers.locator("tbody tr").first().locator("td").first().textContent()).toBe("€10.00");

  await page.getByText("Billed: costs credits when the range has prices.").waitFor();
  await page.getByRole("combobox", { name: "Price history" }).selectOption("7");
  await page.getByRole("button", { name: "Show history (billed)" }).click();
  const chart = page.getByRole("img", { name: /^Last price per day/ });
  await chart.waitFor();
  expect(await chart.getAttribute("aria-label")).toContain("2 merchants, €10.00–€12.50");
  expect(await chart.locator("polyline").count()).toBe(2);
  expect(await page.getByRole("list", { name: "Merchant" }).getByRole("listitem").allTextContents()).toEqual([" Alpha", " Beta"]);
  await page.getByText("As a table").click();
  const table = page.getByRole("table", { name: "Price history" });
  expect(await table.locator("tbody tr").count()).toBeGreaterThanOrEqual(12);
  await screenshot(page, "products-history-en");

  // The price look-up (1 credit) and the history answer (2 credits).
  expect(await available(signed)).toBe(before - 3);

  // The watch endpoint answers, or its problem is shown.
  await page.getByRole("button", { name: "Watch this product" }).click();
  await page.locator("[role=status]:has-text('Watching 04006381333931.'), .messages [role=alert]:not(:empty)").first().waitFor();
  expect(misdeeds).toEqual([]);
}, 90_000);

test("a wrong key's 401 is shown on the page, without signing the user out", async () => {
  const { page, misdeeds } = await signedIn("en-US", "wrong-key@example.com");
  await page.getByLabel("API key").fill("pps_not-a-key");
  await page.getByLabel("GTIN").fill("4006381333931");
  await page.getByRole("button", { name: "Look up (billed)" }).click();
  await page.locator(".messages [role=alert]").getByText("The API key is invalid.").waitFor();
  expect(page.url()).toBe(`${server.url}/dashboard/products`);
  expect(misdeeds).toEqual([]);
}, 60_000);

test("the page in French", async () => {
  const { page, misdeeds, key } = await signedIn("fr-FR", "produits@example.com");
  expect(await heading(page)).toBe("Produits");
  await page.getByText("Facturé : coûte des crédits quand des offres fraîches sont trouvées.").waitFor();
  await page.getByLabel("Clé d'API").fill(key);
  await page.getByLabel("GTIN").fill("4006381333931");
  await page.getByRole("button", { name: "Consulter (facturé)" }).click();
  await page.getByRole("table", { name: "Offres pour Wireless Mouse" }).waitFor();
  await page.getByRole("button", { name: "Afficher l'historique (facturé)" }).click();
  const chart = page.getByRole("img", { name: /^Dernier prix par jour/ });
  await chart.waitFor();
  expect(await chart.getAttribute("aria-label")).toContain("2 marchands, 10,00 €–12,50 €");
  await screenshot(page, "products-history-fr");
  expect(misdeeds).toEqual([]);
}, 60_000);
