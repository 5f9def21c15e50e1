// Seeded runs of price watches among imports, identical re-imports, grants and look-ups holding
// credits, on the store under test: after every step the ledger equals the balance, every
// `price.changed` event has exactly one usage row and every usage row of a watch its event, no
// bucket goes below zero, an identical re-import fires nothing, a look-up's held credits are never
// taken by a watch event (its commit still succeeds), and after an evaluation every watch, paused or
// not, holds its product's current state (so none fires later for a change made while it was paused).
import { describe, expect, test } from "bun:test";
import type { FeedRecord } from "../../src/db/store";
import { addProduct, createOrganization, createTestContext, ledgerSum, queryRows, TEST_DATABASE_URL, type TestContext } from "../support/context";
import { prng } from "./simulation";
import { watchesBehindOffers } from "./watch-checks";

const GTINS = ["04006381333931", "00012345678905", "05901234123457"];
const MERCHANTS = ["m1", "m2"];
const PRICES = [800, 900, 1000, 1100];
const SEEDS = TEST_DATABASE_URL === null ? 12 : 8;
const STEPS = 60;

async function checkInvariants(context: TestContext, organizations: string[]): Promise<string[]> {
  const violations: string[] = [];
  const { store, clock } = context;
  for (const organizationId of organizations) {
    const balance = await store.getBalance(organizationId, clock.now());
    const sum = await ledgerSum(store, organizationId);
    if (sum !== balance.available + balance.reserved)
      violations.push(`${organizationId}: ledger ${sum} ≠ available ${balance.available} + reserved ${balance.reserved}`);
    const events = (
      await queryRows<{ id: string }>(store, "SELECT id FROM webhook_events WHERE organization_id = ? AND type = 'price.changed'", [organizationId])
    )
      .map((row) => row.id)
      .sort();
    const billed = (
      await queryRows<{ request_id: string }>(
        store,
        "SELECT request_id FROM ledger_entries WHERE organization_id = ? AND description LIKE 'Price watch event%'",
        [organizationId],
      )
    )
      .map((row) => row.request_id)
      .sort();
    if (JSON.stringify(events) !== JSON.stringify(billed)) violations.push(`${organizationId}: ${events.length} events, ${billed.length} watch debits`);
  }
  const negative = await queryRows(store, "SELECT id FROM credit_buckets WHERE remaining < 0");
  if (negative.length > 0) violations.push(`${negative.length} buckets below zero`);
  return violations;
}

const seen = { events: 0, paused: 0, resumed: 0 };

async function run(seed: number): Promise<string[]> {
  const random = prng(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const context = await createTestContext();
  const { store, clock } = context;
  try {
    const organizations = [(await createOrganization(context, 2, "A")).organizationId, (await createOrganization(context, 1, "B")).organizationId];
    const watches: Array<{ organizationId: string; id: string }> = [];
    const held: string[] = [];
    let made = 0;
    let last: FeedRecord | null = null;
    const evaluate = async () => {
      const result = await context.services.watches.tick();
      seen.events += result.events;
      seen.paused += result.paused;
      seen.resumed += result.resumed;
    };
    const count = async () =>
      Number((await queryRows<{ count: number }>(store, "SELECT count(*) AS count FROM webhook_events WHERE type = 'price.changed'"))[0]!.count);
    const operations: Array<[number, string, () => Promise<string | null>]> = [
      [
        6,
        "import",
        async () => {
          clock.advance(60_000);
          const gtin = pick(GTINS);
          const merchantId = pick(MERCHANTS);
          const price = pick(PRICES);
          const availability = random() < 0.2 ? ("out_of_stock" as const) : ("in_stock" as const);
          await addProduct(context, gtin, [{ merchantId, price, ageMs: 0, availability }]);
          last = {
            product: { gtin, title: `Product ${gtin}`, brand: "Acme" },
            offer: {
              merchantId,
              merchantName: `Merchant ${merchantId}`,
              priceAmount: price,
              currency: "EUR",
              shippingAmount: null,
              availability,
              condition: "new",
              url: null,
              observedAt: clock.now(),
            },
          };
          return null;
        },
      ],
      [
        1,
        "identical re-import",
        async () => {
          if (last === null) return null;
          await evaluate();
          const before = await count();
          await store.applyFeedRecords([last], clock.now());
          await evaluate();
          const after = await count();
          return after === before ? null : `an identical re-import fired ${after - before} events`;
        },
      ],
      [
        2,
        "watch",
        async () => {
          const trigger = pick(["any-change", "price-drop", "below"] as const);
          const organizationId = pick(organizations);
          const created = await store.createWatch(
            {
              id: `wch_sim${seed}x${made++}`,
              organizationId,
              gtin: pick(GTINS),
              merchantId: random() < 0.5 ? null : pick(MERCHANTS),
              trigger,
              below: trigger === "below" ? { amount: 950, currency: "EUR" } : null,
              now: clock.now(),
            },
            { limit: 10, freshnessWindowMs: context.services.config.freshnessWindowMs },
          );
          if (created.ok) watches.push({ organizationId, id: created.watch.id });
          return null;
        },
      ],
      [
        1,
        "unwatch",
        async () => {
          const watch = watches.splice(Math.floor(random() * watches.length), 1)[0];
          if (watch !== undefined) await store.deleteWatch(watch.organizationId, watch.id);
          return null;
        },
      ],
      [
        2,
        "grant",
        async () => {
          await store.grantCredits({
            organizationId: pick(organizations),
            source: "grant",
            type: "grant",
            amount: 1 + Math.floor(random() * 3),
            expiresAt: null,
            description: "sim",
            now: clock.now(),
          });
          return null;
        },
      ],
      [
        1,
        "hold",
        async () => {
          const reservation = await store.reserveCredits({
            organizationId: pick(organizations),
            amount: 1,
            keyId: null,
            requestId: `req_sim${seed}x${made++}`,
            now: clock.now(),
          });
          if (reservation.ok) held.push(reservation.reservationId);
          return null;
        },
      ],
      [
        1,
        "commit or release",
        async () => {
          const reservationId = held.shift();
          if (reservationId === undefined) return null;
          if (random() < 0.5) {
            const committed = await store.commitReservation(reservationId, { gtin: null, description: "sim look-up", now: clock.now() });
            return committed ? null : "a held look-up could not commit after watch events";
          }
          await store.releaseReservation(reservationId, clock.now());
          return null;
        },
      ],
      [
        3,
        "evaluate",
        async () => {
          await evaluate();
          const behind = await watchesBehindOffers(store, clock.now(), context.services.config.freshnessWindowMs);
          return behind.length === 0 ? null : behind.join("; ");
        },
      ],
    ];
    const total = operations.reduce((sum, [weight]) => sum + weight, 0);
    for (let step = 0; step < STEPS; step++) {
      let roll = random() * total;
      const [, name, operation] = operations.find(([weight]) => (roll -= weight) < 0)!;
      const violation = await operation();
      const violations = [...(violation === null ? [] : [violation]), ...(await checkInvariants(context, organizations))];
      if (violations.length > 0) return violations.map((text) => `step ${step} (${name}): ${text}`);
    }
    return [];
  } finally {
    await context.close();
  }
}

describe(`seeded price watches on ${TEST_DATABASE_URL === null ? "sqlite" : "postgres"}`, () => {
  test(`${SEEDS} seeds of imports, watches, grants and held look-ups keep every invariant`, async () => {
    const failures: string[] = [];
    for (let seed = 1; seed <= SEEDS; seed++) failures.push(...(await run(seed)).map((text) => `seed ${seed}: ${text}`));
    expect(failures).toEqual([]);
    // The runs reach every path: events, pauses for want of credits, and resumptions.
    expect(seen.events).toBeGreaterThan(0);
    expect(seen.paused).toBeGreaterThan(0);
    expect(seen.resumed).toBeGreaterThan(0);
  }, 120_000);
});
