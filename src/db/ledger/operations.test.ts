import { describe, expect, test } from "bun:test";
import type { Order, SubscriptionRecord } from "../billing/records";
import type { Bucket } from "../store";
import { applyPaidGrant, completeOrder, renewSubscription, reversePayment } from "./operations";
import { invoiceNumber, runSync, type LedgerEntry, type LedgerPort, type PaymentRow } from "./port";
import type { Reversal } from "./reversals";

/** The port over plain maps: what the operations decide, without a database. */
function fakeLedger() {
  const events = new Set<string>();
  const orders = new Map<string, Order>();
  const buckets = new Map<string, Bucket & { owed: number }>();
  const ledger: LedgerEntry[] = [];
  const payments = new Map<string, PaymentRow>();
  const reversals = new Map<string, Reversal>();
  const subscriptions = new Map<string, SubscriptionRecord>();
  const invoices: string[] = [];
  const emitted: string[] = [];
  const locked: string[] = [];
  const port: LedgerPort = {
    claimEvent: (event) => (event === null ? true : !events.has(event.id) && Boolean(events.add(event.id))),
    lockPayment: (ref) => void locked.push(ref),
    getOrder: (id) => orders.get(id) ?? null,
    completePendingOrder(id, now) {
      const order = orders.get(id);
      if (order?.status !== "pending") return null;
      const completed = { ...order, status: "completed" as const, completedAt: now };
      orders.set(id, completed);
      return completed;
    },
    insertBucket: (bucket) => void buckets.set(bucket.id, { ...bucket, owed: 0 }),
    appendLedger(entry) {
      ledger.push(entry);
      return ledger.reduce((sum, row) => sum + row.amount, 0);
    },
    emit: (written) => void emitted.push(...written.map((event) => event.type)),
    insertPayment(organizationId, bucket, payment) {
      if (!payments.has(payment.ref))
        payments.set(payment.ref, {
          ref: payment.ref,
          organizationId,
          bucketId: bucket.id,
          credits: bucket.granted,
          amount: payment.amount,
          refundedAmount: 0,
          refundedCredits: 0,
        });
    },
    insertSubscription: (subscription) => {
      const record = { ...subscription, canceledAt: null };
      subscriptions.set(record.id, record);
      return record;
    },
    insertInvoice(organizationId, input, now) {
      invoices.push(invoiceNumber(invoices.length + 1));
      return { id: `inv_${invoices.length}`, organizationId, number: invoices.at(-1)!, status: "paid", ...input, createdAt: now, paidAt: now };
    },
    advancePeriod(input) {
      const subscription = subscriptions.get(input.subscriptionId);
      if (subscription?.status !== "active" || subscription.currentPeriodEnd !== input.expectedPeriodEnd) return null;
      const moved = { ...subscription, currentPeriodStart: input.periodStart, currentPeriodEnd: input.periodEnd };
      subscriptions.set(moved.id, moved);
      return moved;
    },
    getPayment: (ref) => payments.get(ref) ?? null,
    getReversal: (ref) => reversals.get(ref) ?? null,
    putReversal: (ref, reversal) => void reversals.set(ref, reversal),
    setPaymentRefund(ref, refunded) {
      const payment = payments.get(ref)!;
      payments.set(ref, { ...payment, refundedAmount: refunded.amount, refundedCredits: refunded.credits });
    },
    writeOffExpired() {},
    settlementBucket(_, bucketId) {
      const bucket = buckets.get(bucketId)!;
      const taken = -ledger
        .filter((row) => row.bucketId === bucketId && (row.type === "refund" || row.type === "adjustment"))
        .reduce((sum, row) => sum + row.amount, 0);
      return { free: bucket.remaining, held: 0, owed: bucket.owed, taken, expired: false };
    },
    adjustBucket(bucketId, delta, owed) {
      const bucket = buckets.get(bucketId)!;
      buckets.set(bucketId, { ...bucket, remaining: bucket.remaining + delta, owed });
    },
  };
  return { port, orders, buckets, ledger, payments, subscriptions, invoices, emitted, locked };
}

const order: Order = {
  id: "ord_1",
  organizationId: "org_1",
  userId: null,
  kind: "pack",
  itemId: "pack-1000",
  itemName: "1000 credits",
  credits: 1000,
  interval: null,
  validityDays: null,
  amount: 1000,
  currency: "EUR",
  status: "pending",
  provider: "local",
  providerRef: null,
  successUrl: null,
  cancelUrl: null,
  createdAt: 1,
  completedAt: null,
};
const credits = { source: "pack" as const, type: "purchase" as const, amount: 1000, expiresAt: null, description: "1000 credits" };
const invoice = { description: "1000 credits", amount: 1000, currency: "EUR", periodStart: null, periodEnd: null };

/** A 1000-credit invoice paid (payment `in_1`, event `evt_1`) for org_1. */
function paidInvoice(fake: ReturnType<typeof fakeLedger>) {
  return runSync(
    applyPaidGrant({
      event: { id: "evt_1", type: "invoice.paid" },
      organizationId: "org_1",
      grant: credits,
      payment: { ref: "in_1", amount: 1000, currency: "EUR" },
      now: 3,
    }),
    fake.port,
  );
}

describe("completing an order", () => {
  test("grants, records the payment and invoices once; a second completion writes nothing", () => {
    const fake = fakeLedger();
    fake.orders.set(order.id, order);
    const input = {
      orderId: order.id,
      now: 5,
      event: null,
      grant: credits,
      payment: { ref: "pi_1", amount: 1000, currency: "EUR" },
      subscription: null,
      invoice,
    };
    const first = runSync(completeOrder(input), fake.port);
    expect(first.applied).toBe(true);
    expect(first.bucket!.remaining).toBe(1000);
    expect(first.invoice!.number).toBe("INV-000001");
    expect(fake.emitted).toEqual(["credits.granted", "invoice.created"]);
    const second = runSync(completeOrder(input), fake.port);
    expect(second).toMatchObject({ applied: false, bucket: null, invoice: null });
    expect(second.order!.status).toBe("completed");
    expect(fake.ledger).toHaveLength(1);
  });

  test("a refund reported before the payment was recorded is settled by the grant", () => {
    const fake = fakeLedger();
    fake.orders.set(order.id, order);
    const early = runSync(reversePayment({ event: null, ref: "pi_1", report: { refundedAmount: 250 }, description: "Refund", now: 2 }), fake.port);
    expect(early).toEqual({ applied: true, clawedBack: 0, reinstated: 0, organizationId: null });
    const done = runSync(
      completeOrder({
        orderId: order.id,
        now: 5,
        event: null,
        grant: credits,
        payment: { ref: "pi_1", amount: 1000, currency: "EUR" },
        subscription: null,
        invoice: null,
      }),
      fake.port,
    );
    expect(fake.buckets.get(done.bucket!.id)!.remaining).toBe(750);
    expect(fake.ledger.map((row) => row.amount)).toEqual([1000, -250]);
  });
});

describe("what an order's completion writes", () => {
  test("a paid pack locks its payment first; a redelivered event completes nothing", () => {
    const fake = fakeLedger();
    fake.orders.set(order.id, order);
    const input = {
      orderId: order.id,
      now: 5,
      event: { id: "evt_1", type: "checkout.session.completed" },
      grant: credits,
      payment: { ref: "pi_1", amount: 1000, currency: "EUR" },
      subscription: null,
      invoice: null,
    };
    expect(runSync(completeOrder(input), fake.port).applied).toBe(true);
    expect(fake.locked).toEqual(["pi_1"]);
    fake.orders.set(order.id, order);
    expect(runSync(completeOrder(input), fake.port)).toMatchObject({ applied: false, bucket: null });
    expect(fake.ledger).toHaveLength(1);
  });

  test("an order without payment locks nothing and records no payment; one without a grant records none either", () => {
    const fake = fakeLedger();
    fake.orders.set(order.id, order);
    const free = runSync(
      completeOrder({ orderId: order.id, now: 5, event: null, grant: credits, payment: null, subscription: null, invoice: null }),
      fake.port,
    );
    expect(free.bucket!.granted).toBe(1000);
    expect(free.invoice).toBeNull();
    expect(fake.invoices).toEqual([]);
    expect(fake.locked).toEqual([]);
    expect(fake.payments.size).toBe(0);
    fake.orders.set("ord_2", { ...order, id: "ord_2" });
    const ungranted = runSync(
      completeOrder({
        orderId: "ord_2",
        now: 6,
        event: null,
        grant: null,
        payment: { ref: "pi_2", amount: 1000, currency: "EUR" },
        subscription: null,
        invoice: null,
      }),
      fake.port,
    );
    expect(ungranted).toMatchObject({ applied: true, bucket: null });
    expect(fake.payments.size).toBe(0);
  });

  test("a subscription order starts its subscription (monthly unless it says otherwise) and invoices it", () => {
    const fake = fakeLedger();
    const plan: Order = { ...order, id: "ord_3", kind: "subscription", itemId: "plan-1", itemName: "Plan", interval: null };
    fake.orders.set(plan.id, plan);
    const done = runSync(
      completeOrder({ orderId: plan.id, now: 7, event: null, grant: null, payment: null, subscription: { periodEnd: 100 }, invoice }),
      fake.port,
    );
    expect(done.subscription).toMatchObject({
      organizationId: "org_1",
      orderId: "ord_3",
      planId: "plan-1",
      planName: "Plan",
      creditsPerPeriod: 1000,
      interval: "month",
      amount: 1000,
      currency: "EUR",
      status: "active",
      startedAt: 7,
      currentPeriodStart: 7,
      currentPeriodEnd: 100,
    });
    expect(done.invoice).toMatchObject({ orderId: "ord_3", subscriptionId: done.subscription!.id, amount: 1000 });
    fake.orders.set("ord_4", { ...plan, id: "ord_4", interval: "year" });
    expect(
      runSync(completeOrder({ orderId: "ord_4", now: 8, event: null, grant: null, payment: null, subscription: { periodEnd: 200 }, invoice: null }), fake.port)
        .subscription!.interval,
    ).toBe("year");
  });
});

describe("paid grants and renewals", () => {
  test("a redelivered provider event grants nothing", () => {
    const fake = fakeLedger();
    const input = {
      event: { id: "evt_1", type: "invoice.paid" },
      organizationId: "org_1",
      grant: credits,
      payment: { ref: "in_1", amount: 1000, currency: "EUR" },
      now: 3,
    };
    expect(runSync(applyPaidGrant(input), fake.port).applied).toBe(true);
    expect(runSync(applyPaidGrant(input), fake.port)).toEqual({ applied: false, bucket: null });
    expect(fake.ledger).toHaveLength(1);
  });

  test("a period is renewed once: the second renewal finds its period end moved", () => {
    const fake = fakeLedger();
    fake.subscriptions.set("sub_1", {
      id: "sub_1",
      organizationId: "org_1",
      orderId: "ord_1",
      planId: "p",
      planName: "P",
      creditsPerPeriod: 1000,
      interval: "month",
      amount: 1000,
      currency: "EUR",
      status: "active",
      startedAt: 0,
      currentPeriodStart: 0,
      currentPeriodEnd: 10,
      canceledAt: null,
      createdAt: 0,
    });
    const input = { subscriptionId: "sub_1", expectedPeriodEnd: 10, periodStart: 10, periodEnd: 20, grant: credits, invoice, now: 10 };
    const renewed = runSync(renewSubscription(input), fake.port);
    expect(renewed.applied).toBe(true);
    expect(fake.payments.get(renewed.invoice!.id)!.credits).toBe(1000);
    expect(renewed.invoice).toMatchObject({ orderId: null, subscriptionId: "sub_1", amount: 1000, description: "1000 credits" });
    expect(runSync(renewSubscription(input), fake.port)).toEqual({ applied: false, bucket: null, invoice: null });
  });
});

describe("reversals", () => {
  test("a refund claws back its share once, and an older report changes nothing", () => {
    const fake = fakeLedger();
    paidInvoice(fake);
    const refund = (amount: number) =>
      runSync(reversePayment({ event: null, ref: "in_1", report: { refundedAmount: amount }, description: "Refund", now: 4 }), fake.port);
    expect(refund(500)).toEqual({ applied: true, clawedBack: 500, reinstated: 0, organizationId: "org_1" });
    expect(refund(400)).toEqual({ applied: false, clawedBack: 0, reinstated: 0, organizationId: "org_1" });
    expect(fake.ledger.map((row) => row.amount)).toEqual([1000, -500]);
    expect(fake.ledger[1]).toMatchObject({ type: "refund", description: "Refund", bucketId: fake.ledger[0]!.bucketId });
  });

  test("a redelivered report changes nothing; a dispute won gives back what it took, as an adjustment", () => {
    const fake = fakeLedger();
    paidInvoice(fake);
    const dispute = (id: string, status: "open" | "won") =>
      runSync(
        reversePayment({
          event: { id, type: "charge.dispute.updated" },
          ref: "in_1",
          report: { dispute: { id: "dp_1", amount: 400, status } },
          description: "Disputed",
          now: 4,
        }),
        fake.port,
      );
    expect(dispute("evt_2", "open")).toEqual({ applied: true, clawedBack: 400, reinstated: 0, organizationId: "org_1" });
    expect(dispute("evt_2", "won")).toEqual({ applied: false, clawedBack: 0, reinstated: 0, organizationId: "org_1" });
    expect(dispute("evt_3", "won")).toEqual({ applied: true, clawedBack: 0, reinstated: 400, organizationId: "org_1" });
    expect(fake.ledger.slice(1)).toMatchObject([
      { type: "refund", amount: -400, description: "Disputed" },
      { type: "adjustment", amount: 400, description: "Dispute won: withdrawn credits given back" },
    ]);
  });

  test("a refund of credits already spent takes nothing and writes no ledger row", () => {
    const fake = fakeLedger();
    const granted = paidInvoice(fake);
    fake.buckets.set(granted.bucket!.id, { ...fake.buckets.get(granted.bucket!.id)!, remaining: 0 });
    expect(runSync(reversePayment({ event: null, ref: "in_1", report: { refundedAmount: 1000 }, description: "Refund", now: 4 }), fake.port)).toEqual({
      applied: true,
      clawedBack: 0,
      reinstated: 0,
      organizationId: "org_1",
    });
    expect(fake.ledger).toHaveLength(1);
  });

  test("a report that leaves the credits claimed as they were writes no ledger row", () => {
    const fake = fakeLedger();
    paidInvoice(fake);
    runSync(reversePayment({ event: null, ref: "in_1", report: { refundedAmount: 1000 }, description: "Refund", now: 4 }), fake.port);
    const lost = runSync(
      reversePayment({ event: null, ref: "in_1", report: { dispute: { id: "dp_1", amount: 1000, status: "lost" } }, description: "Disputed", now: 5 }),
      fake.port,
    );
    expect(lost).toEqual({ applied: true, clawedBack: 0, reinstated: 0, organizationId: "org_1" });
    expect(fake.ledger).toHaveLength(2);
  });
});
