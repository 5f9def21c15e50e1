// Two instances (or serve and a second process) evaluating watches on one database at once: every
// queued change is evaluated once, each event is written and billed once, and a look-up's debit
// running beside them never overdraws.
import { afterEach, beforeEach, expect, test } from "bun:test";
import type { FeedRecord } from "../../src/db/store";
import { gtin13 } from "../../src/modules/ingest/demo-data";
import { ledgerSum, queryRows, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

const PRODUCTS = 40;
let stores: TwoStores;

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
});

afterEach(async () => {
  await stores.close();
});

function gtinOf(index: number): string {
  return gtin13(`400${String(index).padStart(9, "0")}`).padStart(14, "0");
}

function records(price: number, at: number): FeedRecord[] {
  return Array.from({ length: PRODUCTS }, (_, index) => ({
    product: { gtin: gtinOf(index), title: `Product ${index}` },
    offer: {
      merchantId: "m1",
      priceAmount: price + index,
      currency: "EUR",
      shippingAmount: null,
      availability: "in_stock",
      condition: "new",
      url: null,
      observedAt: at,
    },
  }));
}

test("two evaluators share the queue: each change is evaluated once, each event billed once", async () => {
  const { one, two, clock, organizationId } = stores;
  await one.grantCredits({ organizationId, source: "grant", type: "grant", amount: 1_000, expiresAt: null, description: "test", now: clock.now() });
  await one.applyFeedRecords(records(1000, clock.now()), clock.now());
  for (let index = 0; index < PRODUCTS; index++) {
    const created = await (index % 2 === 0 ? one : two).createWatch(
      {
        id: `wch_two${String(index).padStart(4, "0")}`,
        organizationId,
        gtin: gtinOf(index),
        merchantId: "m1",
        trigger: "any-change",
        below: null,
        now: clock.now(),
      },
      { limit: 1_000, freshnessWindowMs: 86_400_000 },
    );
    expect(created.ok).toBe(true);
  }
  // Two imports, each changing every price: each watch fires once per evaluation that sees a change.
  clock.advance(60_000);
  await two.applyFeedRecords(records(900, clock.now()), clock.now());
  const input = { now: clock.now(), limit: 7, creditCost: 2, freshnessWindowMs: 86_400_000 };
  const drain = async (store: typeof one) => {
    let events = 0;
    for (;;) {
      const result = await store.runWatchEvaluation(input);
      events += result.events;
      if (result.changes === 0) return events;
    }
  };
  const [a, b] = await Promise.all([drain(one), drain(two)]);
  expect(a + b).toBe(PRODUCTS);
  const events = await queryRows<{ id: string }>(one, "SELECT id FROM webhook_events WHERE type = 'price.changed'");
  const billed = await queryRows<{ request_id: string }>(one, "SELECT request_id FROM ledger_entries WHERE description LIKE 'Price watch event%'");
  expect(events.length).toBe(PRODUCTS);
  expect(billed.map((row) => row.request_id).sort()).toEqual(events.map((row) => row.id).sort());
  expect(await ledgerSum(one, organizationId)).toBe(1_000 - 2 * PRODUCTS);
  expect((await one.getBalance(organizationId, clock.now())).available).toBe(1_000 - 2 * PRODUCTS);
});
