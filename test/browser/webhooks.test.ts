// The dashboard's webhooks page in real Chromium (development mode, so webhooks may reach a loopback
// receiver): the threshold, an endpoint and its secret shown once, a test event and its delivery log,
// rotation and deletion, in English and in French.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Browser, Page } from "playwright-core";
import { Webhook } from "standardwebhooks";
import { startReceiver, type Receiver } from "../webhooks/receiver";
import { BROWSER_START_TIMEOUT, freePort, heading, launchChromium, openPage, screenshot, startTestServer, type TestServer, type WatchedPage } from "./harness";

let browser: Browser;
let server: TestServer;
let receiver: Receiver;
const watched: WatchedPage[] = [];

beforeAll(async () => {
  browser = await launchChromium();
  receiver = startReceiver();
  server = await startTestServer(await freePort());
}, BROWSER_START_TIMEOUT);

afterAll(async () => {
  for (const { context } of watched) await context.close().catch(() => undefined);
  await browser?.close();
  await server?.stop();
  await receiver?.stop();
});

async function signedIn(locale: string, email: string): Promise<WatchedPage> {
  const page = await openPage(browser, { locale, origin: server.url });
  watched.push(page);
  await page.page.goto(`${server.url}/dashboard/webhooks`);
  await page.page.locator("#email, input[type=email]").first().fill(email);
  await page.page.locator("form button[type=submit]").first().click();
  await page.page.waitForURL(`${server.url}/dashboard/webhooks`);
  return page;
}

function endpointRow(page: Page, url: string) {
  return page.locator("tbody tr", { has: page.locator("code", { hasText: url }) });
}

test("a customer sets the low-credit threshold, adds an endpoint, reads its secret once, sends a test event, reads the delivery log, rotates and deletes", async () => {
  const { page, misdeeds } = await signedIn("en-US", "hooks@example.com");
  expect(await heading(page)).toBe("Webhooks");
  expect(await page.getByRole("link", { name: "Webhooks" }).getAttribute("aria-current")).toBe("page");

  const threshold = page.getByLabel("Send credits.low when the balance falls below");
  await threshold.fill("100");
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByRole("status").getByText("Low-credit threshold saved.").waitFor();
  await page.reload();
  await page.waitForFunction(() => (document.getElementById("threshold") as HTMLInputElement | null)?.value === "100");

  await page.getByText("No endpoint yet.").waitFor();
  await page.getByLabel("Endpoint URL").fill(receiver.url);
  await page.getByLabel("key.created").check();
  await page.getByRole("button", { name: "Add endpoint" }).click();
  const secretField = page.getByLabel("Signing secret", { exact: true });
  await secretField.waitFor();
  const secret = await secretField.inputValue();
  expect(secret).toMatch(/^whsec_/);
  expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Copy");
  const row = endpointRow(page, receiver.url);
  await row.waitFor();
  expect(await row.locator("td").first().textContent()).toBe("credits.low, credits.depleted, credits.granted, key.created");
  await screenshot(page, "webhooks-secret");

  await row.getByRole("button", { name: /^Send test/ }).click();
  await page.getByRole("status").getByText(`Test event queued for ${receiver.url}.`).waitFor();
  // The worker of the running server sends it within about a second; the log shows it delivered.
  for (let waited = 0; receiver.received.length === 0 && waited < 10_000; waited += 100) await Bun.sleep(100);
  expect(receiver.received).toHaveLength(1);
  const request = receiver.received[0]!;
  expect(
    new Webhook(secret).verify(request.body, { "webhook-id": request.id, "webhook-timestamp": request.timestamp, "webhook-signature": request.signature }),
  ).toMatchObject({ type: "webhook.test" });
  await row.getByRole("button", { name: /^Deliveries/ }).click();
  const log = page.getByRole("region", { name: `Deliveries to ${receiver.url}, newest first` });
  await log.getByText("Delivered").waitFor();
  expect(await log.locator("tbody tr th").textContent()).toContain("webhook.test");
  await screenshot(page, "webhooks-log");

  await page.reload();
  expect(await page.getByLabel("Signing secret", { exact: true }).count()).toBe(0);
  expect(await page.content()).not.toContain(secret);

  await row.getByRole("button", { name: /^Rotate secret/ }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Rotate secret" }).click();
  await page.waitForFunction(
    (old) =>
      (document.getElementById("hook-secret") as HTMLInputElement | null)?.value.startsWith("whsec_") &&
      (document.getElementById("hook-secret") as HTMLInputElement).value !== old,
    secret,
  );

  await row.getByRole("button", { name: /^Delete/ }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Delete" }).click();
  await page.getByText("No endpoint yet.").waitFor();
  server.services.logger.flush();
  expect(server.logs.join("")).not.toContain(secret);
  expect(misdeeds).toEqual([]);
}, 90_000);

test("the page speaks French", async () => {
  const { page, misdeeds } = await signedIn("fr-FR", "crochets@example.com");
  expect(await heading(page)).toBe("Webhooks");
  await page.getByText("Aucun point de terminaison pour l'instant.").waitFor();
  expect(await page.getByLabel("Envoyer credits.low quand le solde passe sous").count()).toBe(1);
  await page.getByLabel("URL du point de terminaison").fill("http://10.1.2.3/hook");
  await page.getByRole("button", { name: "Ajouter" }).click();
  await page.getByRole("alert").getByText("adresse de bouclage, locale ou privée").waitFor();
  await screenshot(page, "webhooks-fr");
  expect(misdeeds).toEqual([]);
}, 60_000);
