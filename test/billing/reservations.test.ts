import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { type Store, SYSTEM_USER_ID } from "../../src/db/store";
import { FakeClock } from "../../src/lib/clock";
import { createApiKey } from "../../src/modules/keys/service";
import { openStore } from "../../src/services";
import { ageReservations, createTestDatabase, ledgerSum, openTestStore } from "../support/context";

// The store's storage rules for credits, on whichever store the suite runs against: reservations
// are claimed once, never overdraw, and keep ledger sum = available + reserved at every step.
const HOUR = 3_600_000;
let store: Store;
let clock: FakeClock;
let organizationId: string;

beforeEach(async () => {
  store = await openTestStore();
  clock = new FakeClock();
  organizationId = (await store.createOrganization({ name: "Org", now: clock.now() })).id;
});

afterEach(async () => {
  await store.close();
});

function grant(amount: number, expiresAt: number | null = null) {
  return store.grantCredits({ organizationId, source: "grant", type: "grant", amount, expiresAt, description: "test", now: clock.now() });
}

function reserve(amount = 1, requestId = `req_${crypto.randomUUID()}`) {
  return store.reserveCredits({ organizationId, amount, keyId: null, requestId, now: clock.now() });
}

async function expectInvariant(target: Store = store): Promise<void> {
  const balance = await target.getBalance(organizationId, clock.now());
  expect(await ledgerSum(target, organizationId)).toBe(balance.available + balance.reserved);
  expect(balance.buckets.every((bucket) => bucket.remaining >= 0)).toBe(true);
}

function reservationId(reservation: Awaited<ReturnType<Store["reserveCredits"]>>): string {
  if (!reservation.ok) throw new Error("expected the reservation to succeed");
  return reservation.reservationId;
}

describe("credit reservations", () => {
  test("credits held by a reservation count as reserved, not available, until it ends", async () => {
    await grant(5);
    reservationId(await reserve(2));
    expect(await store.availableCredits(organizationId, clock.now())).toBe(3);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 3, reserved: 2 });
    await expectInvariant();
  });

  test("a committed reservation writes one usage row and cannot be committed or released again", async () => {
    const bucket = await grant(5);
    const id = reservationId(await reserve(1, "req_once"));
    const usage = { gtin: "04006381333931", description: "look-up", now: clock.now() };
    expect(await store.commitReservation(id, usage)).toBe(true);
    expect(await store.commitReservation(id, usage)).toBe(false);
    expect(await store.releaseReservation(id, clock.now())).toBe(false);
    const rows = (await store.listTransactions(organizationId, { limit: 10, types: ["usage"] })).items;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ amount: -1, balanceAfter: 4, bucketId: bucket.id, requestId: "req_once", gtin: "04006381333931" });
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 4, reserved: 0 });
    await expectInvariant();
  });

  test("commits that arrive together (group commit) each write one usage row, with balanceAfter in ledger order", async () => {
    await grant(30);
    const ids = [];
    for (let i = 0; i < 20; i++) ids.push(reservationId(await reserve(1, `req_group${i}`)));
    const usage = { gtin: null, description: "look-up", now: clock.now() };
    expect(await Promise.all(ids.map((id) => store.commitReservation(id, usage)))).toEqual(ids.map(() => true));
    expect(await Promise.all(ids.map((id) => store.commitReservation(id, usage)))).toEqual(ids.map(() => false));
    const rows = (await store.listTransactions(organizationId, { limit: 50, types: ["usage"] })).items;
    expect(rows).toHaveLength(20);
    expect(rows.map((row) => row.balanceAfter).sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => 10 + i));
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 10, reserved: 0 });
    await expectInvariant();
  });

  test("one reservation committed twice at once is debited once", async () => {
    await grant(5);
    const id = reservationId(await reserve(1, "req_twice"));
    const usage = { gtin: null, description: "look-up", now: clock.now() };
    const results = await Promise.all([store.commitReservation(id, usage), store.commitReservation(id, usage), store.commitReservation(id, usage)]);
    expect(results.filter(Boolean)).toHaveLength(1);
    expect((await store.listTransactions(organizationId, { limit: 10, types: ["usage"] })).items).toHaveLength(1);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 4, reserved: 0 });
    await expectInvariant();
  });

  test("one bad debit in a group commit fails alone: its neighbours are written", async () => {
    await grant(10);
    const first = reservationId(await reserve(1, "req_same"));
    const good = reservationId(await reserve(1, "req_good"));
    // A second usage row for one request id breaks a unique index: that debit is refused.
    const duplicate = reservationId(await reserve(1, "req_same"));
    const usage = { gtin: null, description: "look-up", now: clock.now() };
    const results = await Promise.allSettled([first, good, duplicate].map((id) => store.commitReservation(id, usage)));
    expect(results.map((result) => result.status)).toEqual(["fulfilled", "fulfilled", "rejected"]);
    const rows = (await store.listTransactions(organizationId, { limit: 10, types: ["usage"] })).items;
    expect(rows.map((row) => row.requestId).sort()).toEqual(["req_good", "req_same"]);
    expect(await store.releaseReservation(duplicate, clock.now())).toBe(true);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 8, reserved: 0 });
    await expectInvariant();
  });

  test("a released reservation gives its credits back and cannot be committed afterwards", async () => {
    await grant(3);
    const id = reservationId(await reserve(2));
    expect(await store.releaseReservation(id, clock.now())).toBe(true);
    expect(await store.commitReservation(id, { gtin: null, description: "late", now: clock.now() })).toBe(false);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 3, reserved: 0 });
    expect((await store.listTransactions(organizationId, { limit: 10, types: ["usage"] })).items).toHaveLength(0);
    await expectInvariant();
  });

  test("a reservation the balance cannot cover is refused with the available balance and changes nothing", async () => {
    await grant(2);
    expect(await reserve(3)).toEqual({ ok: false, available: 2 });
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 2, reserved: 0 });
    await expectInvariant();
  });

  test("a reservation larger than one bucket takes the soonest-expiring one first and its usage row names no single bucket", async () => {
    const never = await grant(5);
    await grant(2, clock.now() + HOUR);
    const id = reservationId(await reserve(3));
    await store.commitReservation(id, { gtin: null, description: "two buckets", now: clock.now() });
    // The spent bucket is history (not listed); the other gave the one credit the first lacked.
    const buckets = (await store.getBalance(organizationId, clock.now())).buckets;
    expect(buckets.map((bucket) => [bucket.id, bucket.remaining])).toEqual([[never.id, 4]]);
    const [usage] = (await store.listTransactions(organizationId, { limit: 1, types: ["usage"] })).items;
    expect(usage).toMatchObject({ amount: -3, bucketId: null, balanceAfter: 4 });
    await expectInvariant();
  });

  test("a partial commit (shrink, then commit) debits what is kept, from the soonest-expiring credits, and gives the rest back", async () => {
    const never = await grant(5);
    await grant(2, clock.now() + HOUR);
    const id = reservationId(await reserve(5));
    expect(await store.shrinkReservation(id, 3, clock.now())).toBe(true);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 4, reserved: 3 });
    await expectInvariant();
    expect(await store.commitReservation(id, { gtin: null, description: "batch", now: clock.now(), items: 3 })).toBe(true);
    const buckets = (await store.getBalance(organizationId, clock.now())).buckets;
    expect(buckets.map((bucket) => [bucket.id, bucket.remaining])).toEqual([[never.id, 4]]);
    const [usage] = (await store.listTransactions(organizationId, { limit: 1, types: ["usage"] })).items;
    expect(usage).toMatchObject({ amount: -3, balanceAfter: 4 });
    await expectInvariant();
  });

  test("a release racing a commit that waits for the group commit: exactly one wins, and the ledger says which", async () => {
    await grant(5);
    const id = reservationId(await reserve(2));
    const committing = store.commitReservation(id, { gtin: null, description: "late", now: clock.now() });
    const released = await store.releaseReservation(id, clock.now());
    const committed = await committing;
    expect(committed).toBe(!released);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: committed ? 3 : 5, reserved: 0 });
    expect((await store.listTransactions(organizationId, { limit: 10, types: ["usage"] })).items).toHaveLength(committed ? 1 : 0);
    await expectInvariant();
  });

  test("a shrink must keep some of the reservation and less than all of it: anything else is refused and changes nothing", async () => {
    await grant(5);
    const id = reservationId(await reserve(3));
    for (const keep of [0, 3, 4]) await expect(store.shrinkReservation(id, keep, clock.now())).rejects.toThrow(RangeError);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 2, reserved: 3 });
    await expectInvariant();
  });

  test("a reservation that is no longer held cannot be shrunk: nothing is given back twice", async () => {
    await grant(5);
    const released = reservationId(await reserve(3));
    expect(await store.releaseReservation(released, clock.now())).toBe(true);
    expect(await store.shrinkReservation(released, 1, clock.now())).toBe(false);
    const committed = reservationId(await reserve(2));
    expect(await store.commitReservation(committed, { gtin: null, description: "done", now: clock.now() })).toBe(true);
    expect(await store.shrinkReservation(committed, 1, clock.now())).toBe(false);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 3, reserved: 0 });
    await expectInvariant();
  });

  test("concurrent partial commits never overdraw and keep ledger sum = available + reserved", async () => {
    await grant(20);
    const reservations = await Promise.all(Array.from({ length: 10 }, () => reserve(4)));
    const held = reservations.filter((reservation) => reservation.ok).map(reservationId);
    expect(held).toHaveLength(5);
    await Promise.all(held.map((id) => store.shrinkReservation(id, 1, clock.now())));
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 15, reserved: 5 });
    expect(await Promise.all(held.map((id) => store.commitReservation(id, { gtin: null, description: "batch", now: clock.now() })))).toEqual(
      held.map(() => true),
    );
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 15, reserved: 0 });
    await expectInvariant();
  });

  test("concurrent reservations never take more than the balance", async () => {
    await grant(20);
    const results = await Promise.all(Array.from({ length: 50 }, () => reserve(1)));
    expect(results.filter((result) => result.ok)).toHaveLength(20);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 0, reserved: 20 });
    await expectInvariant();
  });

  test("an expired bucket a request holds is written off once the hold ends, never as a row of 0 credits", async () => {
    await grant(3, clock.now() + HOUR);
    const id = reservationId(await reserve(3));
    clock.advance(HOUR);
    await store.expireBuckets(clock.now());
    await store.releaseReservation(id, clock.now());
    await store.expireBuckets(clock.now());
    const rows = (await store.listTransactions(organizationId, { limit: 10, types: ["expiry"] })).items;
    expect(rows.map((row) => row.amount)).toEqual([-3]);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 0, reserved: 0 });
    await expectInvariant();
  });

  test("a key's monthly limit starts again at the month's turn, whatever the month before left in memory", async () => {
    await grant(5);
    await store.ensureSystemUser(clock.now());
    const { key } = await createApiKey(store, {
      organizationId,
      name: "capped",
      createdBy: SYSTEM_USER_ID,
      keyPrefix: "pps_",
      now: clock.now(),
      monthlyCreditLimit: 1,
    });
    const reserveWithKey = () => store.reserveCredits({ organizationId, amount: 1, keyId: key.id, requestId: `req_${crypto.randomUUID()}`, now: clock.now() });
    const spendOne = async () =>
      expect(await store.commitReservation(reservationId(await reserveWithKey()), { gtin: null, description: "capped", now: clock.now() })).toBe(true);
    clock.set(Date.parse("2026-11-30T23:59:59.000Z"));
    await spendOne();
    expect(await reserveWithKey()).toMatchObject({ ok: false, keyLimit: 1 });
    clock.set(Date.parse("2026-12-01T00:00:00.000Z"));
    await spendOne();
    expect(await reserveWithKey()).toMatchObject({ ok: false, keyLimit: 1 });
    await expectInvariant();
  });

  test("the stale sweep leaves reservations younger than the cutoff alone", async () => {
    await grant(2);
    const id = reservationId(await reserve(1));
    expect(await store.releaseStaleReservations(clock.now())).toBe(0);
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 1, reserved: 1 });
    expect(await store.commitReservation(id, { gtin: null, description: "still mine", now: clock.now() })).toBe(true);
    await expectInvariant();
  });
});

describe("expiry", () => {
  test("expired credits are written off once with an expiry row, even when two sweeps run at once", async () => {
    await grant(4, clock.now() + HOUR);
    await grant(1);
    clock.advance(2 * HOUR);
    const written = await Promise.all([store.expireBuckets(clock.now()), store.expireBuckets(clock.now())]);
    expect(written[0]! + written[1]!).toBe(1);
    const expiry = (await store.listTransactions(organizationId, { limit: 10, types: ["expiry"] })).items;
    expect(expiry).toHaveLength(1);
    expect(expiry[0]).toMatchObject({ amount: -4, balanceAfter: 1 });
    expect(await store.getBalance(organizationId, clock.now())).toMatchObject({ available: 1, reserved: 0 });
    await expectInvariant();
  });
});

describe("an instance that stops in the middle of a request", () => {
  test("leaves no credits held once another instance's stale sweep has run", async () => {
    const database = await createTestDatabase();
    const crashed = await openStore(database.url);
    const survivor = await openStore(database.url);
    try {
      organizationId = (await crashed.createOrganization({ name: "Shared", now: clock.now() })).id;
      await crashed.grantCredits({ organizationId, source: "grant", type: "grant", amount: 3, expiresAt: null, description: "test", now: clock.now() });
      const held = await crashed.reserveCredits({ organizationId, amount: 2, keyId: null, requestId: "req_lost", now: clock.now() });
      expect(held.ok).toBe(true);
      await crashed.close();

      clock.advance(120_000);
      await ageReservations(survivor, 120_000);
      await survivor.releaseStaleReservations(clock.now());
      expect(await survivor.getBalance(organizationId, clock.now())).toMatchObject({ available: 3, reserved: 0 });
      expect((await survivor.listTransactions(organizationId, { limit: 10, types: ["usage"] })).items).toHaveLength(0);
      await expectInvariant(survivor);
    } finally {
      await crashed.close();
      await survivor.close();
      await database.drop();
    }
  });
});
