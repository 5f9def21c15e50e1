import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Browser } from "playwright-core";
import { startServer, type RunningServer } from "../../src/server";
import { BROWSER_START_TIMEOUT, launchChromium } from "../browser/harness";
import { createTestContext } from "../support/context";

let server: RunningServer;
let browser: Browser;

beforeAll(async () => {
  const context = await createTestContext();
  server = await startServer(context.services, { port: 0, hostname: "127.0.0.1" });
  browser = await launchChromium();
}, BROWSER_START_TIMEOUT);
afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

describe("GET /docs in a real browser", () => {
  test("the reference renders the operations from the service's own assets, with no request or attempt to leave it", async () => {
    const page = await browser.newPage();
    const requests: string[] = [];
    const consoleErrors: string[] = [];
    page.on("request", (request) => requests.push(request.url()));
    page.on("console", (message) => {
      if (message.type() === "error") consoleErrors.push(message.text());
    });
    page.on("pageerror", (error) => consoleErrors.push(error.message));

    const response = await page.goto(`${server.url}/docs`, { waitUntil: "networkidle" });
    expect(response!.status()).toBe(200);
    await page.getByRole("heading", { name: "price-service" }).first().waitFor({ timeout: 20_000 });
    await page.getByText("Products", { exact: true }).first().click();
    await page.getByText("Fresh price offers for a product").first().waitFor({ timeout: 10_000 });

    expect(requests.filter((url) => !url.startsWith(server.url))).toEqual([]);
    expect(requests).toEqual(expect.arrayContaining([`${server.url}/docs/assets/scalar.js`, `${server.url}/openapi.json`]));
    // A blocked attempt to reach another host shows up as a Content Security Policy error.
    expect(consoleErrors.filter((text) => /Content Security Policy|https?:\/\/(?!127\.0\.0\.1)/.test(text))).toEqual([]);
    await page.close();
  }, 60_000);
});
