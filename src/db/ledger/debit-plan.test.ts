import { describe, expect, test } from "bun:test";
import { DAY_MS, HOUR_MS } from "../store";
import { type Debit, type LockedState, planDebits } from "./debit-plan";

const T = 10 * DAY_MS + 5 * HOUR_MS + 123;

function debit(reservationId: string, organizationId: string, amount: number, overrides: Partial<Debit> = {}): Debit {
  return {
    reservationId,
    transactionId: `tx_${reservationId}`,
    organizationId,
    amount,
    keyId: "key_a",
    requestId: `req_${reservationId}`,
    gtin: "04006381333931",
    description: "look-up",
    createdAt: T,
    month: "2026-11",
    items: 1,
    ...overrides,
  };
}

function locked(overrides: Partial<LockedState> = {}): LockedState {
  return {
    buckets: [
      { id: "soon", organizationId: "org_a", remaining: 2 },
      { id: "never", organizationId: "org_a", remaining: 3 },
    ],
    organizations: new Map([
      ["org_a", { ledgerBalance: 5, lowCreditThreshold: 2 }],
      ["org_b", { ledgerBalance: 4, lowCreditThreshold: null }],
    ]),
    keys: new Map([
      ["key_a", { line: "line_a", capped: false }],
      ["key_b", { line: "line_b", capped: false }],
    ]),
    ...overrides,
  };
}

describe("the debit plan of a batch", () => {
  test("grants in batch order while the credits cover them; the first refusal refuses the rest, with what is left", () => {
    const plan = planDebits([debit("r1", "org_a", 2), debit("r2", "org_a", 2), debit("r3", "org_a", 2), debit("r4", "org_a", 1)], locked());
    expect(plan.committed).toEqual(["r1", "r2"]);
    expect(plan.spent).toEqual([
      { reservationId: "r3", available: 1 },
      { reservationId: "r4", available: 1 },
    ]);
  });

  test("takes the granted credits from the buckets soonest-expiring first and moves the running sum once", () => {
    const plan = planDebits([debit("r1", "org_a", 1), debit("r2", "org_a", 3)], locked());
    expect(plan.buckets).toEqual([
      { id: "soon", amount: 2 },
      { id: "never", amount: 2 },
    ]);
    expect(plan.organizations).toEqual([{ id: "org_a", amount: 4 }]);
  });

  test("ledger rows read in order: each balanceAfter is the sum after it, a bucket named only when it alone paid", () => {
    const plan = planDebits([debit("r1", "org_a", 1), debit("r2", "org_a", 3)], locked());
    expect(plan.ledger.map(({ id, amount, balanceAfter, bucketId }) => ({ id, amount, balanceAfter, bucketId }))).toEqual([
      { id: "tx_r1", amount: -1, balanceAfter: 4, bucketId: "soon" },
      { id: "tx_r2", amount: -3, balanceAfter: 1, bucketId: null },
    ]);
    const row = plan.ledger[0]!;
    expect([row.organizationId, row.keyId, row.requestId, row.gtin, row.description, row.createdAt]).toEqual([
      "org_a",
      "key_a",
      "req_r1",
      "04006381333931",
      "look-up",
      T,
    ]);
  });

  test("an organization without spendable credits refuses every look-up and writes nothing", () => {
    const plan = planDebits([debit("r1", "org_b", 1)], locked());
    expect(plan.committed).toEqual([]);
    expect(plan.spent).toEqual([{ reservationId: "r1", available: 0 }]);
    expect([plan.buckets, plan.organizations, plan.ledger, plan.counters, plan.spending, plan.crossings]).toEqual([[], [], [], [], [], []]);
  });

  test("a look-up whose key was capped since it was held gets no outcome (its retry takes the capped path)", () => {
    const keys = new Map([
      ["key_a", { line: "line_a", capped: true }],
      ["key_b", { line: "line_b", capped: false }],
    ]);
    const plan = planDebits([debit("r1", "org_a", 1), debit("r2", "org_a", 1, { keyId: "key_b" })], locked({ keys }));
    expect(plan.committed).toEqual(["r2"]);
    expect(plan.spent).toEqual([]);
  });

  test("a look-up whose key is gone (deleted since) is still debited, with no monthly spending to count", () => {
    const plan = planDebits([debit("r1", "org_a", 1, { keyId: "key_gone" })], locked());
    expect(plan.committed).toEqual(["r1"]);
    expect(plan.spending).toEqual([]);
  });

  test("rows come in one order whatever the batch's order, so instances lock them alike", () => {
    const buckets = ["org_c", "org_b", "org_a"].map((organizationId) => ({ id: `bucket_${organizationId}`, organizationId, remaining: 5 }));
    const organizations = new Map(["org_a", "org_b", "org_c"].map((id) => [id, { ledgerBalance: 5, lowCreditThreshold: null }]));
    const plan = planDebits(
      [debit("r1", "org_b", 1, { keyId: "key_b" }), debit("r2", "org_c", 1, { keyId: "key_b" }), debit("r3", "org_a", 1, { keyId: "key_a" })],
      locked({ buckets, organizations }),
    );
    expect(plan.organizations.map((organization) => organization.id)).toEqual(["org_a", "org_b", "org_c"]);
    expect(plan.committed).toEqual(["r3", "r1", "r2"]);
    expect(plan.spending).toEqual([
      { line: "line_a", month: "2026-11", spent: 1 },
      { line: "line_b", month: "2026-11", spent: 2 },
    ]);
    const reordered = planDebits([debit("r1", "org_a", 1, { keyId: "key_b", month: "2026-12" }), debit("r2", "org_a", 1, { keyId: "key_b" })], locked());
    expect(reordered.spending.map((spending) => spending.month)).toEqual(["2026-11", "2026-12"]);
  });

  test("organizations are planned apart, in id order, each from its own buckets", () => {
    const buckets = [
      { id: "b_bucket", organizationId: "org_b", remaining: 4 },
      { id: "soon", organizationId: "org_a", remaining: 2 },
    ];
    const plan = planDebits([debit("r1", "org_b", 3), debit("r2", "org_a", 2)], locked({ buckets }));
    expect(plan.committed).toEqual(["r2", "r1"]);
    expect(plan.buckets).toEqual([
      { id: "soon", amount: 2 },
      { id: "b_bucket", amount: 3 },
    ]);
    expect(plan.organizations).toEqual([
      { id: "org_a", amount: 2 },
      { id: "org_b", amount: 3 },
    ]);
  });

  test("usage counters per hour and per day count items and credits; spending per key line and month", () => {
    const plan = planDebits(
      [debit("r1", "org_a", 2, { items: 3 }), debit("r2", "org_a", 1, { keyId: "key_b" }), debit("r3", "org_a", 1, { keyId: null }), debit("r4", "org_a", 1)],
      locked(),
    );
    const hour = T - (T % HOUR_MS);
    const day = T - (T % DAY_MS);
    expect(plan.counters).toEqual([
      { organizationId: "org_a", periodMs: HOUR_MS, periodStart: hour, keyId: "", requests: 1, credits: 1 },
      { organizationId: "org_a", periodMs: HOUR_MS, periodStart: hour, keyId: "key_a", requests: 4, credits: 3 },
      { organizationId: "org_a", periodMs: HOUR_MS, periodStart: hour, keyId: "key_b", requests: 1, credits: 1 },
      { organizationId: "org_a", periodMs: DAY_MS, periodStart: day, keyId: "", requests: 1, credits: 1 },
      { organizationId: "org_a", periodMs: DAY_MS, periodStart: day, keyId: "key_a", requests: 4, credits: 3 },
      { organizationId: "org_a", periodMs: DAY_MS, periodStart: day, keyId: "key_b", requests: 1, credits: 1 },
    ]);
    expect(plan.spending).toEqual([
      { line: "line_a", month: "2026-11", spent: 3 },
      { line: "line_b", month: "2026-11", spent: 1 },
    ]);
  });

  test("a balance crossing is kept only when it crosses the threshold or reaches zero, dated by the latest look-up", () => {
    const crossing = planDebits([debit("r1", "org_a", 2), debit("r2", "org_a", 2, { createdAt: T + 5 })], locked());
    expect(crossing.crossings).toEqual([{ organizationId: "org_a", before: 5, after: 1, threshold: 2, createdAt: T + 5 }]);
    const above = planDebits([debit("r1", "org_a", 1)], locked());
    expect(above.crossings).toEqual([]);
  });

  test("a debit allocated when reserved is granted whatever the buckets hold, and takes from its own buckets only while they still hold its credits", () => {
    const inBuckets = { allocations: [{ bucketId: "never", amount: 2 }], inBuckets: true };
    const held = planDebits([debit("r1", "org_b", 2, { allocated: inBuckets })], locked());
    expect(held.committed).toEqual(["r1"]);
    expect(held.buckets).toEqual([{ id: "never", amount: 2 }]);
    expect(held.ledger.map(({ amount, balanceAfter, bucketId }) => ({ amount, balanceAfter, bucketId }))).toEqual([
      { amount: -2, balanceAfter: 2, bucketId: "never" },
    ]);
    const split = {
      allocations: [
        { bucketId: "soon", amount: 1 },
        { bucketId: "never", amount: 1 },
      ],
      inBuckets: false,
    };
    const reserved = planDebits([debit("r1", "org_b", 2, { allocated: split })], locked());
    expect(reserved.buckets).toEqual([]);
    expect(reserved.organizations).toEqual([{ id: "org_b", amount: 2 }]);
    expect(reserved.ledger[0]!.bucketId).toBeNull();
  });

  test("allocated and unallocated debits of one organization share its sum in batch order; only the unallocated ones compete for the buckets", () => {
    const allocated = { allocations: [{ bucketId: "reserved", amount: 4 }], inBuckets: false };
    const plan = planDebits(
      [debit("r1", "org_a", 3), debit("r2", "org_a", 4, { allocated }), debit("r3", "org_a", 3), debit("r4", "org_a", 2)],
      locked({
        organizations: new Map([["org_a", { ledgerBalance: 9, lowCreditThreshold: null }]]),
      }),
    );
    expect(plan.committed).toEqual(["r1", "r2"]);
    expect(plan.spent).toEqual([
      { reservationId: "r3", available: 2 },
      { reservationId: "r4", available: 2 },
    ]);
    expect(plan.buckets).toEqual([
      { id: "soon", amount: 2 },
      { id: "never", amount: 1 },
    ]);
    expect(plan.ledger.map(({ id, balanceAfter }) => ({ id, balanceAfter }))).toEqual([
      { id: "tx_r1", balanceAfter: 6 },
      { id: "tx_r2", balanceAfter: 2 },
    ]);
  });

  test("a bucket taken by several debits is decremented once by their sum", () => {
    const allocated = { allocations: [{ bucketId: "soon", amount: 1 }], inBuckets: true };
    const plan = planDebits([debit("r1", "org_a", 1, { allocated }), debit("r2", "org_a", 1, { allocated })], locked());
    expect(plan.buckets).toEqual([{ id: "soon", amount: 2 }]);
  });

  test("a key capped since its credits were held refuses only unallocated debits: an allocated one is the capped path's own", () => {
    const keys = new Map([["key_a", { line: "line_a", capped: true }]]);
    const allocated = { allocations: [{ bucketId: "soon", amount: 1 }], inBuckets: false };
    const plan = planDebits([debit("r1", "org_a", 1), debit("r2", "org_a", 1, { allocated })], locked({ keys }));
    expect(plan.committed).toEqual(["r2"]);
    expect(plan.spending).toEqual([{ line: "line_a", month: "2026-11", spent: 1 }]);
  });

  test("an organization its batch did not lock is an error, not a guess", () => {
    expect(() => planDebits([debit("r1", "org_a", 1)], locked({ organizations: new Map() }))).toThrow("org_a");
  });
});
