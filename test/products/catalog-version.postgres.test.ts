import { afterEach, beforeEach, expect, test } from "bun:test";
import type { PostgresStore } from "../../src/db/postgres-store";
import { SYSTEM_USER_ID, type FeedRecord } from "../../src/db/store";
import { hashSecret } from "../../src/lib/crypto";
import { createApiKey } from "../../src/modules/keys/service";
import { openStore } from "../../src/services";
import { createTestDatabase, listenerLive, queryRows, type TestDatabase } from "../support/context";

// A PostgreSQL instance hands out a product from memory while the catalog version it last saw (read
// with a key it did not remember, or heard from the change notifications) is the one the product was
// read under; every import moves the version and notifies it. A direct write to the offers (not an
// import) shows which answers came from memory.
const GTIN = "04006381333931";
let database: TestDatabase;
let serving: PostgresStore;
let importing: PostgresStore;
let keyHash: string;

beforeEach(async () => {
  database = await createTestDatabase();
  serving = (await openStore(database.url)) as PostgresStore;
  importing = (await openStore(database.url)) as PostgresStore;
  const now = Date.now();
  const organization = await importing.createOrganization({ name: "catalog", now });
  await importing.ensureSystemUser(now);
  keyHash = hashSecret(
    (await createApiKey(importing, { organizationId: organization.id, name: "k", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now })).clearKey,
  );
  await importing.applyFeedRecords([offer(GTIN, 1299)], now);
  // The serving instance listens before the tests begin: when its listener starts to count it
  // forgets the version it saw, which would otherwise race the tests' first reads.
  serving.changes.start();
  expect(await listenerLive(serving, true)).toBe(true);
});

afterEach(async () => {
  await serving.close();
  await importing.close();
  await database.drop();
});

function offer(gtin: string, priceAmount: number): FeedRecord {
  return {
    product: { gtin, title: "Pen" },
    offer: {
      merchantId: "m",
      merchantName: "Shop",
      priceAmount,
      currency: "EUR",
      shippingAmount: null,
      availability: "in_stock",
      condition: "new",
      url: null,
      observedAt: Date.now(),
    },
  };
}

const setPriceBehindTheImports = (priceAmount: number) => queryRows(importing, "UPDATE offers SET price_amount = ? WHERE gtin = ?", [priceAmount, GTIN]);
const priceServed = async () => {
  expect(await serving.findKeyCredential(keyHash)).not.toBeNull();
  await serving.changesHeard();
  return (await serving.findProductWithOffers(GTIN))!.offers[0]!.priceAmount;
};

test("a product read under the catalog version seen is not read again until an import moves the version", async () => {
  expect(await priceServed()).toBe(1299);
  await setPriceBehindTheImports(1199);
  expect(await priceServed()).toBe(1299);
  // An import of any product, by another instance, moves the version: the next request reads again.
  await importing.applyFeedRecords([offer("00000000000017", 500)], Date.now());
  expect(await priceServed()).toBe(1199);
});

test("without a version seen (no key read yet), every read goes to the database", async () => {
  expect((await serving.findProductWithOffers(GTIN))!.offers[0]!.priceAmount).toBe(1299);
  await setPriceBehindTheImports(1199);
  expect((await serving.findProductWithOffers(GTIN))!.offers[0]!.priceAmount).toBe(1199);
  expect((await serving.findProductsWithOffers([GTIN]))[0]!.offers[0]!.priceAmount).toBe(1199);
});

test("a read that began before a newer version was seen is not kept under it", async () => {
  // The read's rows reach the store only after an import has committed and been seen: they may
  // predate that import, so they must not be handed out again under its version.
  type Prepared = { execute(values: { gtin: string }): Promise<unknown[]> };
  const internals = (serving as unknown as { catalog: { productWithOffers: () => Prepared } }).catalog;
  const prepared = internals.productWithOffers();
  let letThrough!: () => void;
  const held = new Promise<void>((resolve) => (letThrough = resolve));
  internals.productWithOffers = () => ({ execute: async (values) => prepared.execute(values).then(async (rows) => (await held, rows)) });
  expect(await serving.findKeyCredential(keyHash)).not.toBeNull();
  const overlapping = serving.findProductWithOffers(GTIN);
  await importing.applyFeedRecords([offer(GTIN, 1199)], Date.now());
  await serving.changesHeard();
  letThrough();
  expect((await overlapping)!.offers[0]!.priceAmount).toBe(1299);
  internals.productWithOffers = () => prepared;
  expect(await priceServed()).toBe(1199);
});

test("a batch reads only the products not in memory, and all of them after an import", async () => {
  await importing.applyFeedRecords([offer("00000000000017", 500)], Date.now());
  expect(await serving.findKeyCredential(keyHash)).not.toBeNull();
  expect((await serving.findProductWithOffers(GTIN))!.offers[0]!.priceAmount).toBe(1299);
  await setPriceBehindTheImports(1199);
  await queryRows(importing, "UPDATE offers SET price_amount = 600 WHERE gtin = ?", ["00000000000017"]);
  const batch = await serving.findProductsWithOffers([GTIN, "00000000000017", "00000000000024"]);
  expect(batch.map((found) => (found === null || found === undefined ? null : found.offers[0]!.priceAmount))).toEqual([1299, 600, null]);
  await importing.applyFeedRecords([offer("00000000000031", 700)], Date.now());
  await serving.changesHeard();
  const after = await serving.findProductsWithOffers([GTIN, "00000000000017"]);
  expect(after.map((found) => found!.offers[0]!.priceAmount)).toEqual([1199, 600]);
});
