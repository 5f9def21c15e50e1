import { afterEach, beforeEach, expect, test } from "bun:test";
import { postgresMigrations } from "../../drizzle/embedded";
import { applyPostgresMigrations } from "../../src/db/migrate";
import { openPostgresClient } from "../../src/db/postgres-client";
import { PostgresStore } from "../../src/db/postgres-store";
import { createTestDatabase, type TestDatabase } from "../support/context";

// Look-ups debited from a lease before lease_usage packed them (a row each) are kept through the
// migration, one look-up per packed row, and settle into the ledger as they would have.

const MIGRATION = "packed_lease_usage";
const ORGANIZATION = "org_migrated";
const NOW = Date.UTC(2026, 10, 1);

let database: TestDatabase;
beforeEach(async () => {
  database = await createTestDatabase();
});
afterEach(() => database.drop());

/** 100 credits granted; a lease took 10 of them and spent 2 + 3 on two look-ups before the migration. */
const BEFORE = [
  `INSERT INTO organizations (id, name, ledger_balance, created_at) VALUES ('${ORGANIZATION}', 'Migrated', 100, ${NOW})`,
  `INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, description, created_at)
   VALUES ('txn_grant', '${ORGANIZATION}', 'grant', 100, 100, 'bkt_1', 'Grant', ${NOW})`,
  `INSERT INTO credit_buckets (id, organization_id, source, granted, remaining, created_at) VALUES ('bkt_1', '${ORGANIZATION}', 'grant', 100, 90, ${NOW})`,
  `INSERT INTO reservations (id, organization_id, amount, allocations, request_id, created_at, instance_id, expires_at)
   VALUES ('lease_1', '${ORGANIZATION}', 5, '[{"bucketId":"bkt_1","amount":5}]', 'lease', ${NOW}, 'gone', ${NOW + 5000})`,
  `INSERT INTO lease_usage (organization_id, lease_id, id, amount, allocations, key_id, request_id, gtin, description, items, created_at) VALUES
   ('${ORGANIZATION}', 'lease_1', 'txn_a', 2, '[{"bucketId":"bkt_1","amount":2}]', NULL, 'req_a', '04006381333931', 'Price look-up', 1, ${NOW + 1}),
   ('${ORGANIZATION}', 'lease_1', 'txn_b', 3, '[{"bucketId":"bkt_1","amount":3}]', NULL, 'req_b', NULL, 'Batch price look-up', 3, ${NOW + 2})`,
];

test("look-ups left unsettled by the earlier shape are packed one each, counted as reserved, and settle into their usage rows", async () => {
  const before = postgresMigrations.findIndex((migration) => migration.tag.endsWith(MIGRATION));
  expect(before).toBeGreaterThan(0);
  await applyPostgresMigrations(database.url, postgresMigrations.slice(0, before));
  const client = openPostgresClient(database.url, { max: 1 });
  for (const statement of BEFORE) await client.unsafe(statement);
  await client.end();

  const store = await PostgresStore.open(database.url);
  try {
    const packed = await store.connection<Array<{ id: string; amount: string; look_ups: unknown }>>`
      SELECT id, amount, look_ups FROM lease_usage ORDER BY id`;
    expect(packed.map((row) => [row.id, Number(row.amount), row.look_ups])).toEqual([
      [
        "txn_a",
        2,
        [
          {
            id: "txn_a",
            amount: 2,
            allocations: [{ bucketId: "bkt_1", amount: 2 }],
            keyId: null,
            requestId: "req_a",
            gtin: "04006381333931",
            description: "Price look-up",
            items: 1,
            createdAt: NOW + 1,
          },
        ],
      ],
      [
        "txn_b",
        3,
        [
          {
            id: "txn_b",
            amount: 3,
            allocations: [{ bucketId: "bkt_1", amount: 3 }],
            keyId: null,
            requestId: "req_b",
            gtin: null,
            description: "Batch price look-up",
            items: 3,
            createdAt: NOW + 2,
          },
        ],
      ],
    ]);
    // Reading the transactions settles the organization first.
    const page = await store.listTransactions(ORGANIZATION, { limit: 10 });
    expect(page.items.map((row) => [row.id, row.type, row.amount, row.balanceAfter, row.requestId, row.gtin])).toEqual([
      ["txn_b", "usage", -3, 95, "req_b", null],
      ["txn_a", "usage", -2, 98, "req_a", "04006381333931"],
      ["txn_grant", "grant", 100, 100, null, null],
    ]);
    expect(await store.connection`SELECT 1 FROM lease_usage`).toHaveLength(0);
    // 90 in the bucket, of which the lease holds 5: ledger sum 95 = available + reserved.
    const balance = await store.getBalance(ORGANIZATION, NOW + 3);
    expect(balance.available + balance.reserved).toBe(95);
    expect(balance.reserved).toBe(5);
  } finally {
    await store.close();
  }
});
