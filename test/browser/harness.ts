// What the browser tests share: Debian's Chromium driven by playwright-core, a real server on a
// loopback port, a page that records what the dashboard must never do, and screenshots.
import { existsSync, mkdirSync } from "node:fs";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { loadConfig } from "../../src/config";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { systemClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { type RunningServer, startServer } from "../../src/server";
import { createServices, type Services } from "../../src/services";

export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** For the hook that launches Chromium: its first start after apt-get install builds caches and takes seconds. */
export const BROWSER_START_TIMEOUT = { timeout: 60_000 };
const SCREENSHOTS = new URL("../screenshots/", import.meta.url);

/** Starts headless Chromium, or fails with how to install it: these tests never skip. */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    throw new Error(`Chromium is not installed at ${CHROMIUM_PATH}, and the dashboard's browser tests need it. Install it with: apt-get install chromium`);
  }
  // The flags keep Chromium itself off the network, so every request seen is the page's.
  return chromium.launch({
    timeout: BROWSER_START_TIMEOUT.timeout,
    executablePath: CHROMIUM_PATH,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

/** A loopback port nobody listens on right now. */
export async function freePort(): Promise<number> {
  const reserved = reservePort();
  await reserved.release();
  return reserved.port;
}

/** A free port held until `release`, so servers started meanwhile (an identity provider on port 0) cannot take it. */
export function reservePort(): { port: number; release(): Promise<void> } {
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response(null) });
  return { port: probe.port!, release: () => probe.stop(true) };
}

export interface TestServer {
  url: string;
  services: Services;
  logs: string[];
  stop(): Promise<void>;
}

/** The whole service on a real port, in development mode (the local checkout's Pay button), on a fresh in-memory database. */
export async function startTestServer(port: number, env: Record<string, string> = {}): Promise<TestServer> {
  const url = `http://127.0.0.1:${port}`;
  const config = loadConfig({ PRICE_ENV: "development", PORT: String(port), PUBLIC_URL: url, LOG_LEVEL: "info", RATE_LIMIT: "100000/s", ...env });
  const logs: string[] = [];
  const services = createServices({
    config,
    store: await SQLiteStore.open("sqlite::memory:"),
    clock: systemClock,
    logger: createLogger({ level: "info", write: (chunk) => logs.push(chunk) }),
  });
  const server: RunningServer = await startServer(services, { port, hostname: "127.0.0.1" });
  return { url, services, logs, stop: () => server.stop() };
}

export interface WatchedPage {
  page: Page;
  context: BrowserContext;
  /** Content-Security-Policy and Trusted Types violations, script errors, and requests the dashboard made to other sites. */
  misdeeds: string[];
}

/**
 * A fresh browser profile (no cookies, empty localStorage) and a page in it. Nothing leaves
 * loopback: any other request is refused, and recorded when one of `origins` made it.
 */
export async function openPage(browser: Browser, options: { locale: string; origin: string }): Promise<WatchedPage> {
  const context = await browser.newContext({ locale: options.locale, viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: options.origin });
  const misdeeds: string[] = [];
  await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, async (route) => {
    const frame = route.request().frame().url();
    if (frame.startsWith(options.origin)) misdeeds.push(`request to another site: ${route.request().url()}`);
    await route.abort();
  });
  const page = await context.newPage();
  page.on("console", (message) => {
    if (/Content Security Policy|Trusted ?(Type|HTML|Script)/i.test(message.text())) misdeeds.push(`${message.type()}: ${message.text()}`);
  });
  page.on("pageerror", (error) => misdeeds.push(`script error on ${page.url()}: ${error.message}`));
  return { page, context, misdeeds };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: Bun.fileURLToPath(new URL(`${name}.png`, SCREENSHOTS)), fullPage: true });
}

/** The text of the page's h1 once the page has rendered it. */
export async function heading(page: Page): Promise<string> {
  const h1 = page.locator("main h1");
  await h1.waitFor();
  return (await h1.textContent()) ?? "";
}

/** Calls the API from inside the page, with its session cookie, as the dashboard does. */
export function fetchInPage<T>(page: Page, method: "GET" | "POST", path: string, body?: unknown): Promise<{ status: number; body: T }> {
  return page.evaluate(
    async ([method, path, body]) => {
      const response = await fetch(path as string, {
        method: method as string,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: response.status, body: response.status === 204 ? null : await response.json() };
    },
    [method, path, body] as const,
  ) as Promise<{ status: number; body: T }>;
}
