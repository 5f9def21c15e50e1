// The ledger port on PostgreSQL: statements of the caller's transaction. Instances write at the same
// time, so what SQLite's single writer gives for free is taken here with locks: a payment's advisory
// lock, the invoice sequence's advisory lock, and row locks on the buckets a settlement moves.
import { and, asc, eq, gt, inArray, lte, sql } from "drizzle-orm";
import type { PostgresJsDatabase } from "drizzle-orm/postgres-js";
import { newId } from "../../lib/ids";
import { emitPostgres } from "../webhooks/postgres";
import * as schema from "../schema/postgres";
import { invoiceColumnsOf, invoiceNumber, type AsyncLedgerPort, type LedgerEntry } from "./port";

const { orders, subscriptions, invoices, payments, paymentReversals, providerEvents, creditBuckets, creditTransactions, reservations } = schema;

type Tx = Parameters<Parameters<PostgresJsDatabase<typeof schema>["transaction"]>[0]>[0];

/** First key of the invoice-numbering advisory lock ("invs"); the second is the schema. */
const INVOICE_LOCK_NAMESPACE = 0x696e7673;
/** First key of a payment's advisory lock ("pays"); the second is the schema and the payment ref. */
const PAYMENT_LOCK_NAMESPACE = 0x70617973;

export const invoiceColumns = invoiceColumnsOf(invoices);

/** What the PostgreSQL store lends its ledger port: the ledger sum's one writer and the per-bucket write-off. */
export interface PostgresLedgerDeps {
  appendLedger(tx: Tx, entry: LedgerEntry): Promise<number>;
  writeOffBucket(tx: Tx, bucketId: string, now: number): Promise<boolean>;
}

export function postgresLedgerPort(tx: Tx, deps: PostgresLedgerDeps): AsyncLedgerPort {
  return { ...orderSteps(tx, deps), ...invoiceAndPaymentSteps(tx), ...bucketSteps(tx, deps) };
}

/** The port's steps of provider events, orders, grants and subscriptions, and the ledger's one writer. */
function orderSteps(
  tx: Tx,
  deps: PostgresLedgerDeps,
): Pick<
  AsyncLedgerPort,
  "claimEvent" | "lockPayment" | "getOrder" | "completePendingOrder" | "insertBucket" | "appendLedger" | "emit" | "insertPayment" | "insertSubscription"
> {
  return {
    // An instance inserting the same id meanwhile makes this wait for its outcome.
    async claimEvent(event, now) {
      if (event === null) return true;
      const inserted = await tx
        .insert(providerEvents)
        .values({ id: event.id, type: event.type, receivedAt: now })
        .onConflictDoNothing()
        .returning({ id: providerEvents.id });
      return inserted.length === 1;
    },
    // Taken before anything else of the payment or its organization is locked: a reversal and the
    // grant recording the payment take turns on it, so whichever commits second sees the other
    // (READ COMMITTED), in either order.
    async lockPayment(ref) {
      await tx.execute(sql`SELECT pg_advisory_xact_lock(${PAYMENT_LOCK_NAMESPACE}, hashtext(current_schema() || ':' || ${ref}))`);
    },
    async getOrder(id) {
      const [order] = await tx.select().from(orders).where(eq(orders.id, id));
      return order ?? null;
    },
    async completePendingOrder(id, now) {
      const [order] = await tx
        .update(orders)
        .set({ status: "completed", completedAt: now })
        .where(and(eq(orders.id, id), eq(orders.status, "pending")))
        .returning();
      return order ?? null;
    },
    insertBucket: async (bucket) => void (await tx.insert(creditBuckets).values(bucket)),
    appendLedger: (entry) => deps.appendLedger(tx, entry),
    emit: (events) => emitPostgres(tx, events),
    async insertPayment(organizationId, bucket, payment, now) {
      await tx
        .insert(payments)
        .values({
          ref: payment.ref,
          organizationId,
          bucketId: bucket.id,
          credits: bucket.granted,
          amount: payment.amount,
          currency: payment.currency,
          createdAt: now,
        })
        .onConflictDoNothing();
    },
    async insertSubscription(subscription) {
      const [created] = await tx.insert(subscriptions).values(subscription).returning();
      return created!;
    },
  };
}

/** The port's steps of invoices, subscription periods, payments and their reversals. */
function invoiceAndPaymentSteps(
  tx: Tx,
): Pick<AsyncLedgerPort, "insertInvoice" | "advancePeriod" | "getPayment" | "getReversal" | "putReversal" | "setPaymentRefund"> {
  return {
    // Numbers have no gaps: the sequence is taken under a transaction-scoped advisory lock (per
    // schema), held until commit, so instances take turns and each reads the previous holder's
    // committed invoice; the unique index backs it.
    async insertInvoice(organizationId, input, now) {
      await tx.execute(sql`SELECT pg_advisory_xact_lock(${INVOICE_LOCK_NAMESPACE}, hashtext(current_schema()))`);
      const [last] = await tx.select({ last: sql<number>`coalesce(max(${invoices.sequence}), 0)`.mapWith(Number) }).from(invoices);
      const sequence = last!.last + 1;
      const [invoice] = await tx
        .insert(invoices)
        .values({ id: newId("inv", now), organizationId, sequence, number: invoiceNumber(sequence), status: "paid", ...input, createdAt: now, paidAt: now })
        .returning(invoiceColumns);
      return invoice!;
    },
    async advancePeriod(input) {
      const [subscription] = await tx
        .update(subscriptions)
        .set({ currentPeriodStart: input.periodStart, currentPeriodEnd: input.periodEnd })
        .where(and(eq(subscriptions.id, input.subscriptionId), eq(subscriptions.status, "active"), eq(subscriptions.currentPeriodEnd, input.expectedPeriodEnd)))
        .returning();
      return subscription ?? null;
    },
    async getPayment(ref) {
      const [payment] = await tx.select().from(payments).where(eq(payments.ref, ref));
      return payment ?? null;
    },
    async getReversal(ref) {
      const [reversal] = await tx.select().from(paymentReversals).where(eq(paymentReversals.ref, ref));
      return reversal ?? null;
    },
    async putReversal(ref, reversal, now) {
      await tx
        .insert(paymentReversals)
        .values({ ref, ...reversal, updatedAt: now })
        .onConflictDoUpdate({ target: paymentReversals.ref, set: { ...reversal, updatedAt: now } });
    },
    async setPaymentRefund(ref, refunded) {
      await tx.update(payments).set({ refundedAmount: refunded.amount, refundedCredits: refunded.credits }).where(eq(payments.ref, ref));
    },
  };
}

/** The port's steps on credit buckets: expiry write-offs and the settlement of a payment's bucket. */
function bucketSteps(tx: Tx, deps: PostgresLedgerDeps): Pick<AsyncLedgerPort, "writeOffExpired" | "settlementBucket" | "adjustBucket"> {
  return {
    async writeOffExpired(organizationId, now) {
      const expired = await tx
        .select({ id: creditBuckets.id })
        .from(creditBuckets)
        .where(and(eq(creditBuckets.organizationId, organizationId), gt(creditBuckets.remaining, 0), lte(creditBuckets.expiresAt, now)))
        .orderBy(asc(creditBuckets.id));
      for (const { id } of expired) await deps.writeOffBucket(tx, id, now);
    },
    // Credits reserved by requests in flight are out of the bucket already (all of it is free); with
    // the bucket locked, no reservation of it can start or be given back meanwhile.
    async settlementBucket(organizationId, bucketId, now) {
      await tx.select({ id: creditBuckets.id }).from(creditBuckets).where(eq(creditBuckets.id, bucketId)).for("update");
      await takeBackFromLeases(tx, organizationId, bucketId);
      const [bucket] = await tx
        .select({ remaining: creditBuckets.remaining, owed: creditBuckets.clawbackOwed, expiresAt: creditBuckets.expiresAt })
        .from(creditBuckets)
        .where(eq(creditBuckets.id, bucketId));
      const [reserved] = await tx
        .select({ held: sql<number>`coalesce(sum((allocation->>'amount')::bigint), 0)`.mapWith(Number) })
        .from(sql`${reservations}, jsonb_array_elements(${reservations.allocations}) AS allocation`)
        .where(and(eq(reservations.organizationId, organizationId), sql`allocation->>'bucketId' = ${bucketId}`));
      const [taken] = await tx
        .select({ taken: sql<number>`coalesce(-sum(${creditTransactions.amount}), 0)`.mapWith(Number) })
        .from(creditTransactions)
        .where(and(eq(creditTransactions.bucketId, bucketId), inArray(creditTransactions.type, ["refund", "adjustment"])));
      return {
        free: bucket!.remaining,
        held: reserved!.held,
        owed: bucket!.owed,
        taken: taken!.taken,
        expired: bucket!.expiresAt !== null && bucket!.expiresAt <= now,
      };
    },
    async adjustBucket(bucketId, delta, owed) {
      await tx
        .update(creditBuckets)
        .set({ remaining: sql`${creditBuckets.remaining} + ${delta}`, clawbackOwed: owed })
        .where(eq(creditBuckets.id, bucketId));
    },
  };
}

/**
 * Takes the credits of `bucketId` out of every instance's credit lease and puts them back in the
 * bucket (the ledger sum does not move: they were reserved, now they are free), so a settlement
 * claws them back at once rather than letting a lease spend them. What a lease's unsettled look-ups
 * spent of the bucket stays in its row for their settlement. The rows it shrinks lapse, so their
 * instances' next debits of them fail and go to the buckets, and the leases go back (see CreditLeases).
 * The lease rows are locked first, and read in the next statement: a debit in flight commits before
 * they and their usage are read, and one that starts meanwhile waits and then finds its row lapsed,
 * so each lease gives up exactly what its committed row holds unspent.
 */
async function takeBackFromLeases(tx: Tx, organizationId: string, bucketId: string): Promise<void> {
  await tx.execute(sql`SELECT id FROM ${reservations} WHERE organization_id = ${organizationId} AND instance_id IS NOT NULL ORDER BY id FOR UPDATE`);
  await tx.execute(sql`
    WITH unsettled AS (
      SELECT u.lease_id, sum((a->>'amount')::bigint) AS amount
      FROM lease_usage u, json_array_elements(u.look_ups) l, json_array_elements(l->'allocations') a
      WHERE u.organization_id = ${organizationId} AND u.in_lease AND a->>'bucketId' = ${bucketId}
      GROUP BY u.lease_id
    ),
    leased AS (
      SELECT r.id, sum((a.value->>'amount')::bigint) - coalesce(max(unsettled.amount), 0) AS amount
      FROM ${reservations} r JOIN jsonb_array_elements(r.allocations) a ON a.value->>'bucketId' = ${bucketId}
      LEFT JOIN unsettled ON unsettled.lease_id = r.id
      WHERE r.organization_id = ${organizationId} AND r.instance_id IS NOT NULL
      GROUP BY r.id
    ),
    shrunk AS (
      UPDATE ${reservations} r SET amount = r.amount - leased.amount, expires_at = 0,
        allocations = (SELECT coalesce(jsonb_agg(CASE WHEN e.value->>'bucketId' = ${bucketId}
                                                       THEN jsonb_set(e.value, '{amount}', to_jsonb((e.value->>'amount')::bigint - leased.amount))
                                                       ELSE e.value END ORDER BY e.position), '[]'::jsonb)
                       FROM jsonb_array_elements(r.allocations) WITH ORDINALITY AS e(value, position)
                       WHERE e.value->>'bucketId' <> ${bucketId} OR (e.value->>'amount')::bigint > leased.amount)
      FROM leased WHERE r.id = leased.id
      RETURNING leased.amount
    )
    UPDATE ${creditBuckets} SET remaining = remaining + (SELECT coalesce(sum(amount), 0) FROM shrunk) WHERE id = ${bucketId}`);
}
