import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { PostgresStore } from "../../src/db/postgres-store";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { type Store, SYSTEM_USER_ID } from "../../src/db/store";
import { createApiKey } from "../../src/modules/keys/service";
import { addProduct, createOrganization, createTestContext, json, ledgerSum, type TestContext, type TestOrganization } from "../support/context";
import { securityTests } from "../support/security";

// The batch look-up: POST /api/v1/products/prices, on whichever store the suite runs against.
const FRESH = "04006381333931"; // GTIN-13 4006381333931
const FRESH_2 = "00012345678905"; // GTIN-12 012345678905
const FRESH_3 = "00000040170725"; // GTIN-8 40170725
const STALE = "00036000291452"; // GTIN-12 036000291452
const EMPTY = "05901234123457"; // GTIN-13 5901234123457, no offers
const UNKNOWN = "96385074"; // valid GTIN-8, no product
const HOUR = 3_600_000;

let context: TestContext;
let org: TestOrganization;

async function seed(target: TestContext): Promise<void> {
  for (const gtin of [FRESH, FRESH_2, FRESH_3]) await addProduct(target, gtin, [{ merchantId: "m-a", price: 1299, ageMs: HOUR }]);
  await addProduct(target, STALE, [{ merchantId: "m-a", price: 500, ageMs: 25 * HOUR }]);
  await addProduct(target, EMPTY, []);
}

async function start(env: Record<string, string> = {}, credits = 10): Promise<void> {
  context = await createTestContext(env);
  org = await createOrganization(context, credits);
  await seed(context);
}

afterEach(async () => {
  await context.close();
});

function batch(body: unknown, headers: Record<string, string> = org.auth) {
  return context.request("/api/v1/products/prices", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

async function balance() {
  return context.store.getBalance(org.organizationId, context.clock.now());
}

async function usageRows() {
  return (await context.store.listTransactions(org.organizationId, { limit: 100, types: ["usage"] })).items;
}

async function expectLedgerInvariant(): Promise<void> {
  const { available, reserved } = await balance();
  expect(reserved).toBe(0);
  expect(await ledgerSum(context.store, org.organizationId)).toBe(available);
}

describe("POST /api/v1/products/prices", () => {
  securityTests({ method: "POST", path: () => "/api/v1/products/prices", body: () => ({ gtins: ["4006381333931"] }), accepts: "key" }, () => context);

  beforeEach(() => start());

  test("every reason in one batch: one item per GTIN as given, in order, data or a problem each; only fresh offers are billed", async () => {
    const asked = ["4006381333931", "036000291452", "5901234123457", UNKNOWN, "4006381333932", "abc"];
    const response = await batch({ gtins: asked });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("application/json");
    const body = await json(response);
    expect(body.meta).toMatchObject({
      facet: "product.price",
      billable: true,
      creditsConsumed: 1,
      creditsRemaining: 9,
      itemCount: 6,
      reasons: { "fresh-offer": 1, "stale-data": 1, "no-data": 1, "product-not-found": 1, "invalid-gtin": 2, "insufficient-credits": 0 },
    });
    expect(body.meta.requestId).toBe(response.headers.get("x-request-id"));
    expect(body.data.map((item: any) => [item.input, item.gtin, item.reason])).toEqual([
      ["4006381333931", FRESH, "fresh-offer"],
      ["036000291452", STALE, "stale-data"],
      ["5901234123457", EMPTY, "no-data"],
      [UNKNOWN, "00000096385074", "product-not-found"],
      ["4006381333932", "4006381333932", "invalid-gtin"],
      ["abc", "abc", "invalid-gtin"],
    ]);
    // The same `data` as the single look-up of that product.
    const single = await json(await context.request(`/api/v1/products/${FRESH}/price`, { headers: org.auth }));
    expect(body.data[0].data).toEqual(single.data);
    expect(body.data[1].data).toMatchObject({ offers: [], lastObservedAt: new Date(context.clock.now() - 25 * HOUR).toISOString() });
    expect(body.data[2].data.offers).toEqual([]);
    expect(body.data[3].problem).toEqual({
      type: "http://localhost:8080/problems/product-not-found",
      title: "Product Not Found",
      status: 404,
      detail: "No product matches this GTIN.",
    });
    expect(body.data[4].problem).toMatchObject({ title: "Invalid GTIN", status: 400 });
    expect(body.data[3].data).toBeUndefined();
    const rows = await usageRows();
    expect(rows.map((row) => [row.gtin, row.amount, row.requestId]).sort()).toEqual(
      [
        [FRESH, -1, body.meta.requestId],
        [FRESH, -1, single.meta.requestId],
      ].sort(),
    );
    expect((await balance()).available).toBe(8);
    await expectLedgerInvariant();
  });

  test("in the body's language (over Accept-Language): money, labels, the items' problems and the batch's own problems", async () => {
    const response = await batch({ gtins: [FRESH, UNKNOWN], language: "fr" }, { ...org.auth, "accept-language": "en" });
    expect(response.headers.get("content-language")).toBe("fr");
    const body = await json(response);
    expect(body.data[0].data.offers[0].price.formatted).toBe("12,99 €");
    expect(body.data[1].problem.detail).toBe("Aucun produit ne correspond à ce GTIN.");
    await context.store.updateApiKeyControls(org.organizationId, org.keyId, { monthlyCreditLimit: 1 });
    const capped = await batch({ gtins: [FRESH, FRESH_2], language: "fr" }, { ...org.auth, "accept-language": "en" });
    expect(capped.status).toBe(402);
    expect(capped.headers.get("content-language")).toBe("fr");
    expect((await json(capped)).detail).toContain("limite mensuelle de 1 crédits");
  });

  test("a GTIN asked twice (in any of its forms) is billed once, in one usage row for the request", async () => {
    const body = await json(await batch({ gtins: [FRESH, "4006381333931", FRESH_2, "012345678905", FRESH_3, FRESH] }));
    expect(body.meta).toMatchObject({ creditsConsumed: 3, creditsRemaining: 7, itemCount: 6, reasons: { "fresh-offer": 6 } });
    expect(body.data.map((item: any) => item.gtin)).toEqual([FRESH, FRESH, FRESH_2, FRESH_2, FRESH_3, FRESH]);
    const rows = await usageRows();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      amount: -3,
      balanceAfter: 7,
      gtin: null,
      description: "Price look-ups of 3 GTINs",
      requestId: body.meta.requestId,
      keyId: org.keyId,
    });
    expect((await balance()).available).toBe(7);
    await expectLedgerInvariant();
  });

  test("a batch with one fresh GTIN among others names that GTIN on its usage row, as a single look-up does", async () => {
    const body = await json(await batch({ gtins: [STALE, EMPTY, FRESH_2, UNKNOWN] }));
    expect(body.meta).toMatchObject({ creditsConsumed: 1, creditsRemaining: 9 });
    const rows = await usageRows();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ amount: -1, gtin: FRESH_2, description: `Price look-up ${FRESH_2}`, requestId: body.meta.requestId });
    await expectLedgerInvariant();
  });

  test("billed GTINs count one by one in the usage counters, as single look-ups do", async () => {
    await batch({ gtins: [FRESH, FRESH_2, FRESH, STALE, UNKNOWN] });
    await context.services.usageCounters.flush();
    const totals = await context.store.usageTotals(org.organizationId, { from: 0, to: context.clock.now() + 1, periodMs: 86_400_000, byKey: false });
    const byReason = Object.fromEntries(totals.map((total) => [total.reason, [total.requests, total.credits]]));
    expect(byReason).toMatchObject({ "fresh-offer": [2, 2], "stale-data": [1, 0], "product-not-found": [1, 0] });
  });

  test("without enough credits for every well-formed GTIN, the whole batch is 402 and nothing is looked up or billed", async () => {
    await context.close();
    await start({}, 2);
    // Three well-formed GTINs need three credits, even though only one of them would be fresh.
    const response = await batch({ gtins: [FRESH, STALE, UNKNOWN, "bad"] });
    expect(response.status).toBe(402);
    expect(response.headers.get("content-type")).toStartWith("application/problem+json");
    const body = await json(response);
    expect(body).toMatchObject({ type: "http://localhost:8080/problems/insufficient-credits", status: 402 });
    expect(body.meta).toMatchObject({ reason: "insufficient-credits", billable: false, creditsConsumed: 0, creditsRemaining: 2, itemCount: 0 });
    expect(await usageRows()).toEqual([]);
    expect(await balance()).toMatchObject({ available: 2, reserved: 0 });
    // Two well-formed GTINs fit.
    expect((await batch({ gtins: [FRESH, STALE, "bad"] })).status).toBe(200);
    expect((await balance()).available).toBe(1);
    await expectLedgerInvariant();
  });

  test("a key at its monthly credit limit gets 402 naming the limit; the organization's other keys keep working", async () => {
    await context.store.updateApiKeyControls(org.organizationId, org.keyId, { monthlyCreditLimit: 2 });
    expect((await batch({ gtins: [FRESH, FRESH_2] })).status).toBe(200);
    const refused = await batch({ gtins: [FRESH_3] });
    expect(refused.status).toBe(402);
    const body = await json(refused);
    expect(body.detail).toContain("monthly credit limit of 2 credits");
    expect(body.meta).toMatchObject({ reason: "insufficient-credits", creditsRemaining: 8 });
    const second = await createApiKey(context.store, {
      organizationId: org.organizationId,
      name: "other",
      createdBy: SYSTEM_USER_ID,
      keyPrefix: context.services.config.keyPrefix,
      now: context.clock.now(),
    });
    expect((await batch({ gtins: [FRESH_3] }, { authorization: `Bearer ${second.clearKey}` })).status).toBe(200);
    expect((await balance()).available).toBe(7);
    await expectLedgerInvariant();
  });

  test("a batch of invalid GTINs only reserves nothing and bills nothing", async () => {
    await context.close();
    await start({}, 0);
    const body = await json(await batch({ gtins: ["1", "2"] }));
    expect(body.meta).toMatchObject({ billable: false, creditsConsumed: 0, creditsRemaining: 0, reasons: { "invalid-gtin": 2 } });
  });

  test("the key is checked first; then a body that is not 1 to 100 GTIN strings is 422 unprocessable-body with meta", async () => {
    const unauthorized = await batch({ gtins: [] }, { authorization: "Bearer nope" });
    expect(unauthorized.status).toBe(401);
    expect(unauthorized.headers.get("www-authenticate")).toStartWith("Bearer");
    expect((await json(unauthorized)).meta).toMatchObject({ reason: "unauthorized", creditsRemaining: 0 });
    for (const bad of [
      {},
      { gtins: [] },
      { gtins: Array.from({ length: 101 }, () => FRESH) },
      { gtins: [FRESH, 4006381333931] },
      { gtins: FRESH },
      { gtins: [FRESH], language: "de" },
    ]) {
      const response = await batch(bad);
      expect(response.status).toBe(422);
      const body = await json(response);
      expect(body.type).toEndWith("/unprocessable-body");
      expect(body.meta).toMatchObject({ reason: "invalid-parameter", creditsRemaining: 10 });
    }
    expect((await batch({ gtins: Array.from({ length: 100 }, () => FRESH) })).status).toBe(200);
    expect(await usageRows()).toHaveLength(1);
  });

  test("Idempotency-Key: the same list again is the stored answer, not billed again; another list with the key is 422", async () => {
    const headers = { ...org.auth, "idempotency-key": "batch-1" };
    const first = await batch({ gtins: [FRESH, FRESH_2, UNKNOWN] }, headers);
    expect(first.status).toBe(200);
    const firstBody = await json(first);
    expect(firstBody.meta.creditsConsumed).toBe(2);
    const again = await batch({ gtins: [FRESH, FRESH_2, UNKNOWN] }, headers);
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await json(again)).toEqual(firstBody);
    const other = await batch({ gtins: [FRESH] }, headers);
    expect(other.status).toBe(422);
    expect((await json(other)).meta).toMatchObject({ reason: "idempotency-conflict" });
    expect(await usageRows()).toHaveLength(1);
    expect((await balance()).available).toBe(8);
    // An answer without a debit is stored too.
    const unbilled = { ...org.auth, "idempotency-key": "batch-2" };
    expect((await json(await batch({ gtins: [STALE] }, unbilled))).meta.creditsConsumed).toBe(0);
    expect((await batch({ gtins: [STALE] }, unbilled)).headers.get("idempotent-replayed")).toBe("true");
    await expectLedgerInvariant();
  });
});

describe("rate limiting of batches counts items", () => {
  test("each GTIN asked takes one token of the key's bucket, and the RateLimit fields say items", async () => {
    await start({ RATE_LIMIT: "10/s" }, 100);
    const first = await batch({ gtins: Array.from({ length: 15 }, () => FRESH) });
    expect(first.status).toBe(200);
    expect(first.headers.get("ratelimit-policy")).toBe('"default";q=10;w=1;qu="items", "organization";q=50;w=1;qu="items"');
    // The bucket holds a burst of 20: 5 items are left.
    expect(first.headers.get("ratelimit")).toStartWith('"default";r=5;');
    const refused = await batch({ gtins: Array.from({ length: 6 }, () => FRESH) });
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    const body = await json(refused);
    expect(body.detail).toContain("10 GTINs per 1 s");
    expect(body.meta).toMatchObject({ reason: "rate-limited", creditsConsumed: 0 });
    // The single look-up draws from the same bucket, one item per request.
    expect((await context.request(`/api/v1/products/${FRESH}/price`, { headers: org.auth })).headers.get("ratelimit")).toStartWith('"default";r=4;');
    expect(await usageRows()).toHaveLength(2);
  });

  test("a batch larger than the key's bucket is admitted when the bucket is full and leaves it in debt", async () => {
    await start({}, 100);
    await context.store.updateApiKeyControls(org.organizationId, org.keyId, { rateLimit: 5 });
    const big = await batch({ gtins: Array.from({ length: 30 }, () => FRESH) });
    expect(big.status).toBe(200);
    expect(big.headers.get("ratelimit-policy")).toBe('"key";q=5;w=1;qu="items", "organization";q=500000;w=1;qu="items"');
    expect(big.headers.get("ratelimit")).toStartWith('"key";r=0;');
    const next = await context.request(`/api/v1/products/${FRESH}/price`, { headers: org.auth });
    expect(next.status).toBe(429);
    // 20 tokens of debt plus the one asked, at 5 per second.
    expect(next.headers.get("retry-after")).toBe("5");
    context.clock.advance(5_000);
    expect((await context.request(`/api/v1/products/${FRESH}/price`, { headers: org.auth })).status).toBe(200);
  });
});

describe("concurrent batches", () => {
  test("against a balance that covers only some: never below zero, billed exactly what was served", async () => {
    await start({}, 10);
    const responses = await Promise.all(Array.from({ length: 8 }, () => batch({ gtins: [FRESH, FRESH_2, FRESH_3] })));
    const served = responses.filter((response) => response.status === 200);
    expect(served).toHaveLength(3);
    expect(responses.filter((response) => response.status === 402)).toHaveLength(5);
    const consumed = (await Promise.all(served.map((response) => json(response)))).reduce((sum, body) => sum + body.meta.creditsConsumed, 0);
    expect(consumed).toBe(9);
    expect((await usageRows()).map((row) => row.amount)).toEqual([-3, -3, -3]);
    expect((await balance()).available).toBe(1);
    await expectLedgerInvariant();
  });

  test("with items that are given back: each batch is billed its fresh items, the rest is free again", async () => {
    await start({}, 10);
    const responses = await Promise.all(Array.from({ length: 8 }, () => batch({ gtins: [FRESH, STALE, UNKNOWN] })));
    const bodies = await Promise.all(responses.map((response) => json(response)));
    const served = bodies.filter((_, index) => responses[index]!.status === 200);
    expect(responses.every((response) => response.status === 200 || response.status === 402)).toBe(true);
    expect(served.length).toBeGreaterThanOrEqual(3);
    expect(served.every((body) => body.meta.creditsConsumed === 1)).toBe(true);
    expect(await usageRows()).toHaveLength(served.length);
    expect((await balance()).available).toBe(10 - served.length);
    await expectLedgerInvariant();
  });

  test("against a key's monthly cap: N concurrent batches bill exactly up to the cap", async () => {
    await start({}, 100);
    await context.store.updateApiKeyControls(org.organizationId, org.keyId, { monthlyCreditLimit: 7 });
    const responses = await Promise.all(Array.from({ length: 6 }, () => batch({ gtins: [FRESH, FRESH_2] })));
    expect(responses.filter((response) => response.status === 200)).toHaveLength(3);
    expect(responses.filter((response) => response.status === 402)).toHaveLength(3);
    expect(await usageRows()).toHaveLength(3);
    const spent = await context.store.monthlySpending([org.keyId], new Date(context.clock.now()).toISOString().slice(0, 7));
    expect(spent.get(org.keyId)).toBe(6);
    expect((await balance()).available).toBe(94);
    await expectLedgerInvariant();
  });
});

/** Makes every insert into the ledger fail until the returned function is called. */
async function failLedgerWrites(store: Store): Promise<() => Promise<void>> {
  if (store instanceof SQLiteStore) {
    store.connection.exec(
      "CREATE TRIGGER test_fail_batch_ledger BEFORE INSERT ON credit_transactions BEGIN SELECT RAISE(ABORT, 'disk I/O error (injected)'); END",
    );
    return async () => void store.connection.exec("DROP TRIGGER test_fail_batch_ledger");
  }
  const sql = (store as PostgresStore).connection;
  await sql.unsafe(
    "CREATE FUNCTION test_fail_batch_ledger() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'could not write (injected)'; END $$ LANGUAGE plpgsql",
  );
  await sql.unsafe("CREATE TRIGGER test_fail_batch_ledger BEFORE INSERT ON credit_transactions FOR EACH ROW EXECUTE FUNCTION test_fail_batch_ledger()");
  return async () => void (await sql.unsafe("DROP TRIGGER test_fail_batch_ledger ON credit_transactions; DROP FUNCTION test_fail_batch_ledger()"));
}

describe("a batch debit that does not commit", () => {
  test("is 503 without data, bills nothing and frees every credit it held, also after a partial commit", async () => {
    await start({}, 10);
    const restore = await failLedgerWrites(context.store);
    const failed = await batch({ gtins: [FRESH, FRESH_2, STALE, UNKNOWN] }, { ...org.auth, "idempotency-key": "fails-once" });
    expect(failed.status).toBe(503);
    expect(failed.headers.get("retry-after")).toBe("1");
    const body = await json(failed);
    expect(body.data).toBeUndefined();
    expect(body.meta).toMatchObject({ reason: "unavailable", creditsConsumed: 0, creditsRemaining: 10 });
    expect(await balance()).toMatchObject({ available: 10, reserved: 0 });
    expect(await usageRows()).toEqual([]);
    await restore();
    // The same Idempotency-Key runs again at once and is billed once.
    const retried = await batch({ gtins: [FRESH, FRESH_2, STALE, UNKNOWN] }, { ...org.auth, "idempotency-key": "fails-once" });
    expect(retried.status).toBe(200);
    expect((await json(retried)).meta.creditsConsumed).toBe(2);
    expect((await balance()).available).toBe(8);
    await expectLedgerInvariant();
  });
});
