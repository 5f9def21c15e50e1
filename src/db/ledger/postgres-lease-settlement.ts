// Settlement of look-ups debited from credit leases. A lease's debit writes only a lease_usage row
// per lease packing its look-ups, and locks its lease's row without moving it (see
// CreditLeases.debit), so two instances spending one organization's credits share no row. A
// settlement turns those rows into the ledger: usage rows packing the look-ups' entries (each
// entry's id fixed by the debit; packed-ledger.ts), the organization's running sum, usage counters,
// key lines' monthly spending and balance events, and takes their credits out of their leases' rows,
// in one transaction that deletes them.
//
// Invariants: a lease_usage row's credits are still in its lease's row until it is settled (rows of
// an older version, `in_lease` false, hold their own), so ledger sum = buckets + reservations at
// every commit; each row is settled exactly once (its row lock queues a second settler, which then
// finds it gone); a row's lease exists until it is settled (a give-back settles its lease first);
// any instance may settle any organization's rows, so a dead instance's are settled by the next sweep.
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

/** The settling instance's own leases of the scope, unless lapsed, last `ms` more by the database's clock. */
export interface Renewal {
  instanceId: string;
  ms: number;
}

/**
 * Settles the lease_usage rows of `scope` in a transaction of its own: how many look-ups it settled,
 * and which leases it renewed. Rows committed before the call are settled when it returns (by this
 * call, or by another one that held them and committed first), so a read after it finds every
 * look-up debited before it in the ledger.
 */
export async function settleLeaseUsage(client: postgres.Sql, scope: SettlementScope, reason: string, renewal?: Renewal): Promise<Settled> {
  if (scope !== "all" && ("leases" in scope ? scope.leases : scope.organizations).length === 0) return { lookUps: 0, renewed: [] };
  return client.begin((tx) => settleIn(tx, scope, reason, renewal));
}

export interface Settled {
  lookUps: number;
  renewed: string[];
}

/**
 * The settlement inside a transaction of the caller's (a give-back settles its lease before it
 * deletes the row). The leases' rows are locked first, as a give-back locks its lease before its
 * usage: a debit in flight holds its lease's row FOR KEY SHARE, which this lock does not wait for,
 * and a give-back's FOR UPDATE queues this settlement behind it (or it behind this one).
 */
export async function settleIn(tx: postgres.TransactionSql, scope: SettlementScope, reason: string, renewal?: Renewal): Promise<Settled> {
  const leases = await tx<Array<{ id: string; amount: string; allocations: string }>>`
    SELECT id, amount, allocations::text AS allocations FROM reservations WHERE ${leasesOf(tx, scope)} ORDER BY id FOR NO KEY UPDATE`;
  const locked = leases.map((lease) => lease.id);
  // Deleting a row locks it: a second settler of it waits, then finds it gone.
  const rows = await tx<Array<{ organization_id: string; lease_id: string; in_lease: boolean; look_ups: string }>>`
    DELETE FROM lease_usage ${whereOf(tx, scope)} AND (NOT in_lease OR lease_id = ANY(${locked}::text[]))
    RETURNING organization_id, lease_id, in_lease, look_ups::text AS look_ups`;
  const packed = rows.map((row) => ({ ...row, lookUps: JSON.parse(row.look_ups) as PackedLookUp[] }));
  const renewed = await moveLeases(tx, leases, packed, renewal);
  // In time order, so each look-up's balanceAfter follows the order the transactions API lists them in.
  const debits = packed
    .flatMap((row) => row.lookUps.map((lookUp) => debitOf(row.organization_id, lookUp)))
    .sort((a, b) => byTime({ createdAt: a.createdAt, id: a.transactionId }, { createdAt: b.createdAt, id: b.transactionId }));
  if (debits.length > 0) await writeSettlement(tx, debits, reason);
  return { lookUps: debits.length, renewed };
}

/** The lease rows a settlement of `scope` locks: those its lease_usage rows name (and, for an instance's own, its leases). */
function leasesOf(sql: postgres.TransactionSql, scope: SettlementScope) {
  if (scope === "all") return sql`id IN (SELECT lease_id FROM lease_usage)`;
  if ("organizations" in scope) return sql`id IN (SELECT lease_id FROM lease_usage WHERE organization_id = ANY(${scope.organizations}::text[]))`;
  return sql`id = ANY(${scope.leases.map((l) => l.leaseId)}::text[])`;
}

function whereOf(sql: postgres.TransactionSql, scope: SettlementScope) {
  if (scope === "all") return sql`WHERE true`;
  if ("organizations" in scope) return sql`WHERE organization_id = ANY(${scope.organizations}::text[])`;
  return sql`WHERE (organization_id, lease_id) IN (
        SELECT * FROM unnest(${scope.leases.map((l) => l.organizationId)}::text[], ${scope.leases.map((l) => l.leaseId)}::text[]))`;
}

/**
 * Takes the settled look-ups' credits out of their leases' rows, which held them until now, and
 * renews the settling instance's own leases (`renewal`): which ones it renewed.
 */
async function moveLeases(
  sql: postgres.TransactionSql,
  leases: Array<{ id: string; amount: string; allocations: string }>,
  settled: Array<{ lease_id: string; in_lease: boolean; lookUps: PackedLookUp[] }>,
  renewal: Renewal | undefined,
): Promise<string[]> {
  const spentOf = Map.groupBy(
    settled.filter((row) => row.in_lease).flatMap((row) => row.lookUps.map((lookUp) => ({ leaseId: row.lease_id, lookUp }))),
    (spent) => spent.leaseId,
  );
  const moved = leases
    .filter((lease) => renewal !== undefined || spentOf.has(lease.id))
    .map((lease) => {
      const spent = (spentOf.get(lease.id) ?? []).map(({ lookUp }) => lookUp);
      return { id: lease.id, ...leftAfter(lease, spent) };
    });
  if (moved.length === 0) return [];
  const renewed = await sql<Array<{ id: string; renewed: boolean }>>`
    WITH clock AS (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now)
    UPDATE reservations r SET amount = t.amount, allocations = t.allocations::jsonb,
      expires_at = CASE WHEN r.instance_id = ${renewal?.instanceId ?? null} AND r.expires_at > clock.now THEN clock.now + ${renewal?.ms ?? 0} ELSE r.expires_at END
    FROM clock, unnest(${moved.map((m) => m.id)}::text[], ${moved.map((m) => String(m.amount))}::bigint[], ${moved.map((m) => JSON.stringify(m.allocations))}::text[])
      AS t(id, amount, allocations)
    WHERE r.id = t.id
    RETURNING r.id, r.instance_id = ${renewal?.instanceId ?? null} AND r.expires_at = clock.now + ${renewal?.ms ?? 0} AS renewed`;
  return renewed.filter((row) => row.renewed).map((row) => row.id);
}

/** What a lease's row holds once `spent` is taken out of it, bucket by bucket; spending more than it holds is a broken invariant. */
export function leftAfter(lease: { id: string; amount: string; allocations: string }, spent: PackedLookUp[]) {
  const left = new Map((JSON.parse(lease.allocations) as Array<{ bucketId: string; amount: number }>).map((a) => [a.bucketId, a.amount]));
  for (const { bucketId, amount } of spent.flatMap((lookUp) => lookUp.allocations)) left.set(bucketId, (left.get(bucketId) ?? 0) - amount);
  const allocations = [...left].filter(([, amount]) => amount !== 0).map(([bucketId, amount]) => ({ bucketId, amount }));
  const amount = Number(lease.amount) - spent.reduce((sum, lookUp) => sum + lookUp.amount, 0);
  if (amount < 0 || allocations.some((a) => a.amount < 0)) throw new Error(`lease ${lease.id}: its look-ups spent more than its row holds`);
  return { amount, allocations };
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
