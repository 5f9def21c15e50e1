import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { FeedRecord } from "../../src/db/store";
import { addProduct, createOrganization, createTestContext, json, type TestContext, type TestOrganization } from "../support/context";

const GTIN = "04006381333931"; // GTIN-13 4006381333931
const STALE = "00036000291452"; // GTIN-12 036000291452: one offer, observed long ago
const EMPTY = "05901234123457"; // no offers, no history
const UNKNOWN = "96385074"; // valid GTIN-8, no product
const at = (iso: string) => Date.parse(iso);
const euros = (amount: number) => ({ amount, currency: "EUR", formatted: `€${(amount / 100).toFixed(2)}` });

let context: TestContext;
let org: TestOrganization;

async function observe(gtin: string, merchantId: string, price: number, iso: string, availability: "in_stock" | "out_of_stock" = "in_stock") {
  const record: FeedRecord = {
    product: { gtin, title: `Product ${gtin}`, brand: "Acme" },
    offer: {
      merchantId,
      merchantName: `Merchant ${merchantId}`,
      priceAmount: price,
      currency: "EUR",
      shippingAmount: null,
      availability,
      condition: "new",
      url: null,
      observedAt: at(iso),
    },
  };
  await context.store.applyFeedRecords([record], at(iso));
}

beforeEach(async () => {
  // now: 2026-11-22T10:00:00Z
  context = await createTestContext();
  org = await createOrganization(context, 100);
  await observe(GTIN, "m-a", 1000, "2026-11-01T08:00:00Z");
  await observe(GTIN, "m-b", 2000, "2026-11-01T10:00:00Z");
  await observe(GTIN, "m-a", 900, "2026-11-01T12:00:00Z");
  await observe(GTIN, "m-a", 1100, "2026-11-02T09:00:00Z", "out_of_stock");
  await observe(GTIN, "m-b", 1900, "2026-11-03T10:00:00Z");
  // An identical repeat is no new state.
  await observe(GTIN, "m-b", 1900, "2026-11-04T10:00:00Z");
  await observe(STALE, "m-a", 500, "2026-09-01T10:00:00Z");
  await addProduct(context, EMPTY, []);
});

afterEach(async () => {
  await context.close();
});

function history(gtin: string, query = "", headers: Record<string, string> = org.auth) {
  return context.request(`/api/v1/products/${gtin}/price/history${query}`, { headers });
}

async function available(organizationId = org.organizationId): Promise<number> {
  return (await context.store.getBalance(organizationId, context.clock.now())).available;
}

const RANGE = "?from=2026-11-01&to=2026-11-04";

describe("GET /api/v1/products/{gtin}/price/history", () => {
  test("interval=change lists every state that held in the range with its time range, and bills HISTORY_CREDIT_COST", async () => {
    const response = await history("4006381333931", RANGE);
    expect(response.status).toBe(200);
    const body = await json(response);
    expect(body.meta).toMatchObject({
      gtin: GTIN,
      facet: "product.price-history",
      billable: true,
      creditsConsumed: 2,
      creditsRemaining: 98,
      reason: "history",
    });
    expect(body.data.product).toEqual({ gtin: GTIN, title: `Product ${GTIN}`, brand: "Acme", imageUrl: null });
    expect(body.data).toMatchObject({ interval: "change", from: "2026-11-01T00:00:00.000Z", to: "2026-11-04T00:00:00.000Z", nextCursor: null });
    expect(body.data.points).toEqual([
      {
        merchant: { id: "m-a", name: "Merchant m-a" },
        price: euros(1000),
        shipping: null,
        availability: "in_stock",
        availabilityLabel: "In stock",
        validFrom: "2026-11-01T08:00:00.000Z",
        validTo: "2026-11-01T12:00:00.000Z",
      },
      {
        merchant: { id: "m-b", name: "Merchant m-b" },
        price: euros(2000),
        shipping: null,
        availability: "in_stock",
        availabilityLabel: "In stock",
        validFrom: "2026-11-01T10:00:00.000Z",
        validTo: "2026-11-03T10:00:00.000Z",
      },
      {
        merchant: { id: "m-a", name: "Merchant m-a" },
        price: euros(900),
        shipping: null,
        availability: "in_stock",
        availabilityLabel: "In stock",
        validFrom: "2026-11-01T12:00:00.000Z",
        validTo: "2026-11-02T09:00:00.000Z",
      },
      {
        merchant: { id: "m-a", name: "Merchant m-a" },
        price: euros(1100),
        shipping: null,
        availability: "out_of_stock",
        availabilityLabel: "Out of stock",
        validFrom: "2026-11-02T09:00:00.000Z",
        validTo: null,
      },
      {
        merchant: { id: "m-b", name: "Merchant m-b" },
        price: euros(1900),
        shipping: null,
        availability: "in_stock",
        availabilityLabel: "In stock",
        validFrom: "2026-11-03T10:00:00.000Z",
        validTo: null,
      },
    ]);
    expect(await available()).toBe(98);
    const usage = (await context.store.listTransactions(org.organizationId, { limit: 10, types: ["usage"] })).items;
    expect(usage).toHaveLength(1);
    expect(usage[0]).toMatchObject({ amount: -2, keyId: org.keyId, requestId: body.meta.requestId, gtin: GTIN, description: `Price history ${GTIN}` });
  });

  test("a state that started before the range and held into it is listed; one that ended before it is not", async () => {
    const body = await json(await history(GTIN, "?from=2026-11-01T13:00:00Z&to=2026-11-02T00:00:00Z"));
    expect(body.data.points.map((point: any) => [point.merchant.id, point.price.amount])).toEqual([
      ["m-b", 2000],
      ["m-a", 900],
    ]);
  });

  test("interval=day gives per UTC day and merchant the lowest, highest and last price and the availability at the end of the day", async () => {
    const body = await json(await history(GTIN, `${RANGE}&interval=day`));
    expect(body.meta).toMatchObject({ reason: "history", creditsConsumed: 2 });
    const day = (merchant: string, date: string, lowest: number, highest: number, last: number, availability = "in_stock") => ({
      merchant: { id: merchant, name: `Merchant ${merchant}` },
      day: date,
      lowestPrice: euros(lowest),
      highestPrice: euros(highest),
      lastPrice: euros(last),
      availability,
      availabilityLabel: availability === "in_stock" ? "In stock" : "Out of stock",
    });
    expect(body.data.points).toEqual([
      day("m-a", "2026-11-01", 900, 1000, 900),
      day("m-b", "2026-11-01", 2000, 2000, 2000),
      day("m-a", "2026-11-02", 900, 1100, 1100, "out_of_stock"),
      day("m-b", "2026-11-02", 2000, 2000, 2000),
      day("m-a", "2026-11-03", 1100, 1100, 1100, "out_of_stock"),
      day("m-b", "2026-11-03", 1900, 2000, 1900),
    ]);
  });

  test("interval=day reads whole UTC days up to now, the current day included", async () => {
    const body = await json(await history(GTIN, "?from=2026-11-21T18:00:00Z&interval=day&merchant=m-b"));
    expect(body.data.points.map((point: any) => [point.day, point.lastPrice.amount])).toEqual([
      ["2026-11-21", 1900],
      ["2026-11-22", 1900],
    ]);
  });

  test("merchant keeps one merchant's offer", async () => {
    const change = await json(await history(GTIN, `${RANGE}&merchant=m-b`));
    expect(change.data.points.map((point: any) => point.price.amount)).toEqual([2000, 1900]);
    const days = await json(await history(GTIN, `${RANGE}&merchant=m-b&interval=day`));
    expect(days.data.points.every((point: any) => point.merchant.id === "m-b")).toBe(true);
    expect(days.data.points).toHaveLength(3);
    const nobody = await json(await history(GTIN, `${RANGE}&merchant=m-zzz`));
    expect(nobody.meta).toMatchObject({ reason: "no-data", billable: false, creditsConsumed: 0 });
  });

  test("limit and cursor page through the answer; each page is an answer, billed", async () => {
    const seen: Array<[string, number]> = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = `${RANGE}&limit=2${cursor === null ? "" : `&cursor=${cursor}`}`;
      const body: any = await json(await history(GTIN, query));
      expect(body.meta.reason).toBe("history");
      for (const point of body.data.points) seen.push([point.merchant.id, point.price.amount]);
      cursor = body.data.nextCursor;
      pages++;
    } while (cursor !== null);
    expect(pages).toBe(3);
    expect(seen).toEqual([
      ["m-a", 1000],
      ["m-b", 2000],
      ["m-a", 900],
      ["m-a", 1100],
      ["m-b", 1900],
    ]);
    expect(await available()).toBe(94);

    const first = await json(await history(GTIN, `${RANGE}&interval=day&limit=4`));
    expect(first.data.points).toHaveLength(4);
    const second = await json(await history(GTIN, `${RANGE}&interval=day&limit=4&cursor=${first.data.nextCursor}`));
    expect(second.data.points.map((point: any) => [point.day, point.merchant.id])).toEqual([
      ["2026-11-03", "m-a"],
      ["2026-11-03", "m-b"],
    ]);
    expect(second.data.nextCursor).toBeNull();
  });

  test("a cursor of the other interval, or not one of ours, is 400 invalid-parameter", async () => {
    const first = await json(await history(GTIN, `${RANGE}&limit=1`));
    for (const query of [`${RANGE}&interval=day&cursor=${first.data.nextCursor}`, `${RANGE}&cursor=bm90LWEtY3Vyc29y`]) {
      const response = await history(GTIN, query);
      expect(response.status).toBe(400);
      expect((await json(response)).meta).toMatchObject({ reason: "invalid-parameter", billable: false });
    }
  });

  test("no-data: the product exists but nothing falls in the range, or it has no history at all; not billed", async () => {
    for (const [gtin, query] of [
      [GTIN, "?from=2026-10-01&to=2026-10-15"],
      [EMPTY, ""],
    ] as const) {
      const response = await history(gtin, query);
      expect(response.status).toBe(200);
      const body = await json(response);
      expect(body.meta).toMatchObject({ reason: "no-data", billable: false, creditsConsumed: 0, creditsRemaining: 100 });
      expect(body.data.points).toEqual([]);
    }
    expect(await available()).toBe(100);
  });

  test("a product whose offers are long stale still answers history for a range that has it", async () => {
    const price = await json(await context.request(`/api/v1/products/${STALE}/price`, { headers: org.auth }));
    expect(price.meta.reason).toBe("stale-data");
    const body = await json(await history(STALE, "?from=2026-08-25&to=2026-09-05&interval=day"));
    expect(body.meta).toMatchObject({ reason: "history", creditsConsumed: 2 });
    expect(body.data.points.map((point: any) => point.day)).toEqual(["2026-09-01", "2026-09-02", "2026-09-03", "2026-09-04"]);
  });

  test("the default range is the last 30 days", async () => {
    const body = await json(await history(GTIN));
    expect(body.data.from).toBe("2026-10-23T10:00:00.000Z");
    expect(body.data.to).toBe("2026-11-22T10:00:00.000Z");
    expect(body.data.points).toHaveLength(5);
  });

  test("invalid-gtin is 400 and product-not-found 404, with meta, not billed", async () => {
    const invalid = await history("4006381333932", RANGE);
    expect(invalid.status).toBe(400);
    expect((await json(invalid)).meta).toMatchObject({
      gtin: "4006381333932",
      facet: "product.price-history",
      reason: "invalid-gtin",
      billable: false,
      creditsRemaining: 100,
    });
    const unknown = await history(UNKNOWN, RANGE);
    expect(unknown.status).toBe(404);
    expect((await json(unknown)).meta).toMatchObject({
      gtin: "00000096385074",
      reason: "product-not-found",
      billable: false,
      creditsConsumed: 0,
      creditsRemaining: 100,
    });
    expect(await available()).toBe(100);
  });

  test("range limits: more than 400 days, from not before to, or not ISO 8601 is 400 invalid-parameter", async () => {
    for (const query of [
      "?from=2025-01-01&to=2026-02-06",
      "?from=2026-11-04&to=2026-11-01",
      "?from=2026-11-01&to=2026-11-01",
      "?from=yesterday",
      "?from=2026-11-01T10:00:00",
      "?interval=week",
      "?limit=0",
      "?limit=5001",
      "?language=de",
      "?from=2026-11-01&from=2026-11-02",
    ]) {
      const response = await history(GTIN, query);
      expect(response.status, query).toBe(400);
      const body = await json(response);
      expect(body.meta, query).toMatchObject({ reason: "invalid-parameter", billable: false, creditsConsumed: 0, facet: "product.price-history" });
    }
    // Exactly 400 days is allowed.
    expect((await history(GTIN, "?from=2025-10-18&to=2026-11-22")).status).toBe(200);
    expect(await available()).toBe(98);
  });

  test("insufficient-credits is 402 when the balance does not cover HISTORY_CREDIT_COST; nothing is billed", async () => {
    const poor = await createOrganization(context, 1, "Poor Org");
    const response = await history(GTIN, RANGE, poor.auth);
    expect(response.status).toBe(402);
    expect((await json(response)).meta).toMatchObject({ reason: "insufficient-credits", billable: false, creditsRemaining: 1 });
    expect(await available(poor.organizationId)).toBe(1);
  });

  test("401 comes first: without a valid key an invalid GTIN or range says nothing but 401", async () => {
    for (const headers of [{}, { authorization: "Bearer pps_nope" }] as Array<Record<string, string>>) {
      const response = await history("123", "?from=never&interval=week", headers);
      expect(response.status).toBe(401);
      expect(response.headers.get("www-authenticate")).toStartWith("Bearer");
      expect((await json(response)).meta).toMatchObject({ reason: "unauthorized", creditsRemaining: 0, facet: "product.price-history" });
    }
  });

  test("language=fr localizes prices and labels", async () => {
    const body = await json(await history(GTIN, `${RANGE}&language=fr&merchant=m-a`));
    expect(body.data.points[0].price).toEqual({ amount: 1000, currency: "EUR", formatted: "10,00 €" });
    expect(body.data.points[2].availabilityLabel).toBe("Rupture de stock");
  });

  test("Idempotency-Key: a retry gets the stored answer, billed once; another query with the key is 422", async () => {
    const headers = { ...org.auth, "idempotency-key": "history-1" };
    const first = await history(GTIN, RANGE, headers);
    const firstBody = await json(first);
    const again = await history(GTIN, RANGE, headers);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await json(again)).toEqual(firstBody);
    expect(await available()).toBe(98);
    const other = await history(GTIN, `${RANGE}&interval=day`, headers);
    expect(other.status).toBe(422);
    expect((await json(other)).meta).toMatchObject({ reason: "idempotency-conflict" });
  });

  test("another organization sees the same product history and nothing of the first one's: its own balance, ledger and Idempotency-Keys", async () => {
    const other = await createOrganization(context, 10, "Other Org");
    const mine = await json(await history(GTIN, RANGE, { ...org.auth, "idempotency-key": "shared" }));
    const theirs = await history(GTIN, `${RANGE}&interval=day`, { ...other.auth, "idempotency-key": "shared" });
    expect(theirs.status).toBe(200);
    expect(theirs.headers.get("idempotent-replayed")).toBeNull();
    const theirBody = await json(theirs);
    expect(theirBody.meta).toMatchObject({ reason: "history", creditsRemaining: 8 });
    const again = await json(await history(GTIN, RANGE, other.auth));
    expect(again.data).toEqual(mine.data);
    expect(again.meta.creditsRemaining).toBe(6);
    const ledger = (await context.store.listTransactions(other.organizationId, { limit: 10, types: ["usage"] })).items;
    expect(ledger.map((row) => row.requestId).sort()).toEqual([theirBody.meta.requestId, again.meta.requestId].sort());
    expect(await available()).toBe(98);
  });

  test("history prune removes the pruned time from both intervals", async () => {
    await context.store.prunePriceHistory(at("2026-11-02T00:00:00Z"));
    for (const interval of ["change", "day"]) {
      const body = await json(await history(GTIN, `?from=2026-11-01&to=2026-11-02&interval=${interval}`));
      expect(body.meta.reason, interval).toBe("no-data");
    }
    const days = await json(await history(GTIN, `${RANGE}&interval=day&merchant=m-a`));
    expect(days.data.points.map((point: any) => [point.day, point.lowestPrice.amount, point.lastPrice.amount])).toEqual([
      ["2026-11-02", 900, 1100],
      ["2026-11-03", 1100, 1100],
    ]);
  });

  test("HISTORY_CREDIT_COST sets the price of an answer", async () => {
    await context.close();
    context = await createTestContext({ HISTORY_CREDIT_COST: "5" });
    org = await createOrganization(context, 100);
    await observe(GTIN, "m-a", 1000, "2026-11-01T08:00:00Z");
    const body = await json(await history(GTIN, RANGE));
    expect(body.meta).toMatchObject({ reason: "history", creditsConsumed: 5, creditsRemaining: 95 });
  });
});
