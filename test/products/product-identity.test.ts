import { afterEach, beforeEach, expect, test } from "bun:test";
import type { FeedRecord } from "../../src/db/store";
import { twoStoresOnOneDatabase, type TwoStores } from "../support/context";

// A look-up keeps each product's prepared answer (its `data` serialized once) by the object the
// store handed out. Both stores hand out the same object while a product is unchanged (SQLite from
// its cache, PostgreSQL by comparing the rows it read) and a new one as soon as it changed, here
// through another connection or instance.
const GTIN = "04006381333931";
let stores: TwoStores;

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  await stores.two.applyFeedRecords([offer(1299)], stores.clock.now());
});

afterEach(async () => {
  await stores.close();
});

function offer(priceAmount: number): FeedRecord {
  return {
    product: { gtin: GTIN, title: "Pen" },
    offer: {
      merchantId: "m",
      merchantName: "Shop",
      priceAmount,
      currency: "EUR",
      shippingAmount: null,
      availability: "in_stock",
      condition: "new",
      url: null,
      observedAt: stores.clock.now(),
    },
  };
}

test("the same product object while its rows are unchanged, a new one with the new rows after a change", async () => {
  const first = await stores.one.findProductWithOffers(GTIN);
  expect(first?.offers.map((o) => o.priceAmount)).toEqual([1299]);
  expect(await stores.one.findProductWithOffers(GTIN)).toBe(first!);
  expect((await stores.one.findProductsWithOffers([GTIN, "00000000000017"]))[0]).toBe(first!);

  await stores.two.applyFeedRecords([offer(1099)], stores.clock.now());
  // A request starts with its key: that is where the SQLite store looks for other connections' commits.
  await stores.one.findKeyCredential("no such key");
  const changed = await stores.one.findProductWithOffers(GTIN);
  expect(changed).not.toBe(first);
  expect(changed?.offers.map((o) => o.priceAmount)).toEqual([1099]);
  expect(first?.offers.map((o) => o.priceAmount)).toEqual([1299]);
  expect(await stores.one.findProductWithOffers(GTIN)).toBe(changed!);
});

test("an unknown GTIN is not found, by the single read and by the batch read", async () => {
  expect(await stores.one.findProductWithOffers(GTIN)).not.toBeNull();
  expect(await stores.one.findProductWithOffers("00000000000017")).toBeNull();
  expect(await stores.one.findProductsWithOffers(["00000000000017"])).toEqual([null]);
});
