import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../src/config";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { FakeClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createServices } from "../../src/services";
import { createTestContext, json, type TestContext } from "../support/context";
import { BILLING } from "./fixtures";

let context: TestContext | undefined;
const catalogDirectories: string[] = [];
afterEach(async () => {
  for (const directory of catalogDirectories.splice(0)) rmSync(directory, { recursive: true, force: true });
  await context?.close();
  context = undefined;
});

function catalogFile(content: unknown): string {
  const directory = mkdtempSync(join(tmpdir(), "catalog-"));
  catalogDirectories.push(directory);
  const path = join(directory, "catalog.json");
  writeFileSync(path, typeof content === "string" ? content : JSON.stringify(content));
  return path;
}

async function startWith(catalogPath: string): Promise<unknown> {
  const store = SQLiteStore.open("sqlite::memory:");
  try {
    createServices({ config: loadConfig({ CATALOG_FILE: catalogPath }), store, clock: new FakeClock(), logger: createLogger({ level: "silent" }) });
    return null;
  } catch (error) {
    return error;
  } finally {
    await store.close();
  }
}

describe("GET /api/v1/customer/billing/catalog", () => {
  test("it answers the built-in catalog without any credential, with the cost and freshness window", async () => {
    context = await createTestContext({ CREDIT_COST: "2", FRESHNESS_WINDOW: "12h" });
    const response = await context.request(`${BILLING}/catalog`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("application/json");
    const body = await json(response);
    expect(body.creditCost).toBe(2);
    expect(body.freshnessWindowSeconds).toBe(43_200);
    expect(body.packs.length).toBeGreaterThanOrEqual(1);
    expect(body.plans.length).toBeGreaterThanOrEqual(1);
    expect(body.packs[0]).toEqual({
      id: "pack-1k",
      name: "1,000 credits",
      credits: 1000,
      price: { amount: 1000, currency: "EUR", formatted: "€10.00" },
      validityDays: null,
    });
    expect(body.plans[0]).toEqual({
      id: "basic-monthly",
      name: "Basic",
      creditsPerPeriod: 5000,
      interval: "month",
      price: { amount: 2900, currency: "EUR", formatted: "€29.00" },
    });
  });

  test("money is formatted in the response language (language wins over Accept-Language)", async () => {
    context = await createTestContext();
    const byHeader = await json(await context.request(`${BILLING}/catalog`, { headers: { "accept-language": "fr-FR,fr;q=0.9" } }));
    expect(byHeader.packs[0].price.formatted).toBe("10,00 €");
    const byQuery = await json(await context.request(`${BILLING}/catalog?language=en`, { headers: { "accept-language": "fr" } }));
    expect(byQuery.packs[0].price.formatted).toBe("€10.00");
  });

  test("an unsupported language is 400 invalid-parameter", async () => {
    context = await createTestContext();
    const response = await context.request(`${BILLING}/catalog?language=de`);
    expect(response.status).toBe(400);
    expect((await json(response)).type).toEndWith("/problems/invalid-parameter");
  });

  test("in French the packs and plans have French names, and a CATALOG_FILE item without one keeps its name", async () => {
    context = await createTestContext();
    const response = await context.request(`${BILLING}/catalog`, { headers: { "accept-language": "fr" } });
    expect(response.headers.get("content-language")).toBe("fr");
    const body = await json(response);
    expect(body.packs.map((pack: { name: string }) => pack.name)).toEqual(["1\u202f000 crédits", "10\u202f000 crédits", "100\u202f000 crédits"]);
    expect(body.plans.find((plan: { id: string }) => plan.id === "pro-yearly").name).toBe("Pro, annuel");
    await context.close();
    const path = catalogFile({ packs: [{ id: "p", name: "Pack", credits: 1, price: { amount: 1, currency: "EUR" } }], plans: [] });
    context = await createTestContext({ CATALOG_FILE: path });
    expect((await json(await context.request(`${BILLING}/catalog?language=fr`))).packs[0].name).toBe("Pack");
    expect((await context.request(`${BILLING}/catalog`)).headers.get("content-language")).toBe("en");
  });

  test("CATALOG_FILE replaces the built-in catalog", async () => {
    const path = catalogFile({
      packs: [{ id: "tiny", name: "Tiny", credits: 50, price: { amount: 199, currency: "USD" }, validityDays: 30 }],
      plans: [{ id: "yearly", name: "Yearly", creditsPerPeriod: 12_000, interval: "year", price: { amount: 9900, currency: "USD" } }],
    });
    context = await createTestContext({ CATALOG_FILE: path });
    const body = await json(await context.request(`${BILLING}/catalog`));
    expect(body.packs).toEqual([{ id: "tiny", name: "Tiny", credits: 50, price: { amount: 199, currency: "USD", formatted: "US$1.99" }, validityDays: 30 }]);
    expect(body.plans).toEqual([
      { id: "yearly", name: "Yearly", creditsPerPeriod: 12_000, interval: "year", price: { amount: 9900, currency: "USD", formatted: "US$99.00" } },
    ]);
  });
});

describe("CATALOG_FILE validation at start-up", () => {
  const good = { id: "p", name: "P", credits: 1, price: { amount: 100, currency: "EUR" } };
  const cases: Array<[string, unknown, RegExp]> = [
    ["a file that is not JSON", "{ packs: ", /not valid JSON/],
    ["a pack without credits", { packs: [{ id: "p", name: "P", price: { amount: 1, currency: "EUR" } }], plans: [] }, /\/packs\/0/],
    ["a price in floating-point units", { packs: [{ ...good, price: { amount: 9.99, currency: "EUR" } }], plans: [] }, /\/packs\/0\/price\/amount/],
    [
      "an unknown interval",
      { packs: [], plans: [{ id: "x", name: "X", creditsPerPeriod: 1, interval: "week", price: { amount: 1, currency: "EUR" } }] },
      /\/plans\/0\/interval/,
    ],
    ["a currency that does not exist", { packs: [{ ...good, price: { amount: 1, currency: "XYZ" } }], plans: [] }, /XYZ/],
    ["the same pack id twice", { packs: [good, good], plans: [] }, /listed twice/],
  ];
  for (const [what, content, message] of cases) {
    test(`${what} stops start-up with a message naming CATALOG_FILE`, async () => {
      const error = await startWith(catalogFile(content));
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).variable).toBe("CATALOG_FILE");
      expect((error as ConfigError).message).toStartWith("CATALOG_FILE: ");
      expect((error as ConfigError).message).toMatch(message);
    });
  }

  test("a missing file stops start-up with a message naming CATALOG_FILE", async () => {
    const error = await startWith("/nonexistent/catalog.json");
    expect((error as ConfigError).message).toMatch(/^CATALOG_FILE: cannot read \/nonexistent\/catalog.json: ENOENT/);
  });
});
