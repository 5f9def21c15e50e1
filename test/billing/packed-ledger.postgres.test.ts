import { afterEach, beforeEach, expect, test } from "bun:test";
import type { PostgresStore } from "../../src/db/postgres-store";
import type { LedgerTransaction, TransactionQuery, TransactionType } from "../../src/db/store";
import type { FakeClock } from "../../src/lib/clock";
import { queryRows, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

// A lease settlement writes a usage row per organization and stretch of look-ups, packing their
// entries; the transactions API lists one entry per look-up, as the view ledger_entries does and as
// SQLite's rows are. Each page is checked against the view, read in one query.
let stores: TwoStores;
let one: PostgresStore;
let two: PostgresStore;
let clock: FakeClock;
let organizationId: string;
let requests = 0;

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  one = stores.one as PostgresStore;
  two = stores.two as PostgresStore;
  ({ clock, organizationId } = stores);
  for (const store of [one, two]) store.leases.policy = { share: 2, minCredits: 5, maxCredits: 40, ms: 60_000, marginMs: 100 };
  await grant(10_000);
});

afterEach(() => stores.close());

async function grant(amount: number, now = clock.now()): Promise<void> {
  await one.grantCredits({ organizationId, source: "grant", type: "grant", amount, expiresAt: null, description: "test", now });
}

/** Look-ups at `times` (ms after the clock's now), held together and debited on `one`; all billed. */
async function lookUpsAt(times: number[]): Promise<void> {
  const held = await Promise.all(
    times.map((t, i) => one.reserveCredits({ organizationId, amount: 1 + ((t + i) % 3), keyId: null, requestId: `req_${++requests}`, now: clock.now() + t })),
  );
  const billed = await Promise.all(
    held.map((r, i) => (r.ok ? one.commitReservation(r.reservationId, { gtin: null, description: "look-up", now: clock.now() + times[i]! }) : false)),
  );
  expect(billed.every(Boolean)).toBe(true);
}

/** Every page of `query` read in turn, its entries concatenated. */
async function allPages(query: Omit<TransactionQuery, "after">): Promise<LedgerTransaction[]> {
  const entries: LedgerTransaction[] = [];
  let after: string | undefined;
  for (let pages = 0; pages < 100; pages++) {
    const page = await two.listTransactions(organizationId, { ...query, after });
    entries.push(...page.items);
    if (page.nextCursor === null) return entries;
    after = page.nextCursor;
  }
  throw new Error("more than 100 pages");
}

/** The view's entries for the same bounds, newest first. */
async function viewEntries(types: TransactionType[], from: number, to: number) {
  return queryRows<{ id: string; amount: number; balance_after: number; request_id: string | null }>(
    two,
    `SELECT id, amount::int AS amount, balance_after::int AS balance_after, request_id FROM ledger_entries
     WHERE organization_id = ? AND type = ANY(?) AND created_at >= ? AND created_at < ? ORDER BY created_at DESC, id DESC`,
    [organizationId, types, from, to],
  );
}

test("settled look-ups are packed in a few usage rows, and every page lists each look-up once, as the view does", async () => {
  await lookUpsAt([0]);
  await one.leases.taken();
  one.leases.stopSettling();
  // Three settlements whose look-ups' times overlap, a grant between them.
  await lookUpsAt([100, 300, 500, 700]);
  await two.leases.settle("all");
  await lookUpsAt([200, 400, 600, 800, 1000]);
  await grant(5, clock.now() + 450);
  await two.leases.settle("all");
  await lookUpsAt([450, 900, 1100]);
  await two.leases.settle("all");
  // Look-ups at the same times as earlier ones: a page may end inside a time that two rows share.
  await lookUpsAt([300, 300, 700]);
  await two.leases.settle("all");
  const [rows] = await queryRows<{ packed: number; entries: number }>(
    two,
    "SELECT count(*)::int AS packed, sum(json_array_length(look_ups))::int AS entries FROM credit_transactions WHERE look_ups IS NOT NULL",
  );
  expect(rows!.packed).toBeGreaterThanOrEqual(3);
  expect(rows!.entries).toBeGreaterThanOrEqual(11);
  const usage = await viewEntries(["usage"], 0, Number.MAX_SAFE_INTEGER);
  expect(usage).toHaveLength(16);
  expect(new Set(usage.map((entry) => entry.request_id)).size).toBe(16);

  const shape = (entries: Array<{ id: string; amount: number; balanceAfter?: number; balance_after?: number }>) =>
    entries.map((e) => [e.id, e.amount, e.balanceAfter ?? e.balance_after]);
  const everything: TransactionType[] = ["grant", "usage"];
  for (const limit of [1, 2, 3, 5, 100]) {
    expect(shape(await allPages({ limit }))).toEqual(shape(await viewEntries(everything, 0, Number.MAX_SAFE_INTEGER)));
    expect(shape(await allPages({ limit, types: ["usage"] }))).toEqual(shape(usage));
    const [from, to] = [clock.now() + 300, clock.now() + 900];
    expect(shape(await allPages({ limit, from, to }))).toEqual(shape(await viewEntries(everything, from, to)));
  }
});

test("within a settlement and between settlements that do not overlap, each entry's balance is the ledger's running sum in the API's order", async () => {
  await lookUpsAt([0]);
  await one.leases.taken();
  one.leases.stopSettling();
  // Some at the same time: the API orders those by id, and so must their balances.
  await lookUpsAt([500, 100, 300, 200, 300]);
  await two.leases.settle("all");
  await lookUpsAt([900, 700, 800, 700]);
  await two.leases.settle("all");
  const ascending = (await allPages({ limit: 3 })).toReversed();
  expect(ascending.map((entry) => entry.type)).toEqual(["grant", ...Array(10).fill("usage")]);
  let running = 0;
  for (const entry of ascending) {
    running += entry.amount;
    expect(entry.balanceAfter).toBe(running);
  }
});
