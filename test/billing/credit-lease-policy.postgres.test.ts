import { afterEach, beforeEach, expect, test } from "bun:test";
import type { PostgresStore } from "../../src/db/postgres-store";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { type FakeClock, utcMonth } from "../../src/lib/clock";
import { createApiKey } from "../../src/modules/keys/service";
import { ageReservations, queryRows, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

// When an instance holds against its credit lease, takes a new one, keeps it and gives it back
// (CreditLeases' policy), and what a debit from a lease adds up beside the ledger. A wrong decision
// here rarely bills a look-up wrongly (a lease's debit is fenced by its row), so each test asserts
// the decision itself, and the rows the database holds after it.
let stores: TwoStores;
let one: PostgresStore;
let clock: FakeClock;
let organizationId: string;
const POLICY = { share: 2, minCredits: 5, maxCredits: 20, ms: 60_000, marginMs: 100 };

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  one = stores.one as PostgresStore;
  ({ clock, organizationId } = stores);
  one.leases.policy = POLICY;
  await grant(organizationId, 100);
});

afterEach(() => stores.close());

function grant(organization: string, amount: number) {
  return one.grantCredits({ organizationId: organization, source: "grant", type: "grant", amount, expiresAt: null, description: "test", now: clock.now() });
}

/** An organization with `amount` credits in one bucket and no lease. */
async function organizationWith(amount: number): Promise<string> {
  const { id } = await one.createOrganization({ name: `With ${amount}`, now: clock.now() });
  await grant(id, amount);
  return id;
}

let requests = 0;

/** A look-up's credit held on `one`. */
const hold = (keyId: string | null = null) => one.reserveCredits({ organizationId, amount: 1, keyId, requestId: `req_${++requests}`, now: clock.now() });

/** A held look-up debited on `one`; true when billed. */
async function commit(reservation: Awaited<ReturnType<typeof hold>>): Promise<boolean> {
  return reservation.ok && one.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now: clock.now() });
}

/** A look-up's credits held and debited on `one`; true when billed. */
const lookUp = async (keyId: string | null = null) => commit(await hold(keyId));

/** A first look-up asks for a lease of 20 (the organization's 99 spendable halved, at most 20), and it is awaited. */
async function leaseOn(): Promise<void> {
  expect(await lookUp()).toBe(true);
  await one.leases.taken();
  expect(one.leases.usableLease(organizationId, clock.now())?.amount).toBe(20);
}

/** Lease rows in the database, after the takes and give-backs in flight. */
async function leaseRows(): Promise<number> {
  await one.leases.taken();
  const [row] = await queryRows<{ count: number }>(one, "SELECT count(*)::int AS count FROM reservations WHERE instance_id IS NOT NULL");
  return row!.count;
}

const usable = (organization = organizationId) => one.leases.usableLease(organization, clock.now());

test("a lease holds look-ups up to exactly its free credits, and none beyond them", async () => {
  await leaseOn();
  const lease = one.leases.hold(organizationId, 20, clock.now());
  expect(lease?.held).toBe(20);
  expect(one.leases.hold(organizationId, 1, clock.now())).toBeNull();
  one.leases.unhold(lease!, 20);
  expect(one.leases.spare(organizationId, clock.now())).toBe(20);
});

test("a lease is half the spendable credits here (1/share), taken only when the buckets hold share times it, and not below minCredits", async () => {
  const thirty = await organizationWith(30);
  one.leases.want(thirty, 30, clock.now());
  await one.leases.taken();
  expect(usable(thirty)?.amount).toBe(15);

  // An instance whose view is stale asks for 20, which needs 40 in the buckets: none is taken.
  const stale = await organizationWith(30);
  one.leases.want(stale, 1_000, clock.now());
  await one.leases.taken();
  expect(usable(stale)).toBeUndefined();

  const ten = await organizationWith(10);
  one.leases.want(ten, 9, clock.now());
  await one.leases.taken();
  expect(usable(ten)).toBeUndefined();
  one.leases.want(ten, 10, clock.now());
  await one.leases.taken();
  expect(usable(ten)?.amount).toBe(5);
  expect(one.leases.counts.taken).toBe(2);
  expect(await leaseRows()).toBe(2);
});

test("a lease with a quarter of a new one's size free is kept; below that, a new one replaces it and the old goes back once unheld", async () => {
  await leaseOn();
  const spendable = 79;
  one.leases.want(organizationId, spendable, clock.now());
  const most = one.leases.hold(organizationId, 15, clock.now())!;
  one.leases.want(organizationId, spendable, clock.now());
  await one.leases.taken();
  expect(one.leases.counts.taken).toBe(1);

  const last = one.leases.hold(organizationId, 1, clock.now())!;
  one.leases.want(organizationId, spendable, clock.now());
  await one.leases.taken();
  expect(one.leases.counts.taken).toBe(2);
  expect(usable()).not.toBe(most);
  expect(await leaseRows()).toBe(2);
  one.leases.unhold(most, 15);
  expect(await leaseRows()).toBe(2);
  one.leases.unhold(last, 1);
  expect(await leaseRows()).toBe(1);
});

test("a lease in the last third of its time is replaced", async () => {
  one.leases.policy = { ...POLICY, ms: 6_000, marginMs: 2_000 };
  await leaseOn();
  one.leases.want(organizationId, 79, clock.now());
  await one.leases.taken();
  expect(one.leases.counts.taken).toBe(1);
  // Spent until 4 s after it was taken, replaced from 2 s on.
  await Bun.sleep(2_500);
  expect(usable()).toBeDefined();
  one.leases.want(organizationId, 79, clock.now());
  await one.leases.taken();
  expect(one.leases.counts.taken).toBe(2);
});

test("an instance does not spend its lease in the last marginMs before the lease lapses", async () => {
  one.leases.policy = { ...POLICY, ms: 4_000, marginMs: 2_000 };
  await leaseOn();
  expect(usable()).toBeDefined();
  await Bun.sleep(2_300);
  expect(usable()).toBeUndefined();
  expect(one.leases.hold(organizationId, 1, clock.now())).toBeNull();
});

/** How long the lease's row lasts from now, by the database's clock. */
async function endsIn(leaseId: string): Promise<number> {
  const sql = "SELECT expires_at - (extract(epoch from clock_timestamp()) * 1000)::bigint AS ends_in FROM reservations WHERE id = ?";
  const [row] = await queryRows<{ ends_in: string }>(one, sql, [leaseId]);
  return Number(row!.ends_in);
}

/** Waits (up to 5 s) until `done` holds. */
async function until(done: () => Promise<boolean>): Promise<void> {
  for (const end = performance.now() + 5_000; !(await done()) && performance.now() < end; ) await Bun.sleep(20);
}

test("a debit leaves its lease's row as it is; the settlement that follows makes it last ms from then, by the database's clock and in the instance", async () => {
  one.leases.policy = { ...POLICY, ms: 4_000, marginMs: 1_000 };
  one.leases.settlement = { ms: 300, lookUps: 1_000 };
  await leaseOn();
  const lease = usable()!;
  await Bun.sleep(1_200);
  expect(await endsIn(lease.id)).toBeLessThan(2_900);
  expect(await lookUp()).toBe(true);
  expect(await endsIn(lease.id)).toBeLessThan(2_900);
  await until(async () => (await endsIn(lease.id)) > 3_500);
  expect(await endsIn(lease.id)).toBeGreaterThan(3_500);
  // Past when it was taken + ms − marginMs, it is spent still, and was never taken again.
  await Bun.sleep(2_000);
  expect(usable()).toBe(lease);
  expect(one.leases.counts).toMatchObject({ taken: 1, lost: 0 });
  expect(lease.amount).toBe(19);
});

test("time the process did not see while its settlement ran counts against the end that settlement sets", async () => {
  one.leases.policy = { ...POLICY, ms: 4_000, marginMs: 1_000 };
  one.leases.settlement = { ms: 60_000, lookUps: 1 };
  await leaseOn();
  const lease = usable()!;
  await Bun.sleep(1_200);
  const leases = one.leases as unknown as { deps: { client: PostgresStore["connection"] } };
  const real = leases.deps.client;
  leases.deps.client = new Proxy(real, {
    get(target, property, receiver) {
      if (property !== "begin") return Reflect.get(target, property, receiver);
      return (...args: Parameters<typeof real.begin>) => {
        one.leases.timePassed(2_500);
        return (target.begin as (...a: typeof args) => unknown)(...args);
      };
    },
  });
  expect(await lookUp()).toBe(true);
  await until(async () => (await endsIn(lease.id)) > 3_500);
  leases.deps.client = real;
  // The database renewed it; the instance counts the time it did not see against the renewal.
  expect(await endsIn(lease.id)).toBeGreaterThan(3_500);
  expect(usable()?.amount).toBe(19);
  await Bun.sleep(700);
  expect(usable()).toBeUndefined();
});

test("time the process did not see (the clock moved on) brings a lease's end closer by as much", async () => {
  await leaseOn();
  one.leases.timePassed(POLICY.ms - POLICY.marginMs - 1_000);
  expect(usable()).toBeDefined();
  one.leases.timePassed(1_000);
  expect(usable()).toBeUndefined();
});

test("asked for its leases or told the buckets ran low, an instance retires its lease, and gives it back once no request holds it", async () => {
  await leaseOn();
  one.leases.giveBackOf("org_without_lease");
  one.leases.bucketsLeft("org_without_lease", 0);
  one.leases.bucketsLeft(organizationId, POLICY.share * POLICY.minCredits);
  expect(usable()).toBeDefined();

  const first = one.leases.hold(organizationId, 1, clock.now())!;
  const second = one.leases.hold(organizationId, 1, clock.now())!;
  one.leases.bucketsLeft(organizationId, POLICY.share * POLICY.minCredits - 1);
  expect(usable()).toBeUndefined();
  expect(one.leases.hold(organizationId, 1, clock.now())).toBeNull();
  one.leases.unhold(first, 1);
  expect(await leaseRows()).toBe(1);
  one.leases.unhold(second, 1);
  expect(await leaseRows()).toBe(0);

  await leaseOn();
  one.leases.giveBackOf(organizationId);
  expect(usable()).toBeUndefined();
  expect(await leaseRows()).toBe(0);
});

test("a recall gives back a lease no request holds, and keeps one a request holds", async () => {
  expect(await one.leases.recall(organizationId)).toBe(false);
  await leaseOn();
  const held = one.leases.hold(organizationId, 1, clock.now())!;
  expect(await one.leases.recall(organizationId)).toBe(false);
  expect(usable()).toBe(held);
  one.leases.unhold(held, 1);
  expect(await one.leases.recall(organizationId)).toBe(true);
  expect(usable()).toBeUndefined();
  expect(await leaseRows()).toBe(0);
});

test("look-ups debited from a lease count toward their key line's monthly spending once settled, and a read of the spending settles them first", async () => {
  await one.ensureSystemUser(clock.now());
  const { key } = await createApiKey(one, { organizationId, name: "leased", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: clock.now() });
  await leaseOn();
  for (let i = 0; i < 3; i++) expect(await lookUp(key.id)).toBe(true);
  expect(one.leases.counts).toMatchObject({ debits: 3, lost: 0 });
  const [unsettled] = await queryRows<{ count: number; rows: number }>(
    one,
    "SELECT coalesce(sum(json_array_length(look_ups)), 0)::int AS count, count(*)::int AS rows FROM lease_usage",
  );
  // Three debits, each its own statement: three rows of one look-up.
  expect(unsettled).toEqual({ count: 3, rows: 3 });
  expect((await one.monthlySpending([key.id], utcMonth(clock.now()))).get(key.id)).toBe(3);
});

test("a lease that lapses while two look-ups hold it is lost once: the first one's debit finds it lapsed, and the second goes to the buckets without trying it", async () => {
  await leaseOn();
  const [first, second] = [await hold(), await hold()];
  await ageReservations(one, POLICY.ms + 1);
  for (const reservation of [first, second]) expect(await commit(reservation)).toBe(true);
  expect(one.leases.counts).toMatchObject({ debits: 0, lost: 1, givenBack: 1 });
  expect(await leaseRows()).toBe(0);
});
