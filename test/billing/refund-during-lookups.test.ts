import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { CreditsSpentMeanwhile, type Store } from "../../src/db/store";
import { newId } from "../../src/lib/ids";
import { FakeClock } from "../../src/lib/clock";
import { completeLocalOrder } from "../../src/modules/billing/service";
import { openStore } from "../../src/services";
import {
  addProduct,
  ageReservations,
  createOrganization,
  createTestContext,
  createTestDatabase,
  json,
  ledgerSum,
  openTestStore,
  packOrder,
  queryRows,
  rowReservingKey,
  type TestContext,
} from "../support/context";

// A refund while look-ups hold credits of the refunded bucket: the free credits go at once; of the
// held ones, those a look-up spends are usage, and those it gives back go to the refund, never
// back to the customer. (PostgreSQL holds the credits of capped keys only, in reservation rows;
// other keys' look-ups hold them in memory, where the refund takes them too: see the last describe.)
const PRICE = 1000;

async function buyPack(store: Store, clock: FakeClock, organizationId: string, credits: number): Promise<string> {
  const id = newId("ord", clock.now());
  await store.createOrder(packOrder({ id, organizationId, credits, amount: PRICE, now: clock.now() }));
  expect((await completeLocalOrder({ store, clock }, id)).applied).toBe(true);
  return id;
}

async function expectInvariant(store: Store, organizationId: string, now: number): Promise<void> {
  const balance = await store.getBalance(organizationId, now);
  expect(await ledgerSum(store, organizationId)).toBe(balance.available + balance.reserved);
  const [negative] = await queryRows<{ n: number }>(store, "SELECT CAST(count(*) AS INTEGER) AS n FROM credit_buckets WHERE remaining < 0");
  expect(negative!.n).toBe(0);
}

async function ledgerAmounts(store: Store, organizationId: string, type: "refund" | "usage"): Promise<number> {
  const page = await store.listTransactions(organizationId, { limit: 100, types: [type] });
  return page.items.reduce((sum, item) => sum + item.amount, 0);
}

describe("a refund while look-ups hold credits of the refunded pack", () => {
  let store: Store;
  let clock: FakeClock;
  let organizationId: string;
  let orderId: string;
  let keyId: string | null;

  beforeEach(async () => {
    store = await openTestStore();
    clock = new FakeClock();
    organizationId = (await store.createOrganization({ name: "Org", now: clock.now() })).id;
    orderId = await buyPack(store, clock, organizationId, 10);
    keyId = await rowReservingKey(store, organizationId, clock.now());
  });
  afterEach(async () => {
    await store.close();
  });

  async function hold(count: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      const reservation = await store.reserveCredits({ organizationId, amount: 1, keyId, requestId: newId("req", clock.now()), now: clock.now() });
      if (!reservation.ok) throw new Error("expected the reservation to succeed");
      ids.push(reservation.reservationId);
    }
    return ids;
  }

  /** Credits that expire before the pack's, so a hold takes them first. */
  function grantSoonest(amount: number) {
    return store.grantCredits({
      organizationId,
      source: "grant",
      type: "grant",
      amount,
      expiresAt: clock.now() + 3_600_000,
      description: "soonest",
      now: clock.now(),
    });
  }

  function refund(amount: number) {
    clock.advance(1000);
    return store.refundPayment({ event: null, ref: orderId, refundedAmount: amount, description: "Refund", now: clock.now() });
  }

  test("a full refund takes the free credits at once and the held ones as the look-ups end unbilled: nothing is spendable again", async () => {
    const held = await hold(3);
    expect(await refund(PRICE)).toMatchObject({ applied: true, clawedBack: 7 });
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 0, reserved: 3 });
    await expectInvariant(store, organizationId, clock.now());

    clock.advance(1000);
    for (const id of held) expect(await store.releaseReservation(id, clock.now())).toBe(true);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 0, reserved: 0 });
    expect(await ledgerAmounts(store, organizationId, "refund")).toBe(-10);
    expect(await store.reserveCredits({ organizationId, amount: 1, keyId, requestId: "req_after", now: clock.now() })).toEqual({ ok: false, available: 0 });
    await expectInvariant(store, organizationId, clock.now());
  });

  test("a batch that keeps part of its hold after a full refund: what it gives back pays the refund, what it keeps is usage", async () => {
    const reservation = await store.reserveCredits({ organizationId, amount: 4, keyId, requestId: "req_batch", now: clock.now() });
    if (!reservation.ok) throw new Error("expected the reservation to succeed");
    expect(await refund(PRICE)).toMatchObject({ applied: true, clawedBack: 6 });
    clock.advance(1000);
    expect(await store.shrinkReservation(reservation.reservationId, 1, clock.now())).toBe(true);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 0, reserved: 1 });
    expect(await ledgerAmounts(store, organizationId, "refund")).toBe(-9);
    expect(await store.commitReservation(reservation.reservationId, { gtin: null, description: "batch", now: clock.now(), items: 1 })).toBe(true);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 0, reserved: 0 });
    await expectInvariant(store, organizationId, clock.now());
  });

  test("look-ups that commit after a full refund are usage, and the refund takes what the others give back", async () => {
    const [first, second, third] = await hold(3);
    await refund(PRICE);
    clock.advance(1000);
    expect(await store.commitReservation(first!, { gtin: null, description: "usage", now: clock.now() })).toBe(true);
    expect(await store.releaseReservation(second!, clock.now())).toBe(true);
    expect(await store.commitReservation(third!, { gtin: null, description: "usage", now: clock.now() })).toBe(true);
    expect(await ledgerAmounts(store, organizationId, "usage")).toBe(-2);
    expect(await ledgerAmounts(store, organizationId, "refund")).toBe(-8);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 0, reserved: 0 });
    await expectInvariant(store, organizationId, clock.now());
  });

  test("a partial refund takes its share only: what the look-ups give back beyond it is spendable again", async () => {
    const held = await hold(8);
    expect(await refund(PRICE / 2)).toMatchObject({ clawedBack: 2 });
    clock.advance(1000);
    for (const id of held.slice(0, 3)) expect(await store.commitReservation(id, { gtin: null, description: "usage", now: clock.now() })).toBe(true);
    for (const id of held.slice(3)) expect(await store.releaseReservation(id, clock.now())).toBe(true);
    expect(await ledgerAmounts(store, organizationId, "refund")).toBe(-5);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 2, reserved: 0 });
    await expectInvariant(store, organizationId, clock.now());
  });

  test("a hold across two buckets, one refunded: its release pays the refund from that bucket's share alone, on a row naming it", async () => {
    const [pack] = (await store.getBalance(organizationId, clock.now())).buckets;
    await grantSoonest(2);
    const reservation = await store.reserveCredits({ organizationId, amount: 5, keyId, requestId: "req_two_buckets", now: clock.now() });
    if (!reservation.ok) throw new Error("expected the reservation to succeed");
    expect(await refund(PRICE)).toMatchObject({ applied: true, clawedBack: 7 });
    clock.advance(1000);
    expect(await store.releaseReservation(reservation.reservationId, clock.now())).toBe(true);
    const [paid] = (await store.listTransactions(organizationId, { limit: 1, types: ["refund"] })).items;
    expect(paid).toMatchObject({ amount: -3, bucketId: pack!.id });
    expect(await ledgerAmounts(store, organizationId, "refund")).toBe(-10);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 2, reserved: 0 });
    await expectInvariant(store, organizationId, clock.now());
  });

  test("a hold across two buckets, one refunded, shrunk by a partial commit: what it gives back pays the refund", async () => {
    await grantSoonest(2);
    const reservation = await store.reserveCredits({ organizationId, amount: 5, keyId, requestId: "req_two_buckets", now: clock.now() });
    if (!reservation.ok) throw new Error("expected the reservation to succeed");
    expect(await refund(PRICE)).toMatchObject({ applied: true, clawedBack: 7 });
    clock.advance(1000);
    expect(await store.shrinkReservation(reservation.reservationId, 1, clock.now())).toBe(true);
    expect(await ledgerAmounts(store, organizationId, "refund")).toBe(-10);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 1, reserved: 1 });
    expect(await store.commitReservation(reservation.reservationId, { gtin: null, description: "batch", now: clock.now(), items: 1 })).toBe(true);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 1, reserved: 0 });
    await expectInvariant(store, organizationId, clock.now());
  });

  test("a hold across two refunded packs pays both refunds on its release, in one row naming no single bucket", async () => {
    const second = await buyPack(store, clock, organizationId, 10);
    const reservation = await store.reserveCredits({ organizationId, amount: 15, keyId, requestId: "req_two_packs", now: clock.now() });
    if (!reservation.ok) throw new Error("expected the reservation to succeed");
    await refund(PRICE);
    await store.refundPayment({ event: null, ref: second, refundedAmount: PRICE, description: "Refund", now: clock.now() });
    clock.advance(1000);
    expect(await store.releaseReservation(reservation.reservationId, clock.now())).toBe(true);
    const [paid] = (await store.listTransactions(organizationId, { limit: 1, types: ["refund"] })).items;
    expect(paid).toMatchObject({ amount: -15, bucketId: null });
    expect(await ledgerAmounts(store, organizationId, "refund")).toBe(-20);
    await expectInvariant(store, organizationId, clock.now());
  });

  test("a refund writes off its own organization's expired credits first, never another organization's", async () => {
    const other = (await store.createOrganization({ name: "Other", now: clock.now() })).id;
    await store.grantCredits({
      organizationId: other,
      source: "grant",
      type: "grant",
      amount: 4,
      expiresAt: clock.now() + 500,
      description: "soon",
      now: clock.now(),
    });
    expect(await refund(PRICE)).toMatchObject({ applied: true });
    const expiryOf = async (id: string) => (await store.listTransactions(id, { limit: 10, types: ["expiry"] })).items.map((row) => row.amount);
    expect(await expiryOf(other)).toEqual([]);
    expect(await store.expireBuckets(clock.now())).toBe(1);
    expect(await expiryOf(other)).toEqual([-4]);
  });

  test("a second refund event for the same amount takes nothing more, held credits or not", async () => {
    const held = await hold(3);
    await refund(PRICE);
    expect(await refund(PRICE)).toMatchObject({ applied: false, clawedBack: 0 });
    for (const id of held) await store.releaseReservation(id, clock.now());
    expect(await ledgerAmounts(store, organizationId, "refund")).toBe(-10);
    await expectInvariant(store, organizationId, clock.now());
  });
});

describe("a refund during look-ups, then a crash", () => {
  test("the restarted service gives the refund what the lost look-ups held", async () => {
    const database = await createTestDatabase();
    const clock = new FakeClock();
    const crashed = await openStore(database.url);
    let restarted: Store | null = null;
    try {
      const { id: organizationId } = await crashed.createOrganization({ name: "Org", now: clock.now() });
      const orderId = await buyPack(crashed, clock, organizationId, 10);
      for (const requestId of ["req_1", "req_2", "req_3"])
        expect((await crashed.reserveCredits({ organizationId, amount: 1, keyId: null, requestId, now: clock.now() })).ok).toBe(true);
      await crashed.refundPayment({ event: null, ref: orderId, refundedAmount: PRICE, description: "Refund", now: clock.now() });
      await crashed.close();

      // Past the stale-reservation age, so PostgreSQL's start-up sweep gives the reservations back too.
      clock.advance(120_000);
      restarted = await openStore(database.url);
      await ageReservations(restarted, 120_000);
      await restarted.recoverInFlightWork(clock.now());
      expect(await restarted.getBalance(organizationId, clock.now())).toMatchObject({ available: 0, reserved: 0 });
      expect(await ledgerAmounts(restarted, organizationId, "refund")).toBe(-10);
      await expectInvariant(restarted, organizationId, clock.now());
    } finally {
      await crashed.close();
      await restarted?.close();
      await database.drop();
    }
  });
});

describe("a refund racing the look-ups' releases and commits", () => {
  test("settles every credit once: after a full refund nothing is available, held or owed", async () => {
    const database = await createTestDatabase();
    const clock = new FakeClock();
    const serving = await openStore(database.url);
    // PostgreSQL: the webhook reaches another instance. SQLite: one serve per file, so the same one.
    const refunding = serving.dialect === "postgres" ? await openStore(database.url) : serving;
    try {
      for (let round = 0; round < 10; round++) {
        const { id: organizationId } = await serving.createOrganization({ name: `Org ${round}`, now: clock.now() });
        const orderId = await buyPack(serving, clock, organizationId, 10);
        // Odd rounds: PostgreSQL reservation rows; even rounds: holds in memory (every hold, on SQLite).
        const keyId = round % 2 === 1 ? await rowReservingKey(serving, organizationId, clock.now()) : null;
        const held: string[] = [];
        for (let i = 0; i < 3; i++) {
          const reservation = await serving.reserveCredits({ organizationId, amount: 1, keyId, requestId: newId("req", clock.now()), now: clock.now() });
          if (reservation.ok) held.push(reservation.reservationId);
        }
        clock.advance(10);
        const now = clock.now();
        const [, , committed] = await Promise.all([
          refunding.refundPayment({ event: null, ref: orderId, refundedAmount: PRICE, description: "Refund", now }),
          serving.releaseReservation(held[0]!, now),
          serving
            .commitReservation(held[1]!, { gtin: null, description: "usage", now })
            .catch((error: unknown) => (error instanceof CreditsSpentMeanwhile ? false : Promise.reject(error))),
          serving.releaseReservation(held[2]!, now),
        ]);
        // Credits held in the database are the look-up's whatever the refund does; credits held in a
        // PostgreSQL instance's memory are the refund's when it comes first, and the debit is refused.
        if (serving.dialect === "sqlite" || keyId !== null) expect(committed).toBe(true);
        const usage = await ledgerAmounts(serving, organizationId, "usage");
        expect(usage).toBe(committed ? -1 : 0);
        expect(await ledgerAmounts(serving, organizationId, "refund")).toBe(-10 - usage);
        expect(await serving.getBalance(organizationId, now)).toMatchObject({ available: 0, reserved: 0 });
        await expectInvariant(serving, organizationId, now);
      }
    } finally {
      await serving.close();
      await refunding.close();
      await database.drop();
    }
  });
});

describe("look-ups held open over HTTP during a full refund", () => {
  const STALE = "00036000291452";
  const FRESH = "04006381333931";
  let context: TestContext;

  beforeEach(async () => {
    context = await createTestContext();
  });
  afterEach(async () => {
    await context.close();
  });

  /** Three look-ups of `path`, held between their reservation and their product read until `open()`. */
  async function heldOpen(path: string, auth: Record<string, string>) {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const lookUp = context.store.findProductWithOffers.bind(context.store);
    let started = 0;
    context.store.findProductWithOffers = async (gtin) => {
      started++;
      await gate;
      return lookUp(gtin);
    };
    const inFlight = [1, 2, 3].map(() => context.request(path, { headers: auth }));
    while (started < 3) await Bun.sleep(1);
    return { inFlight, open };
  }

  test("billed ones are usage on SQLite; on PostgreSQL, where they hold their credits in memory, the refund took them: 402, nothing billed", async () => {
    await addProduct(context, FRESH, [{ merchantId: "m-a", price: 500, ageMs: 60_000 }]);
    const org = await createOrganization(context);
    const orderId = await buyPack(context.store, context.clock, org.organizationId, 10);
    const { inFlight, open } = await heldOpen(`/api/v1/products/${FRESH}/price`, org.auth);

    await context.store.refundPayment({ event: null, ref: orderId, refundedAmount: PRICE, description: "Refund", now: context.clock.now() });
    open();
    const billedOnSQLite = context.store.dialect === "sqlite";
    for (const response of await Promise.all(inFlight)) {
      const body = await json(response);
      expect(response.status).toBe(billedOnSQLite ? 200 : 402);
      // A billed answer reports the balance its look-up was admitted with; the 402, what the debit found.
      if (billedOnSQLite) expect(body.meta).toMatchObject({ creditsConsumed: 1, reason: "fresh-offer" });
      else
        expect(body).toMatchObject({
          type: expect.stringContaining("insufficient-credits"),
          meta: { reason: "insufficient-credits", creditsConsumed: 0, creditsRemaining: 0 },
        });
    }
    expect(await ledgerAmounts(context.store, org.organizationId, "usage")).toBe(billedOnSQLite ? -3 : 0);
    expect(await ledgerAmounts(context.store, org.organizationId, "refund")).toBe(billedOnSQLite ? -7 : -10);
    expect(await context.store.getBalance(org.organizationId, context.clock.now())).toMatchObject({ available: 0, reserved: 0 });
    await expectInvariant(context.store, org.organizationId, context.clock.now());
  });

  test("end unbilled (stale data) without giving the refunded credits back: the next billed look-up is 402", async () => {
    await addProduct(context, STALE, [{ merchantId: "m-a", price: 500, ageMs: 48 * 3_600_000 }]);
    await addProduct(context, FRESH, [{ merchantId: "m-a", price: 500, ageMs: 60_000 }]);
    const org = await createOrganization(context);
    const orderId = await buyPack(context.store, context.clock, org.organizationId, 10);
    const { inFlight, open } = await heldOpen(`/api/v1/products/${STALE.slice(2)}/price`, org.auth);

    await context.store.refundPayment({ event: null, ref: orderId, refundedAmount: PRICE, description: "Refund", now: context.clock.now() });
    open();
    for (const response of await Promise.all(inFlight)) {
      expect(response.status).toBe(200);
      expect((await json(response)).meta).toMatchObject({ reason: "stale-data", creditsConsumed: 0, creditsRemaining: 0 });
    }
    const billed = await context.request(`/api/v1/products/${FRESH.slice(1)}/price`, { headers: org.auth });
    expect(billed.status).toBe(402);
    expect(await context.store.getBalance(org.organizationId, context.clock.now())).toMatchObject({ available: 0, reserved: 0 });
    await expectInvariant(context.store, org.organizationId, context.clock.now());
  });
});
