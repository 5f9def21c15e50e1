// The dashboard the product serves, in real Chromium: sign in, create a key, read its secret once, revoke it, create one with limits.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Browser } from "playwright-core";
import { BROWSER_START_TIMEOUT, heading, launchChromium, openPage, type WatchedPage } from "../browser/harness";
import { feedLine, type Service, startService } from "./harness";

let browser: Browser;
let service: Service;
let watched: WatchedPage | undefined;

beforeAll(async () => {
  browser = await launchChromium();
  service = await startService({
    env: { PRICE_ENV: "development", TRIAL_CREDITS: "3" },
    prepare: async (cli) => void (await cli(["import", "-"], { stdin: feedLine("4006381333931", null) })),
  });
}, BROWSER_START_TIMEOUT);

afterAll(async () => {
  await watched?.context.close().catch(() => undefined);
  await browser?.close();
  await service?.stop();
});

function statusWithKey(secret: string): Promise<number> {
  return service.request("/api/v1/customer/billing/balance", { headers: { authorization: `Bearer ${secret}` } }).then((response) => response.status);
}

test("a customer signs in, creates a key, sees its secret once, and revokes it", async () => {
  watched = await openPage(browser, { locale: "en-GB", origin: service.baseURL });
  const { page, misdeeds } = watched;
  await page.goto(`${service.baseURL}/dashboard/keys`);
  expect(await heading(page)).toBe("Sign in");
  await page.getByLabel("Email address").fill("ada@example.com");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${service.baseURL}/dashboard/keys`);
  expect(await heading(page)).toBe("API keys");
  await page.getByText("No key yet").waitFor();

  await page.getByLabel("Key name").fill("production");
  await page.getByRole("button", { name: "Create key" }).click();
  const secretField = page.getByLabel("Secret key");
  await secretField.waitFor();
  const secret = await secretField.inputValue();
  expect(secret).toMatch(/^pps_[0-9A-Za-z]{38}$/);
  expect(await page.getByText("It is shown only this once and cannot be retrieved later").isVisible()).toBe(true);
  expect(await statusWithKey(secret)).toBe(200);

  // After a reload the secret is gone for good; the key stays, by its prefix.
  await page.reload();
  const row = page.locator("tbody tr", { has: page.locator("code", { hasText: secret.slice(0, 8) }) });
  await row.waitFor();
  expect(await page.getByLabel("Secret key").count()).toBe(0);
  expect(await page.content()).not.toContain(secret);

  // The key's limits: shown in its row, edited in a dialog, applied by the API.
  await row.getByText("0 credits this month, no monthly limit").waitFor();
  await page.getByRole("button", { name: `Edit limits production (${secret.slice(0, 8)})` }).click();
  const limits = page.getByRole("dialog", { name: "Limits of the key “production”" });
  await limits.getByLabel("Monthly credit limit").fill("0");
  await limits.getByLabel("Rate limit (requests per second)").fill("2");
  await limits.getByRole("button", { name: "Save" }).click();
  await page.getByRole("status").getByText("Limits of “production” saved.").waitFor();
  await row.getByText("0 of 0 credits this month").waitFor();
  await row.getByText("2 requests/s").waitFor();
  const capped = await service.request("/api/v1/products/4006381333931/price", { headers: { authorization: `Bearer ${secret}` } });
  expect(capped.status).toBe(402);
  expect(capped.headers.get("ratelimit-policy")).toStartWith('"key";q=2;w=1, "organization";q=');

  await page.getByRole("button", { name: `Revoke production (${secret.slice(0, 8)})` }).click();
  await page.getByRole("dialog", { name: "Revoke the key “production”?" }).getByRole("button", { name: "Revoke" }).click();
  await page.getByRole("status").getByText("Key “production” revoked.").waitFor();
  await row.locator(".badge", { hasText: "Revoked" }).waitFor();
  expect(await statusWithKey(secret)).toBe(401);

  // Limits can be set at creation too, in the form's optional part.
  const createForm = page.locator("form", { has: page.getByLabel("Key name") });
  await page.getByLabel("Key name").fill("staging");
  await createForm.getByText("Limits (optional)").click();
  await createForm.getByLabel("Monthly credit limit").fill("5");
  await createForm.getByLabel("Rate limit (requests per second)").fill("3");
  await page.getByRole("button", { name: "Create key" }).click();
  await page.getByLabel("Secret key").waitFor();
  const staging = await page.getByLabel("Secret key").inputValue();
  const stagingRow = page.locator("tbody tr", { has: page.locator("code", { hasText: staging.slice(0, 8) }) });
  await stagingRow.getByText("0 of 5 credits this month").waitFor();
  await stagingRow.getByText("3 requests/s").waitFor();
  const limited = await service.request("/api/v1/products/4006381333931/price", { headers: { authorization: `Bearer ${staging}` } });
  expect(limited.headers.get("ratelimit-policy")).toStartWith('"key";q=3;w=1, "organization";q=');

  expect(service.stdout()).not.toContain(secret);
  expect(misdeeds).toEqual([]);
}, 60_000);
