// The development sign-in of the dashboard (development mode, no OIDC_ISSUER), in real Chromium.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Browser } from "playwright-core";
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

let browser: Browser;
let server: TestServer;
let watched: WatchedPage | undefined;

beforeAll(async () => {
  browser = await launchChromium();
  server = await startTestServer(await freePort(), { TRIAL_CREDITS: "25" });
}, BROWSER_START_TIMEOUT);

afterAll(async () => {
  await watched?.context.close().catch(() => undefined);
  await browser?.close();
  await server?.stop();
});

test("without an identity provider a developer signs in with just an email, under a clear warning, and signs out", async () => {
  watched = await openPage(browser, { locale: "en-US", origin: server.url });
  const { page, misdeeds } = watched;
  await page.goto(`${server.url}/dashboard/billing`);
  expect(await heading(page)).toBe("Sign in");
  expect(await page.getByText("Development mode: no identity provider is configured").isVisible()).toBe(true);
  expect(await page.getByRole("link", { name: "Sign in with your identity provider" }).count()).toBe(0);
  await screenshot(page, "sign-in-development");

  // The browser's own validation refuses what is not an email address.
  const email = page.getByLabel("Email address");
  await email.fill("not an email");
  await page.getByRole("button", { name: "Sign in" }).click();
  expect(await email.evaluate((input) => (input as HTMLInputElement).validity.valid)).toBe(false);
  expect(new URL(page.url()).pathname).toBe("/dashboard/sign-in");

  await email.fill("dev@example.com");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${server.url}/dashboard/billing`);
  expect(await heading(page)).toBe("Billing");
  expect(await page.locator(".account").textContent()).toContain("dev");
  await page.locator("#available", { hasText: "25" }).waitFor();
  expect(await page.locator("#balance tbody tr th").allTextContents()).toEqual(["Trial"]);

  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL(`${server.url}/dashboard/sign-in?signed-out=1`);
  expect((await fetchInPage(page, "GET", "/api/v1/auth/me")).status).toBe(401);
  expect(misdeeds).toEqual([]);
}, 60_000);
