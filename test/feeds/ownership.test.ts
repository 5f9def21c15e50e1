import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createFeedToken } from "../../src/modules/feeds/tokens";
import { importFeed } from "../../src/modules/ingest/import-feed";
import { createOrganization, createTestContext, json, queryRows, type TestContext } from "../support/context";
import { addSource, offerLine } from "./feed-helpers";

const PEN = "04006381333931";
const DAY = 86_400_000;
let context: TestContext;

beforeEach(async () => {
  context = await createTestContext({ FRESHNESS_WINDOW: "24h" });
});
afterEach(() => context.close());

/** A push source bound to `merchants`, and its push token. */
async function pushSource(
  name: string,
  merchants: string[],
  options: { authoritative?: boolean } = {},
): Promise<{ id: string; push: (lines: string[]) => Promise<any> }> {
  const now = context.clock.now();
  const source = await addSource(context.store, { name, kind: "push", merchants, authoritative: options.authoritative ?? false }, now);
  const token = (await createFeedToken(context.store, { scope: "push", sourceId: source.id, name, now })).clearToken;
  const push = async (lines: string[]) => {
    const response = await context.request("/api/v1/feeds/push", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/x-ndjson" },
      body: lines.join("\n"),
    });
    expect(response.status).toBe(200);
    return json(response);
  };
  return { id: source.id, push };
}

async function offersOf(gtin: string) {
  return (await context.store.findProductWithOffers(gtin))?.offers.map((offer) => [offer.merchantId, offer.merchantName, offer.priceAmount]);
}

async function productOf(gtin: string) {
  const [row] = await queryRows<{ title: string; brand: string | null; image_url: string | null }>(
    context.store,
    "SELECT title, brand, image_url FROM products WHERE gtin = ?",
    [gtin],
  );
  return row;
}

describe("a feed source writes only what it owns", () => {
  test("a record for a merchant the source is not bound to is rejected with the reason and writes nothing, not even the merchant's name", async () => {
    const now = context.clock.now();
    const a = await pushSource("merchant-a", ["shop-a"]);
    const b = await pushSource("merchant-b", ["shop-b"]);
    expect(await a.push([offerLine(PEN, "shop-a", "12.99", now - 1000)])).toMatchObject({ offers: 1, rejectedCount: 0 });

    const run = await b.push([offerLine(PEN, "shop-a", "0.01", now, { merchantName: "Cheap Scam" }), offerLine(PEN, "shop-b", "11.50", now)]);
    expect(run).toMatchObject({
      status: "ok",
      recordsRead: 2,
      offers: 1,
      rejectedCount: 1,
      rejected: [{ line: 1, error: 'merchantId: "shop-a" is not a merchant of source merchant-b (it may write shop-b)' }],
    });
    expect(await offersOf(PEN)).toEqual([
      ["shop-a", "Merchant shop-a", 1299],
      ["shop-b", "Merchant shop-b", 1150],
    ]);
    const [runOfB] = (await context.store.listFeedRuns(b.id, { limit: 1 })).items;
    expect(runOfB).toMatchObject({
      rejectedCount: 1,
      rejected: [{ line: 1, error: expect.stringContaining('"shop-a" is not a merchant of source merchant-b') }],
    });
  });

  test("another source cannot turn a free stale-data answer into a billed fresh-offer", async () => {
    const organization = await createOrganization(context, 5);
    const a = await pushSource("merchant-a", ["shop-a"]);
    const b = await pushSource("merchant-b", ["shop-b"]);
    await a.push([offerLine(PEN, "shop-a", "12.99", context.clock.now() - 2 * DAY)]);

    expect(await b.push([offerLine(PEN, "shop-a", "0.01", context.clock.now())])).toMatchObject({ offers: 0, rejectedCount: 1 });
    const response = await context.request(`/api/v1/products/${PEN}/price`, { headers: organization.auth });
    expect(response.status).toBe(200);
    expect((await json(response)).meta).toMatchObject({ reason: "stale-data", billable: false, creditsConsumed: 0, creditsRemaining: 5 });
  });

  test("a source bound to no merchant may still describe new products, but writes no offer", async () => {
    const quiet = await pushSource("catalogue", []);
    const run = await quiet.push([JSON.stringify({ gtin: PEN, title: "Ballpoint pen" }), offerLine(PEN, "shop-a", "1.00", context.clock.now())]);
    expect(run).toMatchObject({
      offers: 0,
      rejectedCount: 1,
      rejected: [{ line: 2, error: 'merchantId: "shop-a" is not a merchant of source catalogue (it may write none)' }],
    });
    expect(await productOf(PEN)).toMatchObject({ title: "Ballpoint pen" });
    expect(await offersOf(PEN)).toEqual([]);
  });

  test("the reason names at most three of a source's merchants, so a rejected line stays one short line", async () => {
    const big = await pushSource("aggregator", ["shop-1", "shop-2", "shop-3", "shop-4", "shop-5"]);
    const run = await big.push([offerLine(PEN, "shop-9", "1.00", context.clock.now())]);
    expect(run.rejected).toEqual([
      { line: 1, error: 'merchantId: "shop-9" is not a merchant of source aggregator (it may write shop-1, shop-2, shop-3 and 2 more)' },
    ]);
  });
});

describe("descriptive product fields follow the precedence the operator sets", () => {
  test("the first source to describe a product keeps its title, brand and image; another source's offer is written without them", async () => {
    const now = context.clock.now();
    const a = await pushSource("merchant-a", ["shop-a"]);
    const b = await pushSource("merchant-b", ["shop-b"]);
    await a.push([offerLine(PEN, "shop-a", "12.99", now, { title: "Ballpoint pen", brand: "Staedtler", imageUrl: "https://img.example/pen.jpg" })]);

    const run = await b.push([offerLine(PEN, "shop-b", "11.50", now, { title: "FREE MONEY", brand: "Scam", imageUrl: "https://evil.example/x.jpg" })]);
    expect(run).toMatchObject({ offers: 1, rejectedCount: 0 });
    expect(await productOf(PEN)).toEqual({ title: "Ballpoint pen", brand: "Staedtler", image_url: "https://img.example/pen.jpg" });
    expect(await offersOf(PEN)).toEqual([
      ["shop-a", "Merchant shop-a", 1299],
      ["shop-b", "Merchant shop-b", 1150],
    ]);

    // The describing source itself may change them.
    await a.push([offerLine(PEN, "shop-a", "12.99", now, { title: "Ballpoint pen, blue" })]);
    expect((await productOf(PEN))?.title).toBe("Ballpoint pen, blue");
  });

  test("a source the operator marks authoritative replaces another source's descriptions", async () => {
    const now = context.clock.now();
    const a = await pushSource("merchant-a", ["shop-a"]);
    const catalogue = await pushSource("catalogue", [], { authoritative: true });
    await a.push([offerLine(PEN, "shop-a", "12.99", now, { title: "pen blu", brand: "staedtler" })]);
    await catalogue.push([JSON.stringify({ gtin: PEN, title: "Ballpoint pen, blue", brand: "Staedtler" })]);
    expect(await productOf(PEN)).toMatchObject({ title: "Ballpoint pen, blue", brand: "Staedtler" });
    await a.push([offerLine(PEN, "shop-a", "12.49", now, { title: "pen blu again" })]);
    expect(await productOf(PEN)).toMatchObject({ title: "Ballpoint pen, blue" });
    expect(await offersOf(PEN)).toEqual([["shop-a", "Merchant shop-a", 1249]]);
  });

  test("the operator's import may write any merchant and always replaces descriptions", async () => {
    const now = context.clock.now();
    const a = await pushSource("merchant-a", ["shop-a"]);
    await a.push([offerLine(PEN, "shop-a", "12.99", now - 1000, { title: "pen blu" })]);
    const feed = [
      offerLine(PEN, "shop-a", "12.79", now, { title: "Ballpoint pen", merchantName: "Shop A" }),
      offerLine(PEN, "shop-z", "9.99", now, { title: "Ballpoint pen" }),
    ].join("\n");
    const report = await importFeed(context.store, new Blob([feed]).stream(), { format: "ndjson", now });
    expect(report).toMatchObject({ offers: 2, rejectedCount: 0 });
    expect((await productOf(PEN))?.title).toBe("Ballpoint pen");
    expect(await offersOf(PEN)).toEqual([
      ["shop-a", "Shop A", 1279],
      ["shop-z", "Merchant shop-z", 999],
    ]);
  });
});

describe("observation times in the future", () => {
  test("an offer dated more than a minute ahead is rejected, for a source and for the operator's import", async () => {
    const now = context.clock.now();
    const a = await pushSource("merchant-a", ["shop-a"]);
    const ahead = new Date(now + 3 * 60_000).toISOString();
    expect(await a.push([offerLine(PEN, "shop-a", "12.99", now + 3 * 60_000)])).toMatchObject({
      offers: 0,
      rejected: [{ line: 1, error: `observedAt: "${ahead}" is more than 60 s in the future` }],
    });
    const report = await importFeed(context.store, new Blob([offerLine(PEN, "shop-a", "12.99", now + 3 * 60_000)]).stream(), { format: "ndjson", now });
    expect(report.rejected).toEqual([{ line: 1, error: `observedAt: "${ahead}" is more than 60 s in the future` }]);
    expect(await context.store.findProductWithOffers(PEN)).toBeNull();
  });

  test("an offer dated a little ahead counts as observed now, so the source's next observation replaces it", async () => {
    const now = context.clock.now();
    const a = await pushSource("merchant-a", ["shop-a"]);
    await a.push([offerLine(PEN, "shop-a", "12.99", now + 50_000)]);
    const [stored] = (await context.store.findProductWithOffers(PEN))!.offers;
    expect(stored!.observedAt).toBe(now);

    context.clock.advance(10_000);
    await a.push([offerLine(PEN, "shop-a", "11.99", now + 10_000)]);
    expect(await offersOf(PEN)).toEqual([["shop-a", "Merchant shop-a", 1199]]);
  });
});
