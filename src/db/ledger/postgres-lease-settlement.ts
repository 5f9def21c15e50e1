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
import { balanceEvents, countersWrite } from "./postgres-debits";

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
 * The ledger's side of settled look-ups, in one statement: the organizations' sums (locked first, in
 * id order, as every debit locks them), the usage rows, counters, key lines' monthly spending and
 * balance events.
 */
async function writeSettlement(sql: postgres.TransactionSql, debits: Debit[], reason: string): Promise<void> {
  const organizations = [...new Set(debits.map((debit) => debit.organizationId))];
  const keyIds = [...new Set(debits.flatMap((debit) => (debit.keyId === null ? [] : [debit.keyId])))];
  // Sums from zero: each usage row's balance_after is the organization's sum before the statement plus its planned one.
  const plan = planDebits(debits, {
    buckets: [],
    organizations: new Map(organizations.map((id) => [id, { ledgerBalance: 0, lowCreditThreshold: null }])),
    keys: new Map(keyIds.map((id) => [id, { line: id, capped: false }])),
  });
  const createdAt = Math.max(...debits.map((debit) => debit.createdAt));
  await sql`
      WITH settling AS (
        SELECT id FROM organizations WHERE id = ANY(${organizations}::text[]) ORDER BY id FOR NO KEY UPDATE
      ),
      moved AS (
        UPDATE organizations SET ledger_balance = organizations.ledger_balance - t.amount
        FROM settling JOIN unnest(${plan.organizations.map((o) => o.id)}::text[], ${plan.organizations.map((o) => String(o.amount))}::bigint[]) AS t(id, amount) ON t.id = settling.id
        WHERE organizations.id = t.id
        RETURNING organizations.id, organizations.ledger_balance + t.amount AS before, organizations.ledger_balance AS after, organizations.low_credit_threshold AS threshold
      ),
      ledger AS (
        INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
        SELECT t.id, t.organization_id, 'usage', t.amount, moved.before + t.balance_after, t.bucket_id, t.key_id, t.request_id, t.gtin, t.description, t.created_at
        FROM unnest(${plan.ledger.map((r) => r.id)}::text[], ${plan.ledger.map((r) => r.organizationId)}::text[], ${plan.ledger.map((r) => String(r.amount))}::bigint[],
                    ${plan.ledger.map((r) => String(r.balanceAfter))}::bigint[], ${plan.ledger.map((r) => r.bucketId)}::text[], ${plan.ledger.map((r) => r.keyId)}::text[],
                    ${plan.ledger.map((r) => r.requestId)}::text[], ${plan.ledger.map((r) => r.gtin)}::text[], ${plan.ledger.map((r) => r.description)}::text[],
                    ${plan.ledger.map((r) => String(r.createdAt))}::bigint[])
          AS t(id, organization_id, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
        JOIN moved ON moved.id = t.organization_id
      ),
      ${countersWrite(sql, plan.counters, reason)},
      spending AS (
        INSERT INTO api_key_monthly_usage (key_id, month, spent)
        SELECT coalesce(k.line_id, k.id), t.month, sum(t.spent)::bigint
        FROM unnest(${plan.spending.map((s) => s.line)}::text[], ${plan.spending.map((s) => s.month)}::text[], ${plan.spending.map((s) => String(s.spent))}::bigint[])
          AS t(key_id, month, spent) JOIN api_keys k ON k.id = t.key_id
        WHERE EXISTS (SELECT 1 FROM settling)
        GROUP BY 1, 2
        ON CONFLICT (key_id, month) DO UPDATE SET spent = api_key_monthly_usage.spent + excluded.spent
      ),
      crossings AS (SELECT id AS organization_id, before, after, threshold, ${createdAt}::bigint AS created_at FROM moved),
      ${balanceEvents(sql)}
      SELECT 1`;
}
