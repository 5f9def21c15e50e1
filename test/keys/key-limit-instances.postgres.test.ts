import { afterEach, beforeEach, expect, test } from "bun:test";
import { SYSTEM_USER_ID, type Store } from "../../src/db/store";
import type { FakeClock } from "../../src/lib/clock";
import { createApiKey } from "../../src/modules/keys/service";
import { ledgerSum, queryRows, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

// A key's monthly credit limit across two instances on one PostgreSQL database: the counter row of
// the month is the lock every reservation of the key takes, whichever instance it reaches.
let stores: TwoStores;
let one: Store;
let two: Store;
let clock: FakeClock;
let organizationId: string;
let keyId: string;

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  ({ one, two, clock, organizationId } = stores);
  await one.ensureSystemUser(clock.now());
  await one.grantCredits({ organizationId, source: "grant", type: "grant", amount: 100, expiresAt: null, description: "test", now: clock.now() });
  keyId = (await createApiKey(one, { organizationId, name: "capped", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: clock.now(), monthlyCreditLimit: 5 }))
    .key.id;
});

afterEach(() => stores.close());

function reserve(store: Store, i: number) {
  return store.reserveCredits({ organizationId, amount: 1, keyId, requestId: `req_${i}`, now: clock.now() });
}

test("20 reservations of a key capped at 5, spread over two instances, reserve exactly 5; committed, the counter and the ledger agree", async () => {
  const reservations = await Promise.all(Array.from({ length: 20 }, (_, i) => reserve(i % 2 === 0 ? one : two, i)));
  const granted = reservations.filter((reservation) => reservation.ok);
  expect(granted).toHaveLength(5);
  expect(reservations.filter((reservation) => !reservation.ok).every((reservation) => !reservation.ok && reservation.keyLimit === 5)).toBe(true);
  await Promise.all(
    granted.map((reservation, i) =>
      (i % 2 === 0 ? one : two).commitReservation(reservation.ok ? reservation.reservationId : "", { gtin: null, description: "test", now: clock.now() }),
    ),
  );
  expect((await one.monthlySpending([keyId], "2026-11")).get(keyId)).toBe(5);
  expect(await ledgerSum(one, organizationId)).toBe(95);
  expect((await reserve(two, 99)).ok).toBe(false);
  const rows = await queryRows<{ n: number }>(one, "SELECT count(*)::int AS n FROM ledger_entries WHERE type = 'usage' AND key_id = ?", [keyId]);
  expect(rows[0]!.n).toBe(5);
});

test("a released reservation frees its share of the cap on every instance at once", async () => {
  const held = await Promise.all(Array.from({ length: 5 }, (_, i) => reserve(one, i)));
  expect(held.every((reservation) => reservation.ok)).toBe(true);
  expect((await reserve(two, 10)).ok).toBe(false);
  const first = held[0]!;
  await one.releaseReservation(first.ok ? first.reservationId : "", clock.now());
  expect((await reserve(two, 11)).ok).toBe(true);
  expect((await reserve(one, 12)).ok).toBe(false);
});

test("a limit lowered below what is held and spent refuses the next reservation at once; cleared, the key reserves again", async () => {
  const first = await reserve(one, 1);
  await one.commitReservation(first.ok ? first.reservationId : "", { gtin: null, description: "test", now: clock.now() });
  await two.updateApiKeyControls(organizationId, keyId, { monthlyCreditLimit: 1 });
  expect(await reserve(one, 2)).toMatchObject({ ok: false, keyLimit: 1 });
  await two.updateApiKeyControls(organizationId, keyId, { monthlyCreditLimit: null });
  expect((await reserve(one, 3)).ok).toBe(true);
});

test("reservations racing with commits of the same key on two instances never pass the cap nor miss it", async () => {
  const billed = await Promise.all(
    Array.from({ length: 30 }, async (_, i) => {
      const store = i % 2 === 0 ? one : two;
      const reservation = await reserve(store, i);
      if (!reservation.ok) return false;
      return store.commitReservation(reservation.reservationId, { gtin: null, description: "test", now: clock.now() });
    }),
  );
  expect(billed.filter(Boolean)).toHaveLength(5);
  expect((await one.monthlySpending([keyId], "2026-11")).get(keyId)).toBe(5);
  expect(await ledgerSum(one, organizationId)).toBe(95);
});

test("a look-up whose key read saw a limit that another instance cleared before its reservation is reserved, not refused", async () => {
  const keyRead = { spendable: 100, capped: true };
  await two.updateApiKeyControls(organizationId, keyId, { monthlyCreditLimit: null });
  const reservation = await one.reserveCredits({ organizationId, amount: 1, keyId, requestId: "req_late", now: clock.now(), balance: keyRead });
  expect(reservation).toMatchObject({ ok: true, available: 99 });
  expect(await queryRows<{ n: number }>(one, "SELECT count(*)::int AS n FROM reservations WHERE key_id = ?", [keyId])).toEqual([{ n: 1 }]);
});
