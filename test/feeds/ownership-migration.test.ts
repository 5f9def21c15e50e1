import { afterEach, beforeEach, expect, test } from "bun:test";
import { postgresMigrations, sqliteMigrations } from "../../drizzle/embedded";
import { applyPostgresMigrations, applySQLiteMigrations } from "../../src/db/migrate";
import { openPostgresClient } from "../../src/db/postgres-client";
import { PostgresStore } from "../../src/db/postgres-store";
import { openSQLite, sqlitePathFromURL, SQLiteStore } from "../../src/db/sqlite-store";
import type { Store } from "../../src/db/store";
import { createTestDatabase, queryRows, TEST_DATABASE_URL, type TestDatabase } from "../support/context";

// Sources declared before merchant bindings existed keep writing what they wrote: each is bound to
// the merchants whose offers it wrote last, and a product whose offers all come from one source is
// described by it. Anything else is the operator's.

const PEN = "04006381333931";
const UPC = "00036000291452";
const BOOK = "09780201379624";
const MIGRATION = "source_ownership";

let database: TestDatabase;
beforeEach(async () => {
  database = await createTestDatabase();
});
afterEach(() => database.drop());

const source = (id: string) => `INSERT INTO feed_sources (id, name, kind, timeout_ms, retries, created_at) VALUES ('${id}', '${id}', 'push', 1000, 0, 0)`;
const offer = (gtin: string, merchant: string, sourceId: string | null) =>
  `INSERT INTO offers (gtin, merchant_id, price_amount, currency, availability, condition, observed_at, source_id, state_since)
   VALUES ('${gtin}', '${merchant}', 100, 'EUR', 'in_stock', 'new', 0, ${sourceId === null ? "NULL" : `'${sourceId}'`}, 0)`;

/** Statements run on the schema as it was before the migration. */
const BEFORE = [
  source("src-1"),
  source("src-2"),
  source("src-quiet"),
  `INSERT INTO products (gtin, title, updated_at) VALUES ('${PEN}', 'Pen', 0), ('${UPC}', 'Soda', 0), ('${BOOK}', 'Book', 0)`,
  "INSERT INTO merchants (id, name) VALUES ('shop-a', 'A'), ('shop-b', 'B'), ('shop-c', 'C')",
  offer(UPC, "shop-b", "src-1"),
  offer(UPC, "shop-a", "src-1"),
  offer(PEN, "shop-a", "src-1"),
  offer(PEN, "shop-c", "src-2"),
  offer(BOOK, "shop-c", "src-2"),
  offer(BOOK, "shop-b", null),
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

test("an existing source is bound to the merchants it wrote, and describes the products only it supplies", async () => {
  const store = await storeMigratedAfter(BEFORE);
  try {
    const sources = await store.listFeedSources();
    expect(sources.map((s) => [s.id, s.merchants, s.authoritative])).toEqual([
      ["src-1", ["shop-a", "shop-b"], false],
      ["src-2", ["shop-c"], false],
      ["src-quiet", [], false],
    ]);
    const products = await queryRows<{ gtin: string; described_by: string | null }>(store, "SELECT gtin, described_by FROM products ORDER BY gtin");
    expect(products.map((p) => [p.gtin, p.described_by])).toEqual([
      [UPC, "src-1"],
      [PEN, null],
      [BOOK, null],
    ]);
  } finally {
    await store.close();
  }
});
