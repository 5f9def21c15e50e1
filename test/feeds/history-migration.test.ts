import { afterEach, beforeEach, expect, test } from "bun:test";
import { postgresMigrations, sqliteMigrations } from "../../drizzle/embedded";
import { applyPostgresMigrations, applySQLiteMigrations } from "../../src/db/migrate";
import { openPostgresClient } from "../../src/db/postgres-client";
import { PostgresStore } from "../../src/db/postgres-store";
import { openSQLite, sqlitePathFromURL, SQLiteStore } from "../../src/db/sqlite-store";
import type { FeedRecord, Store } from "../../src/db/store";
import { createTestDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/context";

// The migration that moved each offer's current state out of offer_price_history (onto the offer,
// with `state_since`) keeps every history already written: the listing reads the same after it.

const PEN = "04006381333931";
const T0 = Date.parse("2026-11-22T10:00:00.000Z");
const MIGRATION = "offer_state_since";

let database: TestDatabase;
beforeEach(async () => {
  database = await createTestDatabase();
});
afterEach(() => database.drop());

/** Statements run on the schema as it was before the migration: its triggers wrote every state. */
const BEFORE = [
  "INSERT INTO products (gtin, title, updated_at) VALUES ('04006381333931', 'Pen', 0)",
  "INSERT INTO merchants (id, name) VALUES ('shop-a', 'A'), ('shop-b', 'B')",
  `INSERT INTO offers (gtin, merchant_id, price_amount, currency, availability, condition, observed_at, source_id)
   VALUES ('04006381333931', 'shop-a', 1299, 'EUR', 'in_stock', 'new', ${T0}, 'src-1'),
          ('04006381333931', 'shop-b', 500, 'EUR', 'in_stock', 'new', ${T0}, NULL)`,
  `UPDATE offers SET price_amount = 1199, observed_at = ${T0 + 1000}, source_id = 'src-2' WHERE merchant_id = 'shop-a'`,
  `UPDATE offers SET observed_at = ${T0 + 2000} WHERE merchant_id = 'shop-a'`,
  `UPDATE offers SET availability = 'out_of_stock', observed_at = ${T0 + 3000} WHERE merchant_id = 'shop-a'`,
  `UPDATE offers SET observed_at = ${T0 + 4000} WHERE merchant_id = 'shop-b'`,
];

async function storeMigratedAfter(statements: string[]): Promise<Store> {
  if (TEST_DATABASE_URL === null) {
    const connection = openSQLite(sqlitePathFromURL(database.url));
    applySQLiteMigrations(
      connection,
      sqliteMigrations.slice(
        0,
        sqliteMigrations.findIndex((m) => m.tag.endsWith(MIGRATION)),
      ),
    );
    for (const statement of statements) connection.exec(statement);
    connection.close();
    return SQLiteStore.open(database.url);
  }
  await applyPostgresMigrations(
    database.url,
    postgresMigrations.slice(
      0,
      postgresMigrations.findIndex((m) => m.tag.endsWith(MIGRATION)),
    ),
  );
  const client = openPostgresClient(database.url, { max: 1 });
  for (const statement of statements) await client.unsafe(statement);
  await client.end();
  return PostgresStore.open(database.url);
}

const listing = async (store: Store, merchantId?: string) =>
  (await store.listPriceHistory(PEN, merchantId)).map((e) => [e.merchantId, e.priceAmount, e.availability, e.observedAt - T0, e.sourceId]);

test("history written before the migration reads the same after it, and later changes continue it", async () => {
  const store = await storeMigratedAfter(BEFORE);
  try {
    expect(await listing(store)).toEqual([
      ["shop-a", 1299, "in_stock", 0, "src-1"],
      ["shop-b", 500, "in_stock", 0, null],
      ["shop-a", 1199, "in_stock", 1000, "src-2"],
      ["shop-a", 1199, "out_of_stock", 3000, "src-2"],
    ]);
    const offer = (price: number, observedAt: number): FeedRecord => ({
      product: { gtin: PEN },
      offer: {
        merchantId: "shop-a",
        priceAmount: price,
        currency: "EUR",
        shippingAmount: null,
        availability: "out_of_stock",
        condition: "new",
        url: null,
        observedAt,
      },
    });
    await store.applyFeedRecords([offer(1199, T0 + 5000)], T0 + 5000);
    await store.applyFeedRecords([offer(999, T0 + 6000)], T0 + 6000);
    expect(await listing(store, "shop-a")).toEqual([
      ["shop-a", 1299, "in_stock", 0, "src-1"],
      ["shop-a", 1199, "in_stock", 1000, "src-2"],
      ["shop-a", 1199, "out_of_stock", 3000, "src-2"],
      ["shop-a", 999, "out_of_stock", 6000, null],
    ]);
    // Only the superseded states are rows of their own; prune leaves every offer's current one.
    expect(await store.prunePriceHistory(T0 + 10_000)).toBe(3);
    expect(await listing(store)).toEqual([
      ["shop-b", 500, "in_stock", 0, null],
      ["shop-a", 999, "out_of_stock", 6000, null],
    ]);
  } finally {
    await store.close();
  }
});
