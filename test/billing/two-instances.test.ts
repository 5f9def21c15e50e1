import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { NewOrder } from "../../src/db/billing/records";
import { BILLED_REASON, DAY_MS, HOUR_MS, hourStartOf, type Store } from "../../src/db/store";
import type { FakeClock } from "../../src/lib/clock";
import { PostgresStore } from "../../src/db/postgres-store";
import { ledgerSum, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

// Two stores on one database, as two instances (or an instance and the CLI) serving the same
// organization at once: each rule below is a conditional write, a row lock or a unique constraint in
// the database, so it holds across connections (on PostgreSQL, across processes).
let stores: TwoStores;
let one: Store;
let two: Store;
let clock: FakeClock;
let organizationId: string;

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  ({ one, two, clock, organizationId } = stores);
  // Rows both instances write at once; a credit lease (test/billing/credit-leases.postgres.test.ts)
  // would hold part of the credits these tests count.
  for (const store of [one, two]) if (store instanceof PostgresStore) store.leases.policy = { ...store.leases.policy, minCredits: Number.POSITIVE_INFINITY };
});

afterEach(() => stores.close());

function order(id: string): NewOrder {
  return {
    id,
    organizationId,
    userId: null,
    kind: "pack",
    itemId: "pack-1k",
    itemName: "1 000 credits",
    credits: 1000,
    interval: null,
    validityDays: null,
    amount: 900,
    currency: "EUR",
    provider: "local",
    providerRef: null,
    successUrl: null,
    cancelUrl: null,
    createdAt: clock.now(),
  };
}

function completion(orderId: string, eventId: string | null = null) {
  return {
    orderId,
    now: clock.now(),
    event: eventId === null ? null : { id: eventId, type: "checkout.session.completed" },
    grant: { source: "pack" as const, type: "purchase" as const, amount: 1000, expiresAt: null, description: "1 000 credits" },
    payment: { ref: orderId, amount: 900, currency: "EUR" },
    subscription: null,
    invoice: { description: "1 000 credits", amount: 900, currency: "EUR", periodStart: null, periodEnd: null },
  };
}

describe("two instances on one database", () => {
  test("an Idempotency-Key claimed by both at once is claimed by exactly one", async () => {
    const now = clock.now();
    for (let i = 0; i < 10; i++) {
      const claim = { scope: "org POST /x", keyHash: `key-${i}`, requestHash: "body", now, ttlMs: 86_400_000, abandonAfterMs: 60_000 };
      const results = await Promise.all([one.claimIdempotencyKey(claim), two.claimIdempotencyKey(claim)]);
      expect(results.filter((result) => result.claimed)).toHaveLength(1);
    }
  });

  test("an order completed by both at once, and a provider event delivered to both, grant once", async () => {
    await one.createOrder(order("chk_race"));
    const completed = await Promise.all([one.completeOrder(completion("chk_race", "evt_race")), two.completeOrder(completion("chk_race", "evt_race"))]);
    expect(completed.filter((result) => result.applied)).toHaveLength(1);
    const paid = { organizationId, grant: completion("x").grant, now: clock.now() };
    const granted = await Promise.all([
      one.applyPaidGrant({ ...paid, event: { id: "evt_invoice", type: "invoice.paid" }, payment: { ref: "in_1", amount: 900, currency: "EUR" } }),
      two.applyPaidGrant({ ...paid, event: { id: "evt_invoice", type: "invoice.paid" }, payment: { ref: "in_1", amount: 900, currency: "EUR" } }),
    ]);
    expect(granted.filter((result) => result.applied)).toHaveLength(1);
    const balance = await one.getBalance(organizationId, clock.now());
    expect(balance.available).toBe(2000);
    expect(await ledgerSum(two, organizationId)).toBe(2000);
  });

  test("invoices numbered by both at once have no gaps and no duplicates", async () => {
    const ids = Array.from({ length: 12 }, (_, i) => `chk_${i}`);
    for (const id of ids) await one.createOrder(order(id));
    await Promise.all(ids.map((id, i) => (i % 2 === 0 ? one : two).completeOrder(completion(id))));
    const invoices = (await two.listInvoices(organizationId, { limit: 50 })).items;
    expect(invoices.map((invoice) => invoice.number).sort()).toEqual(ids.map((_, i) => `INV-${String(i + 1).padStart(6, "0")}`));
  });

  test("a refund replayed on both at once claws back once, never more than the bucket holds", async () => {
    await one.createOrder(order("chk_refund"));
    await one.completeOrder(completion("chk_refund"));
    const spent = await one.reserveCredits({ organizationId, amount: 600, keyId: null, requestId: "req_spend", now: clock.now() });
    if (!spent.ok) throw new Error("expected the reservation to succeed");
    expect(await one.commitReservation(spent.reservationId, { gtin: null, description: "spent", now: clock.now() })).toBe(true);
    const refund = { event: null, ref: "chk_refund", refundedAmount: 900, description: "refund", now: clock.now() };
    const results = await Promise.all([one.refundPayment(refund), two.refundPayment(refund)]);
    expect(results.map((result) => result.clawedBack).sort((a, b) => a - b)).toEqual([0, 400]);
    expect((await two.getBalance(organizationId, clock.now())).available).toBe(0);
    expect(await ledgerSum(one, organizationId)).toBe(0);
  });

  test("look-ups billed by both at once are each counted once in the usage counters, whose credits equal the ledger's usage rows", async () => {
    await one.grantCredits({ organizationId, source: "grant", type: "grant", amount: 1000, expiresAt: null, description: "credits", now: clock.now() });
    const lookUps = 20;
    const billOn = async (store: Store, index: number) => {
      const reservation = await store.reserveCredits({ organizationId, amount: 3, keyId: null, requestId: `req_${index}`, now: clock.now() });
      if (!reservation.ok) throw new Error("expected the reservation to succeed");
      return store.commitReservation(reservation.reservationId, { gtin: "04006381333931", description: "Price look-up", now: clock.now() });
    };
    const committed = await Promise.all(Array.from({ length: lookUps }, (_, index) => billOn(index % 2 === 0 ? one : two, index)));
    expect(committed.every(Boolean)).toBe(true);
    const unbilled = { organizationId, keyId: "", hourStart: hourStartOf(clock.now()), reason: "stale-data", requests: 2 };
    await Promise.all([one.addUsageCounts([unbilled]), two.addUsageCounts([unbilled])]);

    const usageRows = (await one.listTransactions(organizationId, { limit: 100, types: ["usage"] })).items;
    expect(usageRows.reduce((sum, row) => sum - row.amount, 0)).toBe(lookUps * 3);
    for (const [store, periodMs] of [
      [one, HOUR_MS],
      [two, DAY_MS],
    ] as const) {
      const totals = await store.usageTotals(organizationId, { from: 0, to: clock.now() + DAY_MS, periodMs, byKey: true });
      expect(totals.map(({ reason, requests, credits }) => ({ reason, requests, credits }))).toEqual([
        { reason: BILLED_REASON, requests: lookUps, credits: lookUps * 3 },
        { reason: "stale-data", requests: 4, credits: 0 },
      ]);
    }
  });
});
