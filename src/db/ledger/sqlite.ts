// The ledger port on SQLite: plain statements on the serving connection, inside the caller's
// BEGIN IMMEDIATE transaction (which already serializes every write, so lockPayment has nothing to do).
import { and, eq, inArray, sql } from "drizzle-orm";
import type { BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { newId } from "../../lib/ids";
import type { InvoiceRecord } from "../billing/records";
import * as schema from "../schema/sqlite";
import type { NewWebhookEvent } from "../webhooks/records";
import { invoiceColumnsOf, invoiceNumber, type LedgerEntry, type LedgerPort } from "./port";

const { orders, subscriptions, invoices, payments, paymentReversals, providerEvents, creditBuckets, creditTransactions } = schema;

export const invoiceColumns = invoiceColumnsOf(invoices);

/** What the SQLite store lends its ledger port: its connection and the parts that touch its memory (holds, caches). */
export interface SQLiteLedgerDeps {
  db: BunSQLiteDatabase<typeof schema>;
  appendLedger(entry: LedgerEntry): number;
  emit(events: NewWebhookEvent[]): void;
  writeOffExpired(organizationId: string, now: number): void;
  /** Credits of a bucket held by this process's requests in flight (they stay in the bucket until committed). */
  heldIn(bucketId: string): number;
}

export function sqliteLedgerPort(deps: SQLiteLedgerDeps): LedgerPort {
  return { ...orderSteps(deps), ...invoiceAndPaymentSteps(deps), ...bucketSteps(deps) };
}

/** The port's steps of provider events, orders, grants and subscriptions, and the ledger's one writer. */
function orderSteps(
  deps: SQLiteLedgerDeps,
): Pick<
  LedgerPort,
  "claimEvent" | "lockPayment" | "getOrder" | "completePendingOrder" | "insertBucket" | "appendLedger" | "emit" | "insertPayment" | "insertSubscription"
> {
  const { db } = deps;
  return {
    claimEvent(event, now) {
      if (event === null) return true;
      return (
        db.insert(providerEvents).values({ id: event.id, type: event.type, receivedAt: now }).onConflictDoNothing().returning({ id: providerEvents.id }).all()
          .length === 1
      );
    },
    lockPayment() {},
    getOrder: (id) => db.select().from(orders).where(eq(orders.id, id)).get() ?? null,
    completePendingOrder: (id, now) =>
      db
        .update(orders)
        .set({ status: "completed", completedAt: now })
        .where(and(eq(orders.id, id), eq(orders.status, "pending")))
        .returning()
        .get() ?? null,
    insertBucket: (bucket) => void db.insert(creditBuckets).values(bucket).run(),
    appendLedger: (entry) => deps.appendLedger(entry),
    emit: (events) => deps.emit(events),
    insertPayment(organizationId, bucket, payment, now) {
      db.insert(payments)
        .values({
          ref: payment.ref,
          organizationId,
          bucketId: bucket.id,
          credits: bucket.granted,
          amount: payment.amount,
          currency: payment.currency,
          createdAt: now,
        })
        .onConflictDoNothing()
        .run();
    },
    insertSubscription: (subscription) => db.insert(subscriptions).values(subscription).returning().get(),
  };
}

/** The port's steps of invoices, subscription periods, payments and their reversals. */
function invoiceAndPaymentSteps(
  deps: SQLiteLedgerDeps,
): Pick<LedgerPort, "insertInvoice" | "advancePeriod" | "getPayment" | "getReversal" | "putReversal" | "setPaymentRefund"> {
  const { db } = deps;
  return {
    // Numbers have no gaps: the sequence is read inside the write lock.
    insertInvoice(organizationId, input, now): InvoiceRecord {
      const sequence =
        db
          .select({ last: sql<number>`coalesce(max(${invoices.sequence}), 0)` })
          .from(invoices)
          .get()!.last + 1;
      return db
        .insert(invoices)
        .values({ id: newId("inv", now), organizationId, sequence, number: invoiceNumber(sequence), status: "paid", ...input, createdAt: now, paidAt: now })
        .returning(invoiceColumns)
        .get();
    },
    advancePeriod: (input) =>
      db
        .update(subscriptions)
        .set({ currentPeriodStart: input.periodStart, currentPeriodEnd: input.periodEnd })
        .where(and(eq(subscriptions.id, input.subscriptionId), eq(subscriptions.status, "active"), eq(subscriptions.currentPeriodEnd, input.expectedPeriodEnd)))
        .returning()
        .get() ?? null,
    getPayment: (ref) => db.select().from(payments).where(eq(payments.ref, ref)).get() ?? null,
    getReversal: (ref) => db.select().from(paymentReversals).where(eq(paymentReversals.ref, ref)).get() ?? null,
    putReversal(ref, reversal, now) {
      db.insert(paymentReversals)
        .values({ ref, ...reversal, updatedAt: now })
        .onConflictDoUpdate({ target: paymentReversals.ref, set: { ...reversal, updatedAt: now } })
        .run();
    },
    setPaymentRefund: (ref, refunded) =>
      void db.update(payments).set({ refundedAmount: refunded.amount, refundedCredits: refunded.credits }).where(eq(payments.ref, ref)).run(),
  };
}

/** The port's steps on a payment's bucket: expiry first, then what it can give up and its adjustment. */
function bucketSteps(deps: SQLiteLedgerDeps): Pick<LedgerPort, "writeOffExpired" | "settlementBucket" | "adjustBucket"> {
  const { db } = deps;
  return {
    writeOffExpired: (organizationId, now) => deps.writeOffExpired(organizationId, now),
    settlementBucket(_, bucketId, now) {
      const bucket = db
        .select({ remaining: creditBuckets.remaining, owed: creditBuckets.clawbackOwed, expiresAt: creditBuckets.expiresAt })
        .from(creditBuckets)
        .where(eq(creditBuckets.id, bucketId))
        .get()!;
      const held = deps.heldIn(bucketId);
      const taken = db
        .select({ taken: sql<number>`coalesce(-sum(${creditTransactions.amount}), 0)` })
        .from(creditTransactions)
        .where(and(eq(creditTransactions.bucketId, bucketId), inArray(creditTransactions.type, ["refund", "adjustment"])))
        .get()!.taken;
      return { free: bucket.remaining - held, held, owed: bucket.owed, taken, expired: bucket.expiresAt !== null && bucket.expiresAt <= now };
    },
    adjustBucket(bucketId, delta, owed) {
      db.update(creditBuckets)
        .set({ remaining: sql`${creditBuckets.remaining} + ${delta}`, clawbackOwed: owed })
        .where(eq(creditBuckets.id, bucketId))
        .run();
    },
  };
}
