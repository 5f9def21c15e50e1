import { afterEach, beforeEach, expect, test } from "bun:test";
import type { FeedRecord, Store } from "../../src/db/store";
import { openTestStore } from "../support/context";

const PEN = "04006381333931";
const T0 = Date.parse("2026-11-22T10:00:00.000Z");
let store: Store;

beforeEach(async () => {
  store = await openTestStore();
});
afterEach(() => store.close());

function record(price: number, observedAt: number, availability: "in_stock" | "out_of_stock" = "in_stock", merchantId = "shop-a"): FeedRecord {
  return {
    product: { gtin: PEN, title: "Pen" },
    offer: { merchantId, priceAmount: price, currency: "EUR", shippingAmount: null, availability, condition: "new", url: null, observedAt },
  };
}

const summary = async (merchantId?: string) =>
  (await store.listPriceHistory(PEN, merchantId)).map((e) => [e.merchantId, e.priceAmount, e.availability, e.observedAt - T0]);

test("every change of price or availability is kept, identical repeats are not", async () => {
  await store.applyFeedRecords([record(1299, T0)], T0);
  await store.applyFeedRecords([record(1299, T0 + 1000)], T0);
  await store.applyFeedRecords([record(1299, T0 + 2000)], T0);
  await store.applyFeedRecords([record(1199, T0 + 3000)], T0);
  await store.applyFeedRecords([record(1199, T0 + 4000, "out_of_stock")], T0);
  await store.applyFeedRecords([record(1199, T0 + 5000, "out_of_stock")], T0);
  expect(await summary()).toEqual([
    ["shop-a", 1299, "in_stock", 0],
    ["shop-a", 1199, "in_stock", 3000],
    ["shop-a", 1199, "out_of_stock", 4000],
  ]);
});

test("an older observation that the offer does not take writes no history", async () => {
  await store.applyFeedRecords([record(1299, T0 + 10_000)], T0);
  await store.applyFeedRecords([record(999, T0)], T0);
  expect(await summary()).toEqual([["shop-a", 1299, "in_stock", 10_000]]);
  expect((await store.findProductWithOffers(PEN))!.offers[0]!.priceAmount).toBe(1299);
});

test("history is kept per offer, and one merchant's history can be asked for", async () => {
  await store.applyFeedRecords([record(1299, T0), record(1500, T0, "in_stock", "shop-b")], T0);
  await store.applyFeedRecords([record(1250, T0 + 1000, "in_stock", "shop-b")], T0);
  expect(await summary("shop-b")).toEqual([
    ["shop-b", 1500, "in_stock", 0],
    ["shop-b", 1250, "in_stock", 1000],
  ]);
  expect((await summary()).length).toBe(3);
});

test("prune deletes history observed before the cut-off and leaves offers alone", async () => {
  await store.applyFeedRecords([record(1299, T0)], T0);
  await store.applyFeedRecords([record(1199, T0 + 86_400_000)], T0);
  await store.applyFeedRecords([record(1099, T0 + 2 * 86_400_000)], T0);
  expect(await store.prunePriceHistory(T0 + 86_400_000)).toBe(1);
  expect((await summary()).map((row) => row[1])).toEqual([1199, 1099]);
  expect(await store.prunePriceHistory(T0 + 86_400_000)).toBe(0);
  expect((await store.findProductWithOffers(PEN))!.offers[0]!.priceAmount).toBe(1099);
});

test("prune keeps an offer's newest row however old, so its next change still shows the price it replaced", async () => {
  await store.applyFeedRecords([record(1299, T0), record(500, T0, "in_stock", "shop-b")], T0);
  await store.applyFeedRecords([record(1199, T0 + 86_400_000)], T0);
  expect(await store.prunePriceHistory(T0 + 10 * 86_400_000)).toBe(1);
  expect(await summary()).toEqual([
    ["shop-b", 500, "in_stock", 0],
    ["shop-a", 1199, "in_stock", 86_400_000],
  ]);
});

test("two changes of one offer in the same batch are both kept, in order", async () => {
  await store.applyFeedRecords([record(1299, T0), record(1199, T0 + 1000), record(1199, T0 + 2000), record(999, T0 + 500)], T0);
  expect(await summary()).toEqual([
    ["shop-a", 1299, "in_stock", 0],
    ["shop-a", 1199, "in_stock", 1000],
  ]);
  expect((await store.findProductWithOffers(PEN))!.offers[0]).toMatchObject({ priceAmount: 1199, observedAt: T0 + 2000 });
});
