// Each money operation of the ledger, written once over the port (port.ts) and run inside one
// transaction of either dialect. The invariant above each is what its transaction guarantees.
import { newId } from "../../lib/ids";
import type {
  CompleteOrderInput,
  CompleteOrderResult,
  CreditGrant,
  InvoiceRecord,
  PaymentInput,
  ProviderEvent,
  RenewSubscriptionInput,
  SubscriptionRecord,
} from "../billing/records";
import type { Bucket, DisputeReport, PaymentReversalResult } from "../store";
import { grantEventData, invoiceEventData } from "../webhooks/records";
import { port, type LedgerStep } from "./port";
import { creditsTakenBack, mergeReversal, REINSTATED, REVERSED_BEFORE_PAID, settleBucket } from "./reversals";

// Invariant: a bucket and its ledger row are written together; ledger sum = available + reserved.
export function* grant(organizationId: string, credits: CreditGrant, now: number): LedgerStep<Bucket> {
  const bucket: Bucket = {
    id: newId("bkt", now),
    organizationId,
    source: credits.source,
    granted: credits.amount,
    remaining: credits.amount,
    expiresAt: credits.expiresAt,
    createdAt: now,
  };
  yield* port.insertBucket(bucket);
  const balance = yield* port.appendLedger({
    organizationId,
    type: credits.type,
    amount: credits.amount,
    bucketId: bucket.id,
    description: credits.description,
    createdAt: now,
  });
  yield* port.emit([{ id: newId("msg", now), organizationId, type: "credits.granted", data: grantEventData(bucket, credits.type, balance), createdAt: now }]);
  return bucket;
}

/** A paid invoice with the next number, and its event. */
function* invoice(organizationId: string, input: Parameters<typeof port.insertInvoice>[1], now: number): LedgerStep<InvoiceRecord> {
  const written = yield* port.insertInvoice(organizationId, input, now);
  yield* port.emit([{ id: newId("msg", now), organizationId, type: "invoice.created", data: invoiceEventData(written), createdAt: now }]);
  return written;
}

/** Records the payment behind a grant and settles what reversals reported before it arrived. */
function* recordPayment(organizationId: string, bucket: Bucket, payment: PaymentInput, now: number): LedgerStep<void> {
  yield* port.insertPayment(organizationId, bucket, payment, now);
  yield* settlePayment(payment.ref, REVERSED_BEFORE_PAID, now);
}

// Invariant: an order is completed once. The conditional pending → completed update (and, for a
// provider event, the event row) commit with the grant, so a second completion writes nothing (on
// PostgreSQL it waits for the first on the order's row, then finds it completed).
export function* completeOrder(input: CompleteOrderInput): LedgerStep<CompleteOrderResult> {
  const { now } = input;
  const unchanged = function* (): LedgerStep<CompleteOrderResult> {
    return { applied: false, order: yield* port.getOrder(input.orderId), bucket: null, invoice: null, subscription: null };
  };
  if (input.payment !== null) yield* port.lockPayment(input.payment.ref);
  if (!(yield* port.claimEvent(input.event, now))) return yield* unchanged();
  const order = yield* port.completePendingOrder(input.orderId, now);
  if (order === null) return yield* unchanged();
  const bucket = input.grant === null ? null : yield* grant(order.organizationId, input.grant, now);
  if (bucket !== null && input.payment !== null) yield* recordPayment(order.organizationId, bucket, input.payment, now);
  let subscription: SubscriptionRecord | null = null;
  if (input.subscription !== null) {
    subscription = yield* port.insertSubscription({
      id: newId("sub", now),
      organizationId: order.organizationId,
      orderId: order.id,
      planId: order.itemId,
      planName: order.itemName,
      creditsPerPeriod: order.credits,
      interval: order.interval ?? "month",
      amount: order.amount,
      currency: order.currency,
      status: "active",
      startedAt: now,
      currentPeriodStart: now,
      currentPeriodEnd: input.subscription.periodEnd,
      createdAt: now,
    });
  }
  const written =
    input.invoice === null
      ? null
      : yield* invoice(order.organizationId, { ...input.invoice, orderId: order.id, subscriptionId: subscription?.id ?? null }, now);
  return { applied: true, order, bucket, invoice: written, subscription };
}

// Invariant: the event row and the grant commit together, so a redelivered event grants nothing.
export function* applyPaidGrant(input: {
  event: ProviderEvent;
  organizationId: string;
  grant: CreditGrant;
  payment: PaymentInput;
  now: number;
}): LedgerStep<{ applied: boolean; bucket: Bucket | null }> {
  yield* port.lockPayment(input.payment.ref);
  if (!(yield* port.claimEvent(input.event, input.now))) return { applied: false, bucket: null };
  const bucket = yield* grant(input.organizationId, input.grant, input.now);
  yield* recordPayment(input.organizationId, bucket, input.payment, input.now);
  return { applied: true, bucket };
}

// Invariant: a period is granted and invoiced once: the conditional move from the period end the
// caller saw commits with the grant, the invoice and its payment row; a second renewal of the same
// period (on PostgreSQL it waits on the subscription's row) finds the period end moved.
export function* renewSubscription(input: RenewSubscriptionInput): LedgerStep<{ applied: boolean; bucket: Bucket | null; invoice: InvoiceRecord | null }> {
  const subscription = yield* port.advancePeriod(input);
  if (subscription === null) return { applied: false, bucket: null, invoice: null };
  const bucket = yield* grant(subscription.organizationId, input.grant, input.now);
  const written = yield* invoice(subscription.organizationId, { ...input.invoice, orderId: null, subscriptionId: subscription.id }, input.now);
  yield* port.insertPayment(subscription.organizationId, bucket, { ref: written.id, amount: written.amount, currency: written.currency }, input.now);
  return { applied: true, bucket, invoice: written };
}

// Invariant: a report is applied once and only forward (mergeReversal): the event row, the merged
// reversal and the settlement commit together, under the payment's lock, whether the payment is
// known yet or not (a grant that records it later settles then).
export function* reversePayment(input: {
  event: ProviderEvent | null;
  ref: string;
  report: { refundedAmount?: number; dispute?: DisputeReport };
  description: string;
  now: number;
}): LedgerStep<PaymentReversalResult> {
  const { ref, now } = input;
  yield* port.lockPayment(ref);
  const payment = yield* port.getPayment(ref);
  const unchanged = { applied: false, clawedBack: 0, reinstated: 0, organizationId: payment?.organizationId ?? null };
  if (!(yield* port.claimEvent(input.event, now))) return unchanged;
  const next = mergeReversal((yield* port.getReversal(ref)) ?? undefined, input.report);
  if (next === null) return unchanged;
  yield* port.putReversal(ref, next, now);
  return { applied: true, ...(yield* settlePayment(ref, input.description, now)) };
}

// Invariant: a payment's bucket gives up (or gets back) exactly what its reversal claims beyond (or
// below) what was claimed before, with one ledger row, never below zero and never the credits held
// by requests in flight (their releases pay what is owed); expired credits are written off first.
export function* settlePayment(
  ref: string,
  description: string,
  now: number,
): LedgerStep<{ clawedBack: number; reinstated: number; organizationId: string | null }> {
  const payment = yield* port.getPayment(ref);
  if (payment === null) return { clawedBack: 0, reinstated: 0, organizationId: null };
  const reversal = yield* port.getReversal(ref);
  const target = reversal === null ? { amount: 0, credits: 0 } : creditsTakenBack(payment, reversal);
  const unchanged = { clawedBack: 0, reinstated: 0, organizationId: payment.organizationId };
  if (target.credits === payment.refundedCredits) return unchanged;
  yield* port.setPaymentRefund(ref, target);
  // Credits past their expiry are not the customer's any more: written off as expiry, not refunded.
  yield* port.writeOffExpired(payment.organizationId, now);
  const bucket = yield* port.settlementBucket(payment.organizationId, payment.bucketId, now);
  const { delta, owed } = settleBucket({ previous: payment.refundedCredits, target: target.credits, ...bucket });
  yield* port.adjustBucket(payment.bucketId, delta, owed);
  if (delta !== 0) {
    const row = delta < 0 ? { type: "refund" as const, description } : { type: "adjustment" as const, description: REINSTATED };
    yield* port.appendLedger({ organizationId: payment.organizationId, amount: delta, bucketId: payment.bucketId, createdAt: now, ...row });
  }
  return { clawedBack: Math.max(-delta, 0), reinstated: Math.max(delta, 0), organizationId: payment.organizationId };
}
