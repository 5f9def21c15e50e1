// The dashboard's Price watches page in real Chromium: the organization's watches with their
// trigger, status and last trigger; a watch paused for want of credits says why; deletion; French.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Browser } from "playwright-core";
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

const GTIN = "04006381333931";
const OTHER = "00012345678905";

let browser: Browser;
let server: TestServer;
const watched: WatchedPage[] = [];

beforeAll(async () => {
  browser = await launchChromium();
  server = await startTestServer(await freePort());
}, BROWSER_START_TIMEOUT);

afterAll(async () => {
  for (const { context } of watched) await context.close().catch(() => undefined);
  await browser?.close();
  await server?.stop();
});

async function signedIn(locale: string, email: string): Promise<WatchedPage> {
  const page = await openPage(browser, { locale, origin: server.url });
  watched.push(page);
  await page.page.goto(`${server.url}/dashboard/watches`);
  await page.page.locator("#email, input[type=email]").first().fill(email);
  await page.page.locator("form button[type=submit]").first().click();
  await page.page.waitForURL(`${server.url}/dashboard/watches`);
  return page;
}

function offer(gtin: string, price: number): FeedRecord {
  return {
    product: { gtin, title: "Watched" },
    offer: {
      merchantId: "m1",
      priceAmount: price,
      currency: "EUR",
      shippingAmount: null,
      availability: "in_stock",
      condition: "new",
      url: null,
      observedAt: Date.now(),
    },
  };
}

test("a customer sees the watches, why one is paused, and deletes one", async () => {
  const { page, misdeeds } = await signedIn("en-US", "watcher@example.com");
  expect(await heading(page)).toBe("Price watches");
  expect(await page.getByRole("link", { name: "Price watches" }).getAttribute("aria-current")).toBe("page");
  await page.getByText("No price watch yet.").waitFor();

  const { store } = server.services;
  await store.applyFeedRecords([offer(GTIN, 1200)], Date.now());
  expect(
    (await fetchInPage(page, "POST", "/api/v1/customer/watches", { gtin: GTIN, merchant: "m1", trigger: "below", below: { amount: 1000, currency: "EUR" } }))
      .status,
  ).toBe(201);
  expect((await fetchInPage(page, "POST", "/api/v1/customer/watches", { gtin: OTHER, trigger: "any-change" })).status).toBe(201);
  // The organization has no credits: the price crossing under the threshold pauses its watches.
  await store.applyFeedRecords([offer(GTIN, 900)], Date.now());
  await server.services.watches.tick();

  await page.reload();
  const row = page.locator("tbody tr", { has: page.locator("code", { hasText: GTIN }) });
  await row.waitFor();
  expect(await row.textContent()).toContain("Price below €10.00");
  expect(await row.textContent()).toContain("Merchant m1");
  expect(await row.textContent()).toContain("Paused: not enough credits for an event.");
  expect(await page.locator("tbody tr", { has: page.locator("code", { hasText: OTHER }) }).textContent()).toContain("Best price across merchants");
  await screenshot(page, "watches");

  await row.getByRole("button", { name: /^Delete/ }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Delete" }).click();
  await page.getByRole("status").getByText(`Watch of ${GTIN} deleted.`).waitFor();
  await page.locator("tbody tr", { has: page.locator("code", { hasText: GTIN }) }).waitFor({ state: "detached" });
  expect(misdeeds).toEqual([]);
}, 90_000);

test("the page speaks French", async () => {
  const { page, misdeeds } = await signedIn("fr-FR", "veilleur@example.com");
  expect(await heading(page)).toBe("Surveillances de prix");
  await page.getByText("Aucune surveillance de prix pour l'instant.").waitFor();
  expect((await fetchInPage(page, "POST", "/api/v1/customer/watches", { gtin: OTHER, trigger: "price-drop" })).status).toBe(201);
  await page.reload();
  await page.getByText("Baisse de prix").waitFor();
  await screenshot(page, "watches-fr");
  expect(misdeeds).toEqual([]);
}, 60_000);
