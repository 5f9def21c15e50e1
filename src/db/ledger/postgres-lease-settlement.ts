// Settlement of look-ups debited from credit leases. A lease's debit writes only narrow lease_usage
// rows and the lease rows (see CreditLeases.debit), so two instances spending one organization's
// credits share no row. A settlement turns those rows into the ledger: one usage row each (its id
// fixed by the debit), the organization's running sum, usage counters, key lines' monthly spending
// and balance events, in one transaction that deletes the rows it settles.
//
// Invariants: a lease_usage row holds credits already out of the buckets and the lease row, so
// ledger sum = buckets + reservations + lease_usage at every commit; each row is settled exactly
// once (its row lock queues a second settler, which then finds it gone); any instance may settle any
// organization's rows, so a dead instance's are settled by the next sweep.
import type postgres from "postgres";
import { utcMonth } from "../../lib/clock";
import { type Debit, planDebits } from "./debit-plan";
import { lockedStateOf, lockStatements, writePlan } from "./postgres-debits";

interface LeaseUsageRow {
  organization_id: string;
  id: string;
  amount: string;
  allocations: string;
  key_id: string | null;
  request_id: string;
  gtin: string | null;
  description: string;
  items: number;
  created_at: string;
}

/** A look-up debited from a lease, as its lease_usage row holds it. */
export type LeaseUsage = Pick<Debit, "organizationId" | "transactionId" | "amount" | "keyId" | "requestId" | "gtin" | "description" | "items" | "createdAt"> & {
  leaseId: string;
  allocations: ReadonlyArray<{ bucketId: string; amount: number }>;
};

/** Writes look-ups debited from leases as lease_usage rows (a part of the lease debit's statement). */
export function leaseUsageWrite(sql: postgres.Sql, usage: LeaseUsage[]) {
  return sql`recorded AS (
        INSERT INTO lease_usage (organization_id, lease_id, id, amount, allocations, key_id, request_id, gtin, description, items, created_at)
        SELECT organization_id, lease_id, id, amount, allocations::jsonb, key_id, request_id, gtin, description, items, created_at
        FROM unnest(${usage.map((u) => u.organizationId)}::text[], ${usage.map((u) => u.leaseId)}::text[], ${usage.map((u) => u.transactionId)}::text[],
                    ${usage.map((u) => String(u.amount))}::bigint[], ${usage.map((u) => JSON.stringify(u.allocations))}::text[], ${usage.map((u) => u.keyId)}::text[],
                    ${usage.map((u) => u.requestId)}::text[], ${usage.map((u) => u.gtin)}::text[], ${usage.map((u) => u.description)}::text[],
                    ${usage.map((u) => u.items)}::int[], ${usage.map((u) => String(u.createdAt))}::bigint[])
          AS t(organization_id, lease_id, id, amount, allocations, key_id, request_id, gtin, description, items, created_at)
      )`;
}

/** Which lease_usage rows a settlement takes: those of some leases, of some organizations, or all. */
export type SettlementScope = { leases: Array<{ organizationId: string; leaseId: string }> } | { organizations: string[] } | "all";

/**
 * Settles the lease_usage rows of `scope` and returns how many it settled. Rows committed before
 * the call are settled when it returns (by this call, or by another one that held them and
 * committed first), so a read after it finds every look-up debited before it in the ledger.
 */
export async function settleLeaseUsage(client: postgres.Sql, scope: SettlementScope, reason: string): Promise<number> {
  if (scope !== "all" && ("leases" in scope ? scope.leases : scope.organizations).length === 0) return 0;
  return client.begin(async (tx) => {
    // Deleting a row locks it: a second settler of it waits, then finds it gone.
    const rows = await tx<LeaseUsageRow[]>`
      DELETE FROM lease_usage ${whereOf(tx, scope)}
      RETURNING organization_id, id, amount, allocations::text AS allocations, key_id, request_id, gtin, description, items, created_at`;
    if (rows.length > 0) await writeSettlement(tx, rows.map(debitOf), reason);
    return rows.length;
  });
}

function whereOf(sql: postgres.TransactionSql, scope: SettlementScope) {
  if (scope === "all") return sql``;
  if ("organizations" in scope) return sql`WHERE organization_id = ANY(${scope.organizations}::text[])`;
  return sql`WHERE (organization_id, lease_id) IN (
        SELECT * FROM unnest(${scope.leases.map((l) => l.organizationId)}::text[], ${scope.leases.map((l) => l.leaseId)}::text[]))`;
}

function debitOf(row: LeaseUsageRow): Debit {
  const createdAt = Number(row.created_at);
  return {
    reservationId: row.id,
    transactionId: row.id,
    organizationId: row.organization_id,
    amount: Number(row.amount),
    keyId: row.key_id,
    requestId: row.request_id,
    gtin: row.gtin,
    description: row.description,
    createdAt,
    month: utcMonth(createdAt),
    items: row.items,
    allocated: { allocations: JSON.parse(row.allocations), inBuckets: false },
  };
}

/**
 * The ledger's side of settled look-ups: the organizations' sums locked (in id order, as every
 * debit locks them) and read with the keys' lines, then the one debit planner's plan written by the
 * group commit's own write statement (usage rows, sums, counters, key lines' spending, balance events).
 */
async function writeSettlement(sql: postgres.TransactionSql, debits: Debit[], reason: string): Promise<void> {
  const organizations = [...new Set(debits.map((debit) => debit.organizationId))];
  const keyIds = [...new Set(debits.flatMap((debit) => (debit.keyId === null ? [] : [debit.keyId])))];
  // Only the sums and the keys: the look-ups' credits left the buckets when their leases were taken,
  // so the buckets' statement (postgres.js runs a query only once awaited) is never sent.
  const [, sumsRead, keysRead] = lockStatements(sql, { organizations, keyIds, rowIds: [], now: 0 });
  const [sums, keys] = await Promise.all([sumsRead, keysRead]);
  await writePlan(sql, planDebits(debits, lockedStateOf([], sums, keys)), { reason });
}
