// Settlement of look-ups debited from credit leases. A lease's debit writes only the lease rows and
// a lease_usage row per lease packing its look-ups (see CreditLeases.debit), so two instances
// spending one organization's credits share no row. A settlement turns those rows into the ledger:
// usage rows packing the look-ups' entries (each entry's id fixed by the debit; packed-ledger.ts),
// the organization's running sum, usage counters, key lines' monthly spending and balance events,
// in one transaction that deletes them.
//
// Invariants: a lease_usage row holds credits already out of the buckets and the lease row, so
// ledger sum = buckets + reservations + lease_usage at every commit; each row is settled exactly
// once (its row lock queues a second settler, which then finds it gone); any instance may settle any
// organization's rows, so a dead instance's are settled by the next sweep.
import type postgres from "postgres";
import { utcMonth } from "../../lib/clock";
import type { PackedLookUp } from "../schema/postgres";
import { type Debit, planDebits } from "./debit-plan";
import { byTime } from "./packed-ledger";
import { lockedStateOf, lockStatements, writePlan } from "./postgres-debits";

/** A look-up debited from a lease, as the lease's debit statement holds it. */
export type LeaseUsage = Pick<Debit, "organizationId" | "transactionId" | "amount" | "keyId" | "requestId" | "gtin" | "description" | "items" | "createdAt"> & {
  leaseId: string;
  allocations: ReadonlyArray<{ bucketId: string; amount: number }>;
};

/**
 * Writes look-ups debited from leases (a part of the lease debit's statement): one lease_usage row
 * per lease, its look-ups packed in it, so a statement writes a row per lease, not per look-up.
 */
export function leaseUsageWrite(sql: postgres.Sql, usage: LeaseUsage[]) {
  const rows = [...Map.groupBy(usage, (u) => u.leaseId).values()].map((lookUps) => ({
    organizationId: lookUps[0]!.organizationId,
    leaseId: lookUps[0]!.leaseId,
    id: lookUps[0]!.transactionId,
    amount: lookUps.reduce((sum, u) => sum + u.amount, 0),
    lookUps: JSON.stringify(lookUps.map(packed)),
  }));
  return sql`recorded AS (
        INSERT INTO lease_usage (organization_id, lease_id, id, amount, look_ups)
        SELECT organization_id, lease_id, id, amount, look_ups::json
        FROM unnest(${rows.map((r) => r.organizationId)}::text[], ${rows.map((r) => r.leaseId)}::text[], ${rows.map((r) => r.id)}::text[],
                    ${rows.map((r) => String(r.amount))}::bigint[], ${rows.map((r) => r.lookUps)}::text[])
          AS t(organization_id, lease_id, id, amount, look_ups)
      )`;
}

function packed(u: LeaseUsage): PackedLookUp {
  const { transactionId, organizationId, leaseId, allocations, ...rest } = u;
  return { id: transactionId, allocations: [...allocations], ...rest };
}

/** Which lease_usage rows a settlement takes: those of some leases, of some organizations, or all. */
export type SettlementScope = { leases: Array<{ organizationId: string; leaseId: string }> } | { organizations: string[] } | "all";

/**
 * Settles the lease_usage rows of `scope` and returns how many look-ups it settled. Rows committed before
 * the call are settled when it returns (by this call, or by another one that held them and
 * committed first), so a read after it finds every look-up debited before it in the ledger.
 */
export async function settleLeaseUsage(client: postgres.Sql, scope: SettlementScope, reason: string): Promise<number> {
  if (scope !== "all" && ("leases" in scope ? scope.leases : scope.organizations).length === 0) return 0;
  return client.begin(async (tx) => {
    // Deleting a row locks it: a second settler of it waits, then finds it gone.
    const rows = await tx<Array<{ organization_id: string; look_ups: string }>>`
      DELETE FROM lease_usage ${whereOf(tx, scope)} RETURNING organization_id, look_ups::text AS look_ups`;
    // In time order, so each look-up's balanceAfter follows the order the transactions API lists them in.
    const debits = rows
      .flatMap((row) => (JSON.parse(row.look_ups) as PackedLookUp[]).map((lookUp) => debitOf(row.organization_id, lookUp)))
      .sort((a, b) => byTime({ createdAt: a.createdAt, id: a.transactionId }, { createdAt: b.createdAt, id: b.transactionId }));
    if (debits.length > 0) await writeSettlement(tx, debits, reason);
    return debits.length;
  });
}

function whereOf(sql: postgres.TransactionSql, scope: SettlementScope) {
  if (scope === "all") return sql``;
  if ("organizations" in scope) return sql`WHERE organization_id = ANY(${scope.organizations}::text[])`;
  return sql`WHERE (organization_id, lease_id) IN (
        SELECT * FROM unnest(${scope.leases.map((l) => l.organizationId)}::text[], ${scope.leases.map((l) => l.leaseId)}::text[]))`;
}

function debitOf(organizationId: string, { id, createdAt, allocations, ...rest }: PackedLookUp): Debit {
  const month = utcMonth(createdAt);
  return { ...rest, reservationId: id, transactionId: id, organizationId, createdAt, month, allocated: { allocations, inBuckets: false } };
}

/**
 * The ledger's side of settled look-ups: the organizations' sums locked (in id order, as every
 * debit locks them) and read with the keys' lines, then the one debit planner's plan written by the
 * group commit's own write statement (packed usage rows, sums, counters, key lines' spending, balance events).
 */
async function writeSettlement(sql: postgres.TransactionSql, debits: Debit[], reason: string): Promise<void> {
  const organizations = [...new Set(debits.map((debit) => debit.organizationId))];
  const keyIds = [...new Set(debits.flatMap((debit) => (debit.keyId === null ? [] : [debit.keyId])))];
  // Only the sums and the keys: the look-ups' credits left the buckets when their leases were taken,
  // so the buckets' statement (postgres.js runs a query only once awaited) is never sent.
  const [, sumsRead, keysRead] = lockStatements(sql, { organizations, keyIds, rowIds: [], now: 0 });
  const [sums, keys] = await Promise.all([sumsRead, keysRead]);
  await writePlan(sql, planDebits(debits, lockedStateOf([], sums, keys)), { reason, packLedger: true });
}
