import { afterEach, beforeEach, expect, test } from "bun:test";
import type { PostgresStore } from "../../src/db/postgres-store";
import { openStore } from "../../src/services";
import { createTestDatabase, ledgerSum, queryRows, type TestDatabase } from "../helpers";

// The window between a debit's commit and its answer: the statement committed, but the connection
// failed before the instance heard so. The debit is then tried again alone, with the same ledger
// row id, and must find itself written rather than take the credits a second time.
let database: TestDatabase;
let store: PostgresStore;

beforeEach(async () => {
  database = await createTestDatabase();
  store = (await openStore(database.url)) as PostgresStore;
});

afterEach(async () => {
  await store.close();
  await database.drop();
});

test("a debit retried after its statement committed is found written: one usage row, credits taken once", async () => {
  const organization = await store.createOrganization({ name: "retried", now: Date.now() });
  await store.grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount: 10, expiresAt: null, description: "Credits", now: Date.now() });
  const reservation = await store.reserveCredits({ organizationId: organization.id, amount: 3, keyId: null, requestId: "req_retried", now: Date.now() });
  if (!reservation.ok) throw new Error("reservation refused");

  // The statement the group commit ran, then the lone retry its caller's error would start.
  const held = { organizationId: organization.id, amount: 3, keyId: null, requestId: "req_retried", committing: true };
  const pending = { reservationId: reservation.reservationId, usage: { gtin: null, description: "look-up", now: Date.now() }, held, transactionId: "txn_retried", resolve: () => {}, reject: () => {} };
  const debit = (retried: boolean) => (store as unknown as { debitBatch(items: unknown[], options: { retried: boolean }): Promise<Map<string, { outcome: string }>> }).debitBatch([pending], { retried });
  expect((await debit(false)).get(reservation.reservationId)?.outcome).toBe("committed");
  expect((await debit(true)).get(reservation.reservationId)?.outcome).toBe("committed");

  expect(await queryRows(store, "SELECT id FROM credit_transactions WHERE type = 'usage'")).toEqual([{ id: "txn_retried" }]);
  expect(await ledgerSum(store, organization.id)).toBe(7);
  const [bucket] = await queryRows<{ remaining: number }>(store, "SELECT remaining::int AS remaining FROM credit_buckets");
  expect(bucket!.remaining).toBe(7);
});
