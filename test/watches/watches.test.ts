// Price watches on whichever store the suite runs (SQLite, or PostgreSQL with TEST_DATABASE_URL):
// the API, each trigger, billing and pausing, evaluated synchronously with the evaluator's tick.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { newId } from "../../src/lib/ids";
import { addProduct, createOrganization, createTestContext, json, ledgerSum, queryRows, type TestContext, type TestOrganization } from "../support/context";

const GTIN = "04006381333931";
const GTIN13 = "4006381333931";
const OTHER = "00012345678905";
const WATCHES = "/api/v1/customer/watches";

let context: TestContext;
let org: TestOrganization;

beforeEach(async () => {
  context = await createTestContext();
  org = await createOrganization(context, 100);
});

afterEach(async () => {
  await context.close();
});

function post(body: unknown, auth: Record<string, string> = org.auth): Promise<Response> {
  return context.request(WATCHES, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify(body) });
}

async function watch(body: Record<string, unknown>): Promise<{ id: string; [key: string]: unknown }> {
  const response = await post(body);
  expect(response.status).toBe(201);
  return json(response);
}

/** One import of one offer, a minute later than the last. */
async function offer(
  merchantId: string,
  price: number,
  options: { gtin?: string; availability?: "in_stock" | "out_of_stock"; currency?: string } = {},
): Promise<void> {
  context.clock.advance(60_000);
  await addProduct(context, options.gtin ?? GTIN, [{ merchantId, price, ageMs: 0, availability: options.availability, currency: options.currency }]);
}

async function evaluate() {
  return context.services.watches.tick();
}

async function priceEvents(organizationId = org.organizationId): Promise<Array<{ id: string; data: Record<string, any> }>> {
  const rows = await queryRows<{ id: string; payload: string }>(
    context.store,
    "SELECT id, payload FROM webhook_events WHERE organization_id = ? AND type = 'price.changed' ORDER BY created_at, id",
    [organizationId],
  );
  return rows.map((row) => ({ id: row.id, data: JSON.parse(row.payload) }));
}

async function watchUsageRows(organizationId = org.organizationId) {
  return queryRows<{ request_id: string; amount: number; gtin: string }>(
    context.store,
    "SELECT request_id, amount, gtin FROM ledger_entries WHERE organization_id = ? AND description LIKE 'Price watch event%' ORDER BY id",
    [organizationId],
  );
}

describe("the watches API", () => {
  test("a watch is created with its GTIN-14, listed newest first, read and deleted", async () => {
    const first = await watch({ gtin: GTIN13, trigger: "any-change" });
    expect(first).toMatchObject({
      gtin: GTIN,
      merchant: null,
      trigger: "any-change",
      below: null,
      status: "active",
      pausedReason: null,
      lastTriggeredAt: null,
    });
    expect(first.id).toMatch(/^wch_/);
    context.clock.advance(1);
    const second = await watch({ gtin: GTIN, merchant: "m1", trigger: "below", below: { amount: 1000, currency: "EUR" } });
    expect(second).toMatchObject({ merchant: "m1", below: { amount: 1000, currency: "EUR" } });

    const page = await json(await context.request(`${WATCHES}?limit=1`, { headers: org.auth }));
    expect(page.items.map((item: { id: string }) => item.id)).toEqual([second.id]);
    const next = await json(await context.request(`${WATCHES}?limit=1&cursor=${page.nextCursor}`, { headers: org.auth }));
    expect(next.items.map((item: { id: string }) => item.id)).toEqual([first.id]);
    expect(next.nextCursor).toBeNull();

    expect(await json(await context.request(`${WATCHES}/${first.id}`, { headers: org.auth }))).toEqual(first);
    expect((await context.request(`${WATCHES}/${first.id}`, { method: "DELETE", headers: org.auth })).status).toBe(204);
    expect((await context.request(`${WATCHES}/${first.id}`, { headers: org.auth })).status).toBe(404);
  });

  test("another organization's watch is 404, to read and to delete", async () => {
    const mine = await watch({ gtin: GTIN, trigger: "any-change" });
    const other = await createOrganization(context, 0, "Other");
    expect((await context.request(`${WATCHES}/${mine.id}`, { headers: other.auth })).status).toBe(404);
    expect((await context.request(`${WATCHES}/${mine.id}`, { method: "DELETE", headers: other.auth })).status).toBe(404);
    expect((await json(await context.request(WATCHES, { headers: other.auth }))).items).toEqual([]);
    expect((await context.request(`${WATCHES}/${mine.id}`, { headers: org.auth })).status).toBe(200);
  });

  test("a GTIN that is not one is 400, a threshold without the trigger below (or missing with it) 422", async () => {
    expect((await post({ gtin: "4006381333932", trigger: "any-change" })).status).toBe(400);
    expect((await post({ gtin: GTIN, trigger: "below" })).status).toBe(422);
    expect((await post({ gtin: GTIN, trigger: "price-drop", below: { amount: 1, currency: "EUR" } })).status).toBe(422);
    expect(
      (
        await context.request(WATCHES, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ gtin: GTIN, trigger: "any-change" }),
        })
      ).status,
    ).toBe(401);
  });

  test("past WATCH_LIMIT watches a 409 conflict says the limit", async () => {
    await context.close();
    context = await createTestContext({ WATCH_LIMIT: "2" });
    org = await createOrganization(context, 10);
    await watch({ gtin: GTIN, trigger: "any-change" });
    await watch({ gtin: OTHER, trigger: "any-change" });
    const refused = await post({ gtin: GTIN, trigger: "price-drop" });
    expect(refused.status).toBe(409);
    const problem = await json(refused);
    expect(problem.type).toEndWith("/conflict");
    expect(problem.limit).toBe(2);
    expect(problem.detail).toContain("2");
    // Another organization has its own limit.
    const other = await createOrganization(context, 0, "Other");
    expect((await post({ gtin: GTIN, trigger: "any-change" }, other.auth)).status).toBe(201);
  });
});

describe("triggers", () => {
  test("any-change fires on a change of price or of availability, never on an identical re-import", async () => {
    await offer("m1", 1299);
    const created = await watch({ gtin: GTIN, merchant: "m1", trigger: "any-change" });
    await offer("m1", 1299);
    await evaluate();
    expect(await priceEvents()).toEqual([]);
    await offer("m1", 1199);
    await evaluate();
    await offer("m1", 1199, { availability: "out_of_stock" });
    await evaluate();
    // The same data again (and another merchant's offer, not watched) fires nothing.
    await addProduct(context, GTIN, [{ merchantId: "m1", price: 1199, ageMs: 0, availability: "out_of_stock" }]);
    await offer("m2", 999);
    await evaluate();
    const events = await priceEvents();
    expect(events.map((event) => [event.data.previous.price?.amount, event.data.current.price?.amount, event.data.current.availability])).toEqual([
      [1299, 1199, "in_stock"],
      [1199, 1199, "out_of_stock"],
    ]);
    expect(events[0]!.data).toMatchObject({
      organizationId: org.organizationId,
      watchId: created.id,
      gtin: GTIN,
      merchant: "m1",
      trigger: "any-change",
      below: null,
    });
    expect(events[0]!.data.current).toMatchObject({ merchant: "m1", price: { amount: 1199, currency: "EUR" }, availability: "in_stock" });
    expect(events[0]!.data.current.observedAt).toBe(new Date(context.clock.now() - 120_000).toISOString());
    const stored = await json(await context.request(`${WATCHES}/${created.id}`, { headers: org.auth }));
    expect(stored.lastTriggeredAt).not.toBeNull();
  });

  test("price-drop fires when the price goes down only", async () => {
    await offer("m1", 1000);
    await watch({ gtin: GTIN, merchant: "m1", trigger: "price-drop" });
    await offer("m1", 1100);
    await evaluate();
    expect(await priceEvents()).toEqual([]);
    await offer("m1", 900);
    await evaluate();
    await offer("m1", 900, { availability: "out_of_stock" });
    await evaluate();
    expect((await priceEvents()).map((event) => [event.data.previous.price.amount, event.data.current.price.amount])).toEqual([[1100, 900]]);
  });

  test("below fires once per crossing and re-arms when the price is back above", async () => {
    await offer("m1", 1200);
    await watch({ gtin: GTIN, merchant: "m1", trigger: "below", below: { amount: 1000, currency: "EUR" } });
    await offer("m1", 999);
    await evaluate();
    await offer("m1", 950);
    await evaluate();
    expect((await priceEvents()).length).toBe(1);
    await offer("m1", 1000);
    await evaluate();
    expect((await priceEvents()).length).toBe(1);
    await offer("m1", 800);
    await evaluate();
    expect((await priceEvents()).map((event) => event.data.current.price.amount)).toEqual([999, 800]);
  });

  test("a below watch made under its threshold waits for a crossing", async () => {
    await offer("m1", 500);
    await watch({ gtin: GTIN, merchant: "m1", trigger: "below", below: { amount: 1000, currency: "EUR" } });
    await offer("m1", 400);
    await evaluate();
    expect(await priceEvents()).toEqual([]);
    await offer("m1", 1500);
    await evaluate();
    await offer("m1", 600);
    await evaluate();
    expect((await priceEvents()).map((event) => event.data.current.price.amount)).toEqual([600]);
  });

  test("without a merchant, the product's best fresh price across merchants", async () => {
    await offer("m1", 1000);
    await watch({ gtin: GTIN, trigger: "price-drop" });
    await offer("m2", 1100);
    await evaluate();
    expect(await priceEvents()).toEqual([]);
    await offer("m2", 950);
    await evaluate();
    const [event] = await priceEvents();
    expect(event!.data.merchant).toBeNull();
    expect(event!.data.previous).toMatchObject({ merchant: "m1", price: { amount: 1000, currency: "EUR" } });
    expect(event!.data.current).toMatchObject({ merchant: "m2", price: { amount: 950, currency: "EUR" } });
  });

  test("a product that does not exist yet may be watched; its first offer is a change", async () => {
    await watch({ gtin: OTHER, trigger: "any-change" });
    await evaluate();
    expect(await priceEvents()).toEqual([]);
    await offer("m1", 700, { gtin: OTHER });
    await evaluate();
    const [event] = await priceEvents();
    expect(event!.data.previous).toEqual({ merchant: null, price: null, availability: null, observedAt: null });
    expect(event!.data.current).toMatchObject({ merchant: "m1", price: { amount: 700, currency: "EUR" } });
  });

  test("a deleted watch fires nothing", async () => {
    await offer("m1", 1000);
    const created = await watch({ gtin: GTIN, trigger: "any-change" });
    await context.request(`${WATCHES}/${created.id}`, { method: "DELETE", headers: org.auth });
    await offer("m1", 900);
    await evaluate();
    expect(await priceEvents()).toEqual([]);
  });
});

describe("events and credits", () => {
  test("each event is billed with its usage row, delivered to subscribed endpoints; billed = written", async () => {
    await context.store.createWebhookEndpoint({
      id: newId("whe", context.clock.now()),
      organizationId: org.organizationId,
      url: "https://hooks.example/x",
      eventTypes: ["price.changed"],
      secret: "whsec_x",
      createdAt: context.clock.now(),
    });
    await context.store.createWebhookEndpoint({
      id: newId("whe", context.clock.now()),
      organizationId: org.organizationId,
      url: "https://hooks.example/y",
      eventTypes: ["key.created"],
      secret: "whsec_y",
      createdAt: context.clock.now(),
    });
    await offer("m1", 1000);
    await watch({ gtin: GTIN, merchant: "m1", trigger: "any-change" });
    await watch({ gtin: GTIN, trigger: "any-change" });
    for (const price of [900, 800, 700]) await offer("m1", price);
    await evaluate();
    const events = await priceEvents();
    // Three imports, evaluated together: each watch sees one change, 1000 → 700.
    expect(events.length).toBe(2);
    const billed = await watchUsageRows();
    expect(billed.map((row) => row.request_id).sort()).toEqual(events.map((event) => event.id).sort());
    expect(billed.every((row) => row.amount === -1 && row.gtin === GTIN)).toBe(true);
    const deliveries = await queryRows<{ event_id: string }>(
      context.store,
      "SELECT event_id FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id WHERE e.type = 'price.changed'",
    );
    expect(deliveries.length).toBe(2);
    const balance = await context.store.getBalance(org.organizationId, context.clock.now());
    expect(balance.available).toBe(98);
    expect(await ledgerSum(context.store, org.organizationId)).toBe(98);
    const usage = await queryRows<{ credits: number; requests: number }>(
      context.store,
      "SELECT credits, requests FROM usage_counters WHERE organization_id = ? AND reason = 'price-watch' AND period_ms = 3600000",
      [org.organizationId],
    );
    expect(usage).toEqual([{ credits: 2, requests: 2 }]);
  });

  test("without credits the watches are paused with no event, and resume after a purchase", async () => {
    await context.close();
    context = await createTestContext({ WATCH_EVENT_CREDIT_COST: "2" });
    org = await createOrganization(context, 3);
    await offer("m1", 1000);
    const first = await watch({ gtin: GTIN, merchant: "m1", trigger: "any-change" });
    const second = await watch({ gtin: OTHER, trigger: "any-change" });
    await offer("m1", 900);
    await evaluate();
    expect((await priceEvents()).length).toBe(1);
    await offer("m1", 800);
    await evaluate();
    expect((await priceEvents()).length).toBe(1);
    for (const id of [first.id, second.id]) {
      expect(await json(await context.request(`${WATCHES}/${id}`, { headers: org.auth }))).toMatchObject({
        status: "paused",
        pausedReason: "insufficient-credits",
      });
    }
    // Paused: changes are followed, not sent.
    await offer("m1", 700);
    await evaluate();
    expect((await priceEvents()).length).toBe(1);
    expect(await ledgerSum(context.store, org.organizationId)).toBe(1);

    await context.store.grantCredits({
      organizationId: org.organizationId,
      source: "pack",
      type: "purchase",
      amount: 10,
      expiresAt: null,
      description: "Pack",
      now: context.clock.now(),
    });
    const resumed = await evaluate();
    expect(resumed.resumed).toBe(2);
    expect(await json(await context.request(`${WATCHES}/${first.id}`, { headers: org.auth }))).toMatchObject({ status: "active", pausedReason: null });
    await offer("m1", 600);
    await evaluate();
    const events = await priceEvents();
    expect(events.map((event) => [event.data.previous.price.amount, event.data.current.price.amount])).toEqual([
      [1000, 900],
      [700, 600],
    ]);
    expect((await watchUsageRows()).map((row) => row.request_id).sort()).toEqual(events.map((event) => event.id).sort());
    expect(await ledgerSum(context.store, org.organizationId)).toBe(9);
  });

  test("queued changes are consumed by the evaluation that evaluates them, once", async () => {
    await offer("m1", 1000);
    await watch({ gtin: GTIN, merchant: "m1", trigger: "any-change" });
    await offer("m1", 900);
    const queued = await queryRows<{ count: number }>(context.store, "SELECT count(*) AS count FROM watch_changes");
    expect(Number(queued[0]!.count)).toBe(1);
    await evaluate();
    await evaluate();
    expect((await priceEvents()).length).toBe(1);
    expect(Number((await queryRows<{ count: number }>(context.store, "SELECT count(*) AS count FROM watch_changes"))[0]!.count)).toBe(0);
  });

  test("unwatched products queue nothing", async () => {
    await watch({ gtin: OTHER, trigger: "any-change" });
    await offer("m1", 1000);
    await offer("m1", 900);
    expect(Number((await queryRows<{ count: number }>(context.store, "SELECT count(*) AS count FROM watch_changes"))[0]!.count)).toBe(0);
  });
});
