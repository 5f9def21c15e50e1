import { describe, expect, test } from "bun:test";
import type { Store } from "../../src/db/store";
import { openStore } from "../../src/services";
import { createTestDatabase, ledgerSum, openTestStore, queryRows } from "../support/context";

// No process can take a bucket below zero, whatever runs beside it: the database itself refuses it
// (a CHECK constraint on PostgreSQL, triggers on SQLite), not only the code of the process that debits.
async function bucketTotals(store: Store, organizationId: string): Promise<{ remaining: number; negative: number }> {
  const [row] = await queryRows<{ remaining: number; negative: number }>(
    store,
    "SELECT CAST(coalesce(sum(remaining), 0) AS INTEGER) AS remaining, CAST(coalesce(sum(CASE WHEN remaining < 0 THEN 1 ELSE 0 END), 0) AS INTEGER) AS negative FROM credit_buckets WHERE organization_id = ?",
    [organizationId],
  );
  return row!;
}

describe("no bucket below zero", () => {
  test("the database refuses an update or an insert that leaves a bucket below zero", async () => {
    const store = await openTestStore();
    try {
      const { id: organizationId } = await store.createOrganization({ name: "Org", now: 1 });
      const bucket = await store.grantCredits({ organizationId, source: "grant", type: "grant", amount: 1, expiresAt: null, description: "t", now: 1 });
      await expect(queryRows(store, "UPDATE credit_buckets SET remaining = remaining - 2 WHERE id = ?", [bucket.id])).rejects.toThrow(
        /credit_buckets_remaining_not_negative/,
      );
      await expect(
        queryRows(
          store,
          "INSERT INTO credit_buckets (id, organization_id, source, granted, remaining, created_at) VALUES ('bkt_negative', ?, 'grant', 1, -1, 1)",
          [organizationId],
        ),
      ).rejects.toThrow(/credit_buckets_remaining_not_negative/);
      expect(await bucketTotals(store, organizationId)).toEqual({ remaining: 1, negative: 0 });
    } finally {
      await store.close();
    }
  });

  test("two processes on one database holding the last credit debit it once: the other debit fails and the ledger agrees with the buckets", async () => {
    const database = await createTestDatabase();
    const first = await openStore(database.url);
    const second = await openStore(database.url);
    try {
      const { id: organizationId } = await first.createOrganization({ name: "Shared", now: 1 });
      await first.grantCredits({ organizationId, source: "grant", type: "grant", amount: 1, expiresAt: null, description: "t", now: 1 });
      // Each store reserves on its own (SQLite holds live in each process's memory, so both succeed there).
      const reservations = [
        { store: first, reservation: await first.reserveCredits({ organizationId, amount: 1, keyId: null, requestId: "req_first", now: 2 }) },
        { store: second, reservation: await second.reserveCredits({ organizationId, amount: 1, keyId: null, requestId: "req_second", now: 2 }) },
      ];
      const commits = await Promise.allSettled(
        reservations.flatMap(({ store, reservation }) =>
          reservation.ok ? [store.commitReservation(reservation.reservationId, { gtin: null, description: "usage", now: 3 })] : [],
        ),
      );
      expect(commits.filter((commit) => commit.status === "fulfilled" && commit.value).length).toBe(1);
      expect(await bucketTotals(first, organizationId)).toEqual({ remaining: 0, negative: 0 });
      expect(await ledgerSum(first, organizationId)).toBe(0);
    } finally {
      await first.close();
      await second.close();
      await database.drop();
    }
  });
});
