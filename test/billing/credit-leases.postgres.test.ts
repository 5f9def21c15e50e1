import { afterEach, beforeEach, expect, test } from "bun:test";
import type postgres from "postgres";
import type { PostgresStore } from "../../src/db/postgres-store";
import { SYSTEM_USER_ID, type Store } from "../../src/db/store";
import { type FakeClock, utcMonth } from "../../src/lib/clock";
import { completeLocalOrder } from "../../src/modules/billing/service";
import { createApiKey } from "../../src/modules/keys/service";
import { ageReservations, ledgerSum, packOrder, queryRows, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

// Credit leases (CreditLeases): an instance takes a slice of a busy organization's credits into a
// reservation row of its own and debits its look-ups from it. Each fault of the mechanism: an
// instance that dies holding a lease, a lease that lapses while a request holds it, clocks that
// disagree, a connection lost around a lease's debit, and a refund racing a lease's debit.
let stores: TwoStores;
let one: PostgresStore;
let two: PostgresStore;
let clock: FakeClock;
let organizationId: string;

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  one = stores.one as PostgresStore;
  two = stores.two as PostgresStore;
  ({ clock, organizationId } = stores);
  for (const store of [one, two]) store.leases.policy = { share: 2, minCredits: 5, maxCredits: 20, ms: 60_000, marginMs: 100 };
  await one.grantCredits({ organizationId, source: "grant", type: "grant", amount: 100, expiresAt: null, description: "test", now: clock.now() });
});

afterEach(() => stores.close());

let requests = 0;

/** A look-up's credits held and debited on `store`; true when billed. */
async function lookUp(store: Store, now = clock.now()): Promise<boolean> {
  const reservation = await store.reserveCredits({ organizationId, amount: 1, keyId: null, requestId: `req_${++requests}`, now });
  if (!reservation.ok) return false;
  return store.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now });
}

type Reservation = Awaited<ReturnType<Store["reserveCredits"]>>;

/** A reservation's id ("" for a refused one, which no store holds). */
const idOf = (reservation: Reservation) => (reservation.ok ? reservation.reservationId : "");

/** Debits a held look-up on `store`; true when billed. */
const commitOn = (store: Store, reservation: Reservation) =>
  store.commitReservation(idOf(reservation), { gtin: null, description: "look-up", now: clock.now() });

/** Takes a lease on `store`: a first look-up asks for one, and it is awaited. */
async function leaseOn(store: PostgresStore): Promise<void> {
  expect(await lookUp(store)).toBe(true);
  await store.leases.taken();
}

/** Takes a lease on both instances; only `one` settles its look-ups (on `settlement` when given). */
async function leasedOnBothSettlingOne(settlement?: PostgresStore["leases"]["settlement"]): Promise<void> {
  await leaseOn(one);
  await leaseOn(two);
  two.leases.stopSettling();
  if (settlement) one.leases.settlement = settlement;
}

/** Buys a pack of 1 000 credits (order `ref`, 900 paid) and takes a lease of 200 on `one`: the pack's and the grant's credits, in FEFO order. */
async function leasePack(ref: string): Promise<void> {
  await one.createOrder(packOrder({ id: ref, organizationId, credits: 1000, amount: 900, now: clock.now() }));
  expect((await completeLocalOrder({ store: one, clock }, ref)).applied).toBe(true);
  one.leases.policy = { ...one.leases.policy, maxCredits: 200 };
  await leaseOn(one);
}

/**
 * Makes the `nth` lease debit statement on `store` commit and its answer be lost on the way back,
 * after `meanwhile` ran; `restore` puts the real connection back.
 */
function loseLeaseDebitAnswer(store: PostgresStore, nth: number, meanwhile: () => Promise<unknown> = async () => {}) {
  const inner = store as unknown as { debitConnection: postgres.Sql };
  const real = inner.debitConnection;
  let statements = 0;
  inner.debitConnection = new Proxy(real, {
    apply(target, self, args: unknown[]) {
      const query = Reflect.apply(target, self, args) as postgres.PendingQuery<postgres.Row[]>;
      const text = String((args[0] as string[] | undefined)?.[0] ?? "");
      if (!text.includes("WITH leased AS") || ++statements !== nth) return query;
      return query.then(async () => {
        await meanwhile();
        throw Object.assign(new Error("write CONNECTION_CLOSED"), { code: "CONNECTION_CLOSED" });
      });
    },
  });
  return { statements: () => statements, restore: () => void (inner.debitConnection = real) };
}

/** What the database holds, read through `two` (`one` may be closed) in one snapshot, settling nothing. */
async function sums() {
  const [row] = await queryRows<{ buckets: number; reserved: number; leases: number; usage: number; unsettled: number; counted: number; ledger: number }>(
    two,
    `SELECT (SELECT coalesce(sum(remaining), 0)::int FROM credit_buckets WHERE organization_id = ?) AS buckets,
            (SELECT coalesce(sum(amount), 0)::int FROM reservations WHERE organization_id = ?) AS reserved,
            (SELECT count(*)::int FROM reservations WHERE instance_id IS NOT NULL) AS leases,
            (SELECT count(*)::int FROM ledger_entries WHERE type = 'usage') AS usage,
            (SELECT coalesce(sum(json_array_length(look_ups)), 0)::int FROM lease_usage) AS unsettled,
            (SELECT coalesce(sum(credits), 0)::int FROM usage_counters WHERE period_ms = 3600000) AS counted,
            (SELECT coalesce(sum(amount), 0)::int FROM ledger_entries WHERE organization_id = ?) AS ledger`,
    [organizationId, organizationId, organizationId],
  );
  return row!;
}

test("look-ups of a leased organization debit the lease: ledger = buckets + leases, one usage row each; given back at shutdown", async () => {
  await leaseOn(one);
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 20, leases: 1, usage: 1, ledger: 99 });
  for (let i = 0; i < 5; i++) expect(await lookUp(one)).toBe(true);
  expect(one.leases.counts).toMatchObject({ taken: 1, debits: 5, lost: 0 });
  // Neither the buckets nor the lease's row moved: its look-ups wait in lease_usage, their credits
  // still in the lease's row, for their settlement into usage rows, which takes them out of it.
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 20, usage: 1, unsettled: 5, counted: 1, ledger: 99 });
  expect(await two.leases.settle({ organizations: [organizationId] })).toBe(5);
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 15, usage: 6, unsettled: 0, counted: 6, ledger: 94 });
  const balance = await one.getBalance(organizationId, clock.now());
  expect(balance).toMatchObject({ available: 94, reserved: 0 });
  // Another instance sees the lease as held elsewhere.
  expect(await two.getBalance(organizationId, clock.now())).toMatchObject({ available: 79, reserved: 15 });
  const [rows] = await queryRows<{ ordered: boolean }>(
    two,
    "SELECT bool_and(balance_after = running) AS ordered FROM (SELECT balance_after, sum(amount) OVER (ORDER BY created_at, id) AS running FROM ledger_entries) t",
  );
  expect(rows!.ordered).toBe(true);
  await one.close();
  expect(await sums()).toMatchObject({ buckets: 94, reserved: 0, leases: 0, ledger: 94 });
});

test("each instance settles its own leases' look-ups within half a second, with no read, and leaves another instance's alone", async () => {
  await leasedOnBothSettlingOne();
  for (let i = 0; i < 3; i++) expect(await lookUp(one)).toBe(true);
  for (let i = 0; i < 2; i++) expect(await lookUp(two)).toBe(true);
  expect(await sums()).toMatchObject({ usage: 2, unsettled: 5 });
  for (const until = performance.now() + 5_000; (await sums()).unsettled === 5 && performance.now() < until; ) await Bun.sleep(50);
  expect(await sums()).toMatchObject({ usage: 5, unsettled: 2 });
});

test("enough look-ups waiting start their settlement at once, without waiting for its interval", async () => {
  await leasedOnBothSettlingOne({ ms: 60_000, lookUps: 3 });
  for (let i = 0; i < 2; i++) expect(await lookUp(one)).toBe(true);
  // Longer than the default interval: only the count starts this one.
  await Bun.sleep(700);
  expect(await sums()).toMatchObject({ usage: 2, unsettled: 2 });
  expect(await lookUp(one)).toBe(true);
  for (const until = performance.now() + 5_000; (await sums()).unsettled > 0 && performance.now() < until; ) await Bun.sleep(20);
  expect(await sums()).toMatchObject({ usage: 5, unsettled: 0 });
});

test("a settlement that failed is tried again after its interval, not at each debit that follows", async () => {
  await leasedOnBothSettlingOne({ ms: 60_000, lookUps: 1 });
  let attempts = 0;
  one.leases.settleLeases = async () => {
    attempts++;
    throw new Error("the settlement's connection was lost");
  };
  expect(await lookUp(one)).toBe(true);
  for (const until = performance.now() + 5_000; attempts === 0 && performance.now() < until; ) await Bun.sleep(20);
  for (let i = 0; i < 3; i++) expect(await lookUp(one)).toBe(true);
  await Bun.sleep(200);
  expect(attempts).toBe(1);
  expect(await sums()).toMatchObject({ usage: 2, unsettled: 4 });
});

test("a balance read that meets lease usage not settled yet counts it as reserved: available + reserved = the ledger's sum", async () => {
  await leaseOn(two);
  two.leases.stopSettling();
  for (let i = 0; i < 3; i++) expect(await lookUp(two)).toBe(true);
  // The read a look-up debited between a settlement and the read meets (the store settles before reading).
  const inner = one as unknown as { reservations: { getBalance: PostgresStore["getBalance"] } };
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 20, unsettled: 3, ledger: 99 });
  expect(await inner.reservations.getBalance(organizationId, clock.now())).toMatchObject({ available: 79, reserved: 20 });
});

test("an instance that dies holding a lease: its lease usage is settled by the next sweep, its credits come back once the lease lapses by the database's clock, not before", async () => {
  await leaseOn(one);
  expect(await lookUp(one)).toBe(true);
  // `one` is gone (it is never asked again, and settles nothing more); the other instance sweeps.
  one.leases.stopSettling();
  expect(await sums()).toMatchObject({ reserved: 20, leases: 1, usage: 1, unsettled: 1, ledger: 99 });
  // The sweep settles the dead instance's lease usage at once (out of its lease), and leaves its lease until it lapses.
  expect(await two.releaseStaleReservations(clock.now())).toBe(0);
  expect(await sums()).toMatchObject({ reserved: 19, leases: 1, usage: 2, unsettled: 0, ledger: 98 });
  await ageReservations(two, 60_001);
  expect(await two.releaseStaleReservations(clock.now())).toBe(1);
  expect(await sums()).toMatchObject({ buckets: 98, reserved: 0, leases: 0, usage: 2, ledger: 98 });
  expect(await two.getBalance(organizationId, clock.now())).toMatchObject({ available: 98, reserved: 0 });
});

test("the stale sweep gives a lapsed lease back only once its look-ups are settled: each billed once, the rest back in its buckets", async () => {
  await leaseOn(one);
  one.leases.stopSettling();
  for (let i = 0; i < 3; i++) expect(await lookUp(one)).toBe(true);
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 20, unsettled: 3, ledger: 99 });
  await ageReservations(two, 60_001);
  // The sweep itself, without the settlement of every organization the store runs before it.
  const inner = two as unknown as { reservations: { releaseStaleReservations: PostgresStore["releaseStaleReservations"] } };
  expect(await inner.reservations.releaseStaleReservations(clock.now())).toBe(1);
  expect(await sums()).toMatchObject({ buckets: 96, reserved: 0, leases: 0, usage: 4, unsettled: 0, counted: 4, ledger: 96 });
});

test("a lease that lapses while a request holds it: the debit takes the credits from the buckets, once; the lease is lost and goes back", async () => {
  await leaseOn(one);
  const reservation = await one.reserveCredits({ organizationId, amount: 1, keyId: null, requestId: "req_held", now: clock.now() });
  expect(reservation.ok).toBe(true);
  await ageReservations(one, 60_001);
  const billed = await commitOn(one, reservation);
  expect(billed).toBe(true);
  expect(one.leases.counts.lost).toBe(1);
  await Bun.sleep(50);
  expect(await sums()).toMatchObject({ buckets: 98, reserved: 0, leases: 0, usage: 2, counted: 2, ledger: 98 });
});

test("clocks that disagree: an instance an hour ahead sweeps no live lease, and a lease is not spent past its bucket's expiry", async () => {
  await leaseOn(one);
  expect(await two.releaseStaleReservations(clock.now() + 3_600_000)).toBe(0);
  // `one`'s own clock an hour ahead: the lease lapses by the database's clock, so it is still spent.
  expect(await lookUp(one, clock.now() + 3_600_000)).toBe(true);
  expect(one.leases.counts.debits).toBe(1);

  // A lease of credits that expire: from their expiry on (by the requests' clock), it is not spent.
  const expiring = (await one.createOrganization({ name: "Expiring", now: clock.now() })).id;
  await one.grantCredits({
    organizationId: expiring,
    source: "grant",
    type: "grant",
    amount: 100,
    expiresAt: clock.now() + 10_000,
    description: "test",
    now: clock.now(),
  });
  const hold = (now: number) => one.reserveCredits({ organizationId: expiring, amount: 1, keyId: null, requestId: `req_${++requests}`, now });
  const first = await hold(clock.now());
  await one.leases.taken();
  expect(one.leases.usableLease(expiring, clock.now())).toBeDefined();
  expect(one.leases.usableLease(expiring, clock.now() + 10_000)).toBeUndefined();
  expect(await hold(clock.now() + 10_000)).toMatchObject({ ok: false });
  if (first.ok) await one.releaseReservation(first.reservationId, clock.now());
});

test("connection lost after a lease's debit committed: the retry finds its lease usage row, nothing is debited twice, the lease goes back once its look-up is settled", async () => {
  await leaseOn(one);
  // The next lease debit commits, and its answer is lost on the way back.
  const lost = loseLeaseDebitAnswer(one, 1);
  expect(await lookUp(one)).toBe(true);
  lost.restore();
  expect(lost.statements()).toBe(1);
  expect(one.leases.counts.lost).toBe(1);
  await one.leases.taken();
  expect(await sums()).toMatchObject({ buckets: 98, reserved: 0, leases: 0, usage: 2, unsettled: 0, counted: 2, ledger: 98 });
  expect(await one.leases.settle("all")).toBe(0);
});

test("look-ups debited in one statement are packed in one lease_usage row; a lost answer's retry finds each in it, and each settles into a usage row of its own", async () => {
  await leaseOn(one);
  one.leases.stopSettling();
  const held = await Promise.all(
    [1, 2, 3, 4].map((i) => one.reserveCredits({ organizationId, amount: 1, keyId: null, requestId: `req_packed_${i}`, now: clock.now() })),
  );
  // The group commit writes the first look-up alone and the three queued behind it together; that
  // second statement commits and its answer is lost on the way back (the rows read meanwhile).
  let rows: Array<{ look_ups: number; amount: number }> = [];
  const readRows = async () => {
    rows = await queryRows(two, "SELECT json_array_length(look_ups) AS look_ups, amount::int AS amount FROM lease_usage ORDER BY 1");
  };
  const lost = loseLeaseDebitAnswer(one, 2, readRows);
  expect(await Promise.all(held.map((reservation) => commitOn(one, reservation)))).toEqual([true, true, true, true]);
  lost.restore();
  expect(lost.statements()).toBe(2);
  expect(one.leases.counts.lost).toBe(1);
  expect(rows).toEqual([
    { look_ups: 1, amount: 1 },
    { look_ups: 3, amount: 3 },
  ]);
  // Nothing debited twice: the lost lease went back once its four look-ups, waiting in two rows, were settled.
  await one.leases.taken();
  expect(await sums()).toMatchObject({ buckets: 95, reserved: 0, leases: 0, usage: 5, unsettled: 0, counted: 5, ledger: 95 });
  const page = await two.listTransactions(organizationId, { limit: 100, types: ["usage"] });
  expect(page.items).toHaveLength(5);
  const packed = page.items.flatMap((row) => (row.requestId?.startsWith("req_packed_") ? [row.requestId] : []));
  expect(packed.sort()).toEqual(["req_packed_1", "req_packed_2", "req_packed_3", "req_packed_4"]);
  expect(new Set(page.items.map((row) => row.id)).size).toBe(5);
});

test("while look-ups arrive together, a batch goes as soon as as many are queued as the recent batches held; one queued after that waits for the next", async () => {
  await leaseOn(one);
  one.leases.stopSettling();
  const held = await Promise.all(
    [1, 2, 3, 4, 5, 6].map((i) => one.reserveCredits({ organizationId, amount: 1, keyId: null, requestId: `req_gather_${i}`, now: clock.now() })),
  );
  // Three at once: the first is written alone (the last batch held one), the two queued behind it together.
  expect(await Promise.all(held.slice(0, 3).map((reservation) => commitOn(one, reservation)))).toEqual([true, true, true]);
  expect(one.leases.counts).toMatchObject({ debits: 2, lookUps: 3 });
  // The last batch held two: the next goes once two are queued, not with the third queued a
  // microtask later (a wait of COMMIT_GATHER_MS would take all three), which then waits alone.
  const together = held.slice(3, 5).map((reservation) => commitOn(one, reservation));
  await Promise.resolve();
  const later = commitOn(one, held[5]!);
  expect(await Promise.all([...together, later])).toEqual([true, true, true]);
  expect(one.leases.counts).toMatchObject({ debits: 4, lookUps: 6 });
  const rows = await queryRows<{ look_ups: number }>(two, "SELECT json_array_length(look_ups) AS look_ups FROM lease_usage ORDER BY 1");
  expect(rows.map((row) => row.look_ups)).toEqual([1, 1, 2, 2]);
});

test("a lost answer's retry finds its look-ups after another instance settled them into a packed usage row: nothing is debited twice", async () => {
  await leaseOn(one);
  one.leases.stopSettling();
  const held = await Promise.all(
    [1, 2, 3, 4].map((i) => one.reserveCredits({ organizationId, amount: 1, keyId: null, requestId: `req_settled_${i}`, now: clock.now() })),
  );
  // The second statement (three look-ups) commits; before its answer is lost, `two` settles everything.
  // The first look-up is 5 s later than the others: the packed row is dated by it, after the lost ones.
  const lost = loseLeaseDebitAnswer(one, 2, () => two.leases.settle("all"));
  const commits = held.map((reservation, i) =>
    one.commitReservation(idOf(reservation), { gtin: null, description: "look-up", now: clock.now() + (i === 0 ? 5_000 : 0) }),
  );
  expect(await Promise.all(commits)).toEqual([true, true, true, true]);
  lost.restore();
  expect(one.leases.counts.lost).toBe(1);
  const packed = await queryRows<{ look_ups: number; amount: number }>(
    two,
    "SELECT json_array_length(look_ups) AS look_ups, amount::int AS amount FROM credit_transactions WHERE look_ups IS NOT NULL",
  );
  expect(packed).toEqual([{ look_ups: 4, amount: -4 }]);
  await Bun.sleep(50);
  await two.leases.settle("all");
  expect(await sums()).toMatchObject({ buckets: 95, reserved: 0, leases: 0, usage: 5, unsettled: 0, counted: 5, ledger: 95 });
});

test("one statement debiting the leases of two organizations packs a row for each, and each look-up settles into its own organization's ledger", async () => {
  const other = (await one.createOrganization({ name: "Other", now: clock.now() })).id;
  await one.grantCredits({ organizationId: other, source: "grant", type: "grant", amount: 50, expiresAt: null, description: "test", now: clock.now() });
  await leaseOn(one);
  const first = await one.reserveCredits({ organizationId: other, amount: 1, keyId: null, requestId: "req_other_lease", now: clock.now() });
  expect(await commitOn(one, first)).toBe(true);
  await one.leases.taken();
  one.leases.stopSettling();
  const debitsBefore = one.leases.counts.debits;
  // The group commit writes the first alone and the next three together: leases of both organizations in one statement.
  const held = await Promise.all(
    [organizationId, other, organizationId, other].map((id, i) =>
      one.reserveCredits({ organizationId: id, amount: 1 + (i % 2), keyId: null, requestId: `req_two_${i}`, now: clock.now() }),
    ),
  );
  expect(await Promise.all(held.map((reservation) => commitOn(one, reservation)))).toEqual([true, true, true, true]);
  expect(one.leases.counts.debits - debitsBefore).toBe(2);
  const rows = await queryRows<{ organization_id: string; amount: number; look_ups: number }>(
    two,
    "SELECT organization_id, amount::int AS amount, json_array_length(look_ups) AS look_ups FROM lease_usage ORDER BY organization_id = ?, look_ups",
    [organizationId],
  );
  expect(rows).toEqual([
    { organization_id: other, amount: 4, look_ups: 2 },
    { organization_id: organizationId, amount: 1, look_ups: 1 },
    { organization_id: organizationId, amount: 1, look_ups: 1 },
  ]);
  await two.leases.settle("all");
  // 100 granted, 1 + 2 spent; 50 granted, 1 + 2 + 2 spent: each organization's ledger has its own.
  expect(await ledgerSum(two, organizationId)).toBe(97);
  expect(await ledgerSum(two, other)).toBe(45);
  const otherUsage = await two.listTransactions(other, { limit: 10, types: ["usage"] });
  expect(otherUsage.items.map((row) => [row.requestId, row.amount])).toEqual(
    expect.arrayContaining([
      ["req_two_1", -2],
      ["req_two_3", -2],
    ]),
  );
  // A lease's credits come from one bucket here: each usage row names it.
  const [bucket] = (await two.getBalance(other, clock.now())).buckets;
  expect(otherUsage.items.every((row) => row.bucketId === bucket!.id)).toBe(true);
});

test("connection lost midway through a settlement (its rows deleted, the ledger not written): they come back unsettled and held, and the next settlement writes each once", async () => {
  await leaseOn(one);
  one.leases.stopSettling();
  for (let i = 0; i < 3; i++) expect(await lookUp(one)).toBe(true);
  // `two` holds the organization's row, so `one`'s settlement (its rows deleted already) waits on it to write the ledger; its connection is ended there.
  const sql = two.connection;
  const [{ name }] = await sql<[{ name: string }]>`SELECT application_name AS name FROM pg_stat_activity WHERE pid = pg_backend_pid()`;
  const settling = await sql.begin(async (tx) => {
    await tx`SELECT id FROM organizations FOR UPDATE`;
    const settling = one.leases.settle("all").then(
      () => "settled",
      (error: unknown) => (error as { code?: string }).code,
    );
    // The only backend of this schema that can wait on a lock now is the settlement's (pg_stat_activity's
    // query text may still show its previous statement).
    let ended = 0;
    for (const until = performance.now() + 10_000; ended === 0 && performance.now() < until; await Bun.sleep(5)) {
      const [row] = await tx<[{ count: number }]>`
        SELECT count(pg_terminate_backend(pid))::int AS count FROM pg_stat_activity
        WHERE application_name = ${name} AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`;
      ended = row.count;
    }
    expect(ended).toBe(1);
    return settling;
  });
  expect(await settling).toBe("CONNECTION_CLOSED");
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 20, usage: 1, unsettled: 3, counted: 1, ledger: 99 });
  expect(await two.getBalance(organizationId, clock.now())).toMatchObject({ available: 79, reserved: 17 });
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 17, usage: 4, unsettled: 0, counted: 4, ledger: 96 });
});

test("two instances settle one organization at once: each look-up gets one usage row", async () => {
  await leaseOn(one);
  one.leases.stopSettling();
  for (let i = 0; i < 4; i++) expect(await lookUp(one)).toBe(true);
  const settled = await Promise.all([one.leases.settle("all"), two.leases.settle({ organizations: [organizationId] }), two.leases.settle("all")]);
  expect(settled.reduce((sum, count) => sum + count, 0)).toBe(4);
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 16, usage: 5, unsettled: 0, counted: 5, ledger: 95 });
  const page = await two.listTransactions(organizationId, { limit: 100 });
  expect(new Set(page.items.map((transaction) => transaction.requestId)).size).toBe(page.items.length);
});

test("reads settle first: another instance's balance, transactions, usage and key spending count look-ups debited from a lease just now", async () => {
  await one.ensureSystemUser(clock.now());
  const { key } = await createApiKey(one, { organizationId, name: "leased", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: clock.now() });
  await leaseOn(one);
  one.leases.stopSettling();
  const now = clock.now();
  const reservation = await one.reserveCredits({ organizationId, amount: 1, keyId: key.id, requestId: "req_read", now });
  expect(await commitOn(one, reservation)).toBe(true);
  expect(await sums()).toMatchObject({ unsettled: 1 });
  expect(await two.getBalance(organizationId, now)).toMatchObject({ available: 79, reserved: 19 });
  expect((await two.listTransactions(organizationId, { limit: 10 })).items.map((transaction) => transaction.requestId)).toContain("req_read");
  for (let i = 0; i < 2; i++)
    expect(await commitOn(one, await one.reserveCredits({ organizationId, amount: 1, keyId: key.id, requestId: `req_read_${i}`, now }))).toBe(true);
  expect((await two.monthlySpending([key.id], utcMonth(now))).get(key.id)).toBe(3);
  expect(await commitOn(one, await one.reserveCredits({ organizationId, amount: 1, keyId: key.id, requestId: "req_read_3", now }))).toBe(true);
  const usage = await two.usageTotals(organizationId, { periodMs: 3_600_000, from: 0, to: now + 3_600_000, byKey: false });
  expect(usage.reduce((sum, row) => sum + row.credits, 0)).toBe(5);
  expect(await sums()).toMatchObject({ unsettled: 0, ledger: 95 });
});

test("connection lost while a lease is taken: no lease, look-ups debit the buckets", async () => {
  const inner = one as unknown as { client: postgres.Sql };
  const real = inner.client;
  const leases = one.leases as unknown as { deps: { client: postgres.Sql } };
  leases.deps.client = new Proxy(real, {
    apply(target, self, args: unknown[]) {
      const text = String((args[0] as string[] | undefined)?.[0] ?? "");
      if (text.includes("WITH locked AS") && text.includes("FROM credit_buckets"))
        return Promise.reject(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }));
      return Reflect.apply(target, self, args);
    },
  });
  expect(await lookUp(one)).toBe(true);
  await one.leases.taken();
  expect(await lookUp(one)).toBe(true);
  expect(one.leases.counts).toMatchObject({ taken: 0, debits: 0 });
  leases.deps.client = real;
  expect(await sums()).toMatchObject({ buckets: 98, reserved: 0, leases: 0, usage: 2, ledger: 98 });
});

test("connection lost while a lease is given back: the row stays until it lapses, and the sweep gives it back", async () => {
  await leaseOn(one);
  const leases = one.leases as unknown as { deps: { giveBack(leaseId: string, now: number): Promise<unknown> } };
  const giveBack = leases.deps.giveBack;
  leases.deps.giveBack = () => Promise.reject(Object.assign(new Error("write CONNECTION_CLOSED"), { code: "CONNECTION_CLOSED" }));
  await one.leases.giveAllBack(clock.now());
  leases.deps.giveBack = giveBack;
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 20, leases: 1, ledger: 99 });
  await ageReservations(two, 60_001);
  expect(await two.releaseStaleReservations(clock.now())).toBe(1);
  expect(await sums()).toMatchObject({ buckets: 99, reserved: 0, leases: 0, ledger: 99 });
});

test("a request the buckets cannot cover while another instance leases what they lack asks the lease back, and is served", async () => {
  // Both instances hear the database's notifications (a look-up's key read starts them).
  for (const store of [one, two]) store.changes.start();
  for (let waited = 0; !(one.changes.live && two.changes.live) && waited < 3_000; waited += 10) await Bun.sleep(10);
  await leaseOn(one);
  // `one` keeps its lease when it hears the buckets ran low (that path gives it back too), so only
  // being asked gives it back; `two` takes none.
  one.leases.policy = { ...one.leases.policy, minCredits: 0 };
  two.leases.policy = { ...two.leases.policy, minCredits: 1_000 };
  const most = await two.reserveCredits({ organizationId, amount: 70, keyId: null, requestId: "req_most", now: clock.now() });
  expect(most.ok).toBe(true);
  expect(await commitOn(two, most)).toBe(true);
  expect(await sums()).toMatchObject({ buckets: 9, reserved: 20, leases: 1 });
  // The buckets hold 9; 29 needs all 20 `one`'s lease holds: it goes back, and the look-up is served from them.
  const rest = await two.reserveCredits({ organizationId, amount: 29, keyId: null, requestId: "req_rest", now: clock.now() });
  expect(rest).toMatchObject({ ok: true, available: 0 });
  expect(await commitOn(two, rest)).toBe(true);
  expect(await sums()).toMatchObject({ buckets: 0, reserved: 0, leases: 0, ledger: 0 });
});

test("a refund takes the refunded pack's credits back from a lease at once; the lease's next debit goes to the buckets", async () => {
  const ref = "ord_leased";
  await leasePack(ref);
  expect(await sums()).toMatchObject({ reserved: 200, leases: 1, ledger: 1099 });
  const [pack] = await queryRows<{ leased: number; spent: number }>(
    two,
    `SELECT (SELECT coalesce(sum((a->>'amount')::int), 0)::int FROM reservations, jsonb_array_elements(allocations) a WHERE a->>'bucketId' = b.id) AS leased,
            (SELECT coalesce(-sum(amount), 0)::int FROM ledger_entries WHERE type = 'usage' AND bucket_id = b.id) AS spent
     FROM credit_buckets b WHERE granted = 1000`,
  );
  expect(pack!.leased).toBeGreaterThan(0);
  const refund = await two.refundPayment({ event: null, ref, refundedAmount: 900, description: "refund", now: clock.now() });
  expect(refund.clawedBack).toBe(1000 - pack!.spent);
  // `one` still believes in its lease: the debit finds the row changed, and bills the grant's credits instead.
  expect(await lookUp(one)).toBe(true);
  expect(one.leases.counts.lost).toBe(1);
  await one.leases.taken();
  const after = await sums();
  expect(after).toMatchObject({ reserved: 0, leases: 0, ledger: after.buckets });
  const [refunds] = await queryRows<{ total: number }>(two, "SELECT sum(amount)::int AS total FROM ledger_entries WHERE type = 'refund'");
  expect(refunds!.total).toBe(-(1000 - pack!.spent));
});

test("a refund that meets a lease's debit in flight waits for it, and takes back only what the lease still holds of the pack", async () => {
  const ref = "ord_racing";
  await leasePack(ref);
  const [lease] = await queryRows<{ id: string; amount: number; allocations: Array<{ bucketId: string; amount: number }> }>(
    two,
    "SELECT id, amount, allocations FROM reservations WHERE instance_id IS NOT NULL",
  );
  const [pack] = await queryRows<{ id: string; spent: number }>(
    two,
    "SELECT b.id, (SELECT coalesce(-sum(amount), 0)::int FROM ledger_entries WHERE type = 'usage' AND bucket_id = b.id) AS spent FROM credit_buckets b WHERE granted = 1000",
  );
  const packShare = lease!.allocations.find((part) => part.bucketId === pack!.id)!.amount;
  expect(packShare).toBeGreaterThanOrEqual(30);
  const lookUp = { id: "txn_leased", amount: 30, allocations: [{ bucketId: pack!.id, amount: 30 }], keyId: null, requestId: "req_leased" };

  // A debit of 30 leased credits from the pack, as CreditLeases.debit writes it, not yet committed.
  const debit = await one.connection.reserve();
  try {
    await debit`BEGIN`;
    await debit`SELECT id FROM reservations WHERE id = ${lease!.id} FOR KEY SHARE`;
    await debit`INSERT INTO lease_usage (organization_id, lease_id, id, amount, look_ups)
                VALUES (${organizationId}, ${lease!.id}, 'txn_leased', 30,
                        ${JSON.stringify([{ ...lookUp, gtin: null, description: "look-up", items: 1, createdAt: clock.now() }])}::json)`;
    const refund = two.refundPayment({ event: null, ref, refundedAmount: 900, description: "refund", now: clock.now() });
    // The refund waits for the debit's transaction (and for nothing else).
    const [{ pid }] = (await debit`SELECT pg_backend_pid() AS pid`) as unknown as [{ pid: number }];
    let waiting = 0;
    for (let attempt = 0; attempt < 100 && waiting === 0; attempt++) {
      await Bun.sleep(20);
      const [row] = await queryRows<{ waiting: number }>(
        two,
        "SELECT count(*)::int AS waiting FROM pg_stat_activity WHERE ?::int = ANY(pg_blocking_pids(pid))",
        [pid],
      );
      waiting = row!.waiting;
    }
    expect(waiting).toBe(1);
    await debit`COMMIT`;
    // The 30 were spent before the refund: it takes back the rest of the pack; the lease keeps the
    // grant's share and the 30 for their settlement, and has lapsed.
    expect((await refund).clawedBack).toBe(1000 - pack!.spent - 30);
  } finally {
    debit.release();
  }
  const kept = async () =>
    (await queryRows<{ amount: number; lapsed: boolean }>(two, "SELECT amount, expires_at = 0 AS lapsed FROM reservations WHERE id = ?", [lease!.id]))[0];
  expect(await kept()).toEqual({ amount: lease!.amount - packShare + 30, lapsed: true });
  expect(await sums()).toMatchObject({ unsettled: 1 });
  expect(await two.leases.settle("all")).toBe(1);
  expect(await kept()).toEqual({ amount: lease!.amount - packShare, lapsed: true });
  const after = await sums();
  expect(after.ledger).toBe(after.buckets + after.reserved);
  const [refunds] = await queryRows<{ spent: number }>(
    two,
    "SELECT -sum(amount)::int AS spent FROM ledger_entries WHERE type = 'usage' AND request_id = 'req_leased'",
  );
  expect(refunds!.spent).toBe(30);
});

test("a key capped while its look-up holds lease credits: the lease's debit fails, and the look-up's retry takes the capped path, its spending counted against the cap", async () => {
  await one.ensureSystemUser(clock.now());
  const { key } = await createApiKey(one, { organizationId, name: "capped later", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: clock.now() });
  await leaseOn(one);
  const reserve = () => one.reserveCredits({ organizationId, amount: 1, keyId: key.id, requestId: "req_capped_later", now: clock.now() });
  const held = await reserve();
  expect(held.ok).toBe(true);
  await queryRows(two, "UPDATE api_keys SET monthly_credit_limit = 10 WHERE id = ?", [key.id]);
  // The hold has no outcome (the planner leaves a key capped since it was held to the capped path): nothing is billed.
  expect(await commitOn(one, held)).toBe(false);
  expect(one.leases.counts.lost).toBe(1);
  expect((await one.monthlySpending([key.id], utcMonth(clock.now()))).get(key.id) ?? 0).toBe(0);
  const retried = await reserve();
  expect(retried.ok).toBe(true);
  expect(await commitOn(one, retried)).toBe(true);
  expect((await one.monthlySpending([key.id], utcMonth(clock.now()))).get(key.id)).toBe(1);
  await one.leases.taken();
  const after = await sums();
  expect(after.ledger).toBe(after.buckets + after.reserved);
});

test("a key capped while look-ups it made from a lease wait for their settlement: its capped reservations count them against the cap", async () => {
  await one.ensureSystemUser(clock.now());
  const { key } = await createApiKey(one, { organizationId, name: "capped after use", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: clock.now() });
  await leaseOn(one);
  one.leases.stopSettling();
  const reserveOn = (store: Store, requestId: string) => store.reserveCredits({ organizationId, amount: 1, keyId: key.id, requestId, now: clock.now() });
  for (let i = 0; i < 3; i++) expect(await commitOn(one, await reserveOn(one, `req_before_cap_${i}`))).toBe(true);
  expect(await sums()).toMatchObject({ unsettled: 3 });
  await queryRows(two, "UPDATE api_keys SET monthly_credit_limit = 4 WHERE id = ?", [key.id]);
  // Nothing of the key's is settled yet: its line's spending row says 0, its lease_usage look-ups 3.
  expect(await reserveOn(two, "req_after_cap_1")).toMatchObject({ ok: true });
  expect(await reserveOn(two, "req_after_cap_2")).toMatchObject({ ok: false, keyLimit: 4 });
  expect(await sums()).toMatchObject({ unsettled: 3 });
});

/**
 * Makes `store`'s lease takes commit and then answer the instance 100 ms later (a slow network): the
 * promise resolves at each take's commit; `restore` puts the real connection back.
 */
function delayTakeAnswers(store: PostgresStore) {
  const leases = store.leases as unknown as { deps: { client: postgres.Sql } };
  const real = leases.deps.client;
  let committed = () => {};
  const takeCommitted = new Promise<void>((resolve) => {
    committed = resolve;
  });
  leases.deps.client = new Proxy(real, {
    apply(target, self, args: unknown[]) {
      const query = Reflect.apply(target, self, args) as postgres.PendingQuery<postgres.Row[]>;
      const text = String((args[0] as string[] | undefined)?.[0] ?? "");
      if (!(text.includes("WITH locked AS") && text.includes("FROM credit_buckets"))) return query;
      return query.then(async (rows) => {
        committed();
        await Bun.sleep(100);
        return rows;
      });
    },
  });
  return { takeCommitted, restore: () => (leases.deps.client = real) };
}

test("the available credits read while a lease is being taken count its credits once, in the buckets or in the lease", async () => {
  const { takeCommitted, restore } = delayTakeAnswers(one);
  expect(await lookUp(one)).toBe(true);
  await takeCommitted;
  expect(await one.availableCredits(organizationId, clock.now())).toBe(99);
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 20 });
  restore();
});

test("the available credits read while a take begins and commits count its credits once: the read is taken again after it", async () => {
  const { takeCommitted, restore } = delayTakeAnswers(one);
  type Read = { execute(params: object): Promise<Array<{ available: number }>> };
  const reservations = (one as unknown as { reservations: { availableStatement: () => Read } }).reservations;
  const read = reservations.availableStatement;
  // The take begins once the read was sent, and commits before the read runs; its answer comes later.
  reservations.availableStatement = () => ({
    execute: async (params) => {
      one.leases.want(organizationId, 100, clock.now());
      await takeCommitted;
      reservations.availableStatement = read;
      return read().execute(params);
    },
  });
  expect(await one.availableCredits(organizationId, clock.now())).toBe(100);
  expect(await sums()).toMatchObject({ buckets: 80, reserved: 20 });
  restore();
});

test("what a reservation, the available credits and the balance say an organization can spend counts its lease's free credits once", async () => {
  await leaseOn(one);
  const now = clock.now();
  const reserve = (amount: number, requestId: string) => one.reserveCredits({ organizationId, amount, keyId: null, requestId, now });
  // 79 in the buckets and 20 leased; one held against the lease.
  const leased = await reserve(1, "req_leased");
  expect(leased).toMatchObject({ ok: true, available: 98 });
  expect(await one.availableCredits(organizationId, now)).toBe(98);
  expect(await one.getBalance(organizationId, now)).toMatchObject({ available: 98, reserved: 1 });
  // More than the lease's 19 free credits: held in the buckets, the lease still counted.
  const inBuckets = await reserve(30, "req_buckets");
  expect(inBuckets).toMatchObject({ ok: true, available: 68 });
  // More than both: refused, with what the two hold.
  expect(await reserve(200, "req_refused")).toEqual({ ok: false, available: 68 });
  expect(await one.releaseReservation(idOf(inBuckets), now)).toBe(true);
  expect(await commitOn(one, leased)).toBe(true);
  // What the buckets cover alone leaves the lease where it is.
  const coveredByBuckets = await reserve(79, "req_covered");
  expect(coveredByBuckets).toMatchObject({ ok: true, available: 19 });
  expect(one.leases.counts.givenBack).toBe(0);
  expect(await one.releaseReservation(idOf(coveredByBuckets), now)).toBe(true);
  // Exactly what the buckets and the lease hold together: the lease goes back, and the look-up is served from the buckets.
  const all = await reserve(98, "req_all");
  expect(all).toMatchObject({ ok: true, available: 0 });
  expect(one.leases.counts).toMatchObject({ taken: 1, givenBack: 1 });
});

test("a look-up that keeps part of its lease credits gives the rest back to the lease", async () => {
  await leaseOn(one);
  const now = clock.now();
  const batch = await one.reserveCredits({ organizationId, amount: 5, keyId: null, requestId: "req_batch", now });
  expect(batch.ok).toBe(true);
  const reservationId = idOf(batch);
  expect(await one.shrinkReservation(reservationId, 2, now)).toBe(true);
  expect(one.leases.spare(organizationId, now)).toBe(18);
  expect(await one.commitReservation(reservationId, { gtin: null, description: "batch", now })).toBe(true);
  expect(await sums()).toMatchObject({ buckets: 79, reserved: 20, unsettled: 1, ledger: 99 });
  expect(await ledgerSum(two, organizationId)).toBe(97);
});

test("one group commit with look-ups held against the lease and in the buckets debits each from its own", async () => {
  await leaseOn(one);
  const now = clock.now();
  const reserve = async (amount: number, requestId: string) => {
    const reservation = await one.reserveCredits({ organizationId, amount, keyId: null, requestId, now });
    expect(reservation.ok).toBe(true);
    return reservation;
  };
  const held = [await reserve(1, "req_first"), await reserve(1, "req_lease"), await reserve(30, "req_buckets")];
  // The first commit goes alone; the two after it, queued meanwhile, share the next statement.
  expect(await Promise.all(held.map((reservation) => commitOn(one, reservation)))).toEqual([true, true, true]);
  expect(await sums()).toMatchObject({ buckets: 49, reserved: 20, usage: 2, unsettled: 2, ledger: 69 });
});

test("a key with a monthly limit spends from the buckets, never from the lease; a lease in the way goes back, one over the limit is refused with the lease kept", async () => {
  await one.ensureSystemUser(clock.now());
  const now = clock.now();
  const { key } = await createApiKey(one, { organizationId, name: "capped", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now, monthlyCreditLimit: 100 });
  await leaseOn(one);
  const reserve = (amount: number, requestId: string) => one.reserveCredits({ organizationId, amount, keyId: key.id, requestId, now });
  const small = await reserve(1, "req_small");
  expect(small).toMatchObject({ ok: true, available: 98 });
  expect(await commitOn(one, small)).toBe(true);
  expect(one.leases.counts).toMatchObject({ taken: 1, debits: 0, lost: 0 });
  expect(await sums()).toMatchObject({ buckets: 78, reserved: 20, ledger: 98 });
  // 90 is more than the buckets' 78: the lease goes back and the key's look-up is served from them.
  const large = await reserve(90, "req_large");
  expect(large).toMatchObject({ ok: true, available: 8 });
  expect(one.leases.counts.givenBack).toBe(1);
  expect(await one.releaseReservation(idOf(large), now)).toBe(true);
  await leaseOn(one);
  expect(one.leases.counts.taken).toBe(2);
  // Over the key's limit: refused for the key, and the lease stays.
  const over = await reserve(100, "req_over");
  expect(over.ok).toBe(false);
  expect(one.leases.counts.givenBack).toBe(1);
  expect(one.leases.spare(organizationId, now)).toBe(20);
});

test("an Idempotency-Key look-up held against the lease is debited with its claim: its answer stored with the debit, nothing billed once the claim was taken over", async () => {
  await leaseOn(one);
  const claim = { scope: `${organizationId} GET /price`, requestHash: "request", ttlMs: 86_400_000, abandonAfterMs: 60_000 };
  /** A claimed key's look-up held against the lease, and its answer for the debit. */
  const heldWithClaim = async (keyHash: string) => {
    const claimed = await one.claimIdempotencyKey({ ...claim, keyHash, now: clock.now() });
    if (!claimed.claimed) throw new Error(`${keyHash} not claimed`);
    const spare = one.leases.spare(organizationId, clock.now());
    const held = await one.reserveCredits({ organizationId, amount: 1, keyId: null, requestId: `req_${keyHash}`, now: clock.now() });
    expect(one.leases.spare(organizationId, clock.now())).toBe(spare - 1);
    const idempotency = { scope: claim.scope, keyHash, claimedAt: claimed.claimedAt, responseStatus: 200, responseBody: `{"key":"${keyHash}"}` };
    return { held, spareBefore: spare, usage: { gtin: null, description: "look-up", now: clock.now(), idempotency } };
  };
  const record = async (keyHash: string) =>
    (await queryRows(two, "SELECT status, response_status, response_body FROM idempotency_records WHERE key_hash = ?", [keyHash]))[0];

  const answered = await heldWithClaim("key-answered");
  expect(await one.commitReservation(idOf(answered.held), answered.usage)).toBe(true);
  expect(await record("key-answered")).toEqual({ status: "done", response_status: 200, response_body: '{"key":"key-answered"}' });
  expect(await sums()).toMatchObject({ usage: 2, ledger: 98 });

  const takenOver = await heldWithClaim("key-taken-over");
  await queryRows(two, "UPDATE idempotency_records SET created_at = created_at + 1 WHERE key_hash = ?", ["key-taken-over"]);
  expect(await one.commitReservation(idOf(takenOver.held), takenOver.usage)).toBe(false);
  expect(await record("key-taken-over")).toEqual({ status: "in-progress", response_status: null, response_body: null });
  expect(await sums()).toMatchObject({ usage: 2, ledger: 98 });
  // Not billed, the hold is held again until its look-up gives it back, as a look-up does.
  expect(one.leases.spare(organizationId, clock.now())).toBe(takenOver.spareBefore - 1);
  await one.releaseReservation(idOf(takenOver.held), clock.now());
  expect(one.leases.spare(organizationId, clock.now())).toBe(takenOver.spareBefore);
});
