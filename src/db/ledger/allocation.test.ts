import { describe, expect, test } from "bun:test";
import { byFEFO, fefoOrder, soleBucket, takeInOrder } from "./allocation";

describe("the soonest-expiring-first order", () => {
  test("earlier expiry first, never-expiring last, the id breaking ties", () => {
    const buckets = [
      { id: "b", expiresAt: null },
      { id: "c", expiresAt: 20 },
      { id: "a", expiresAt: null },
      { id: "d", expiresAt: 10 },
      { id: "e", expiresAt: 20 },
    ];
    expect(buckets.toSorted(byFEFO).map((bucket) => bucket.id)).toEqual(["d", "c", "e", "a", "b"]);
  });

  test("compared pairwise: the sooner expiry first, either way round, and a bucket equals itself", () => {
    const soon = { id: "z", expiresAt: 10 };
    const later = { id: "a", expiresAt: 20 };
    const never = { id: "b", expiresAt: null };
    const neverToo = { id: "c", expiresAt: null };
    expect(byFEFO(soon, later)).toBeLessThan(0);
    expect(byFEFO(later, soon)).toBeGreaterThan(0);
    expect(byFEFO(later, never)).toBeLessThan(0);
    expect(byFEFO(never, later)).toBeGreaterThan(0);
    expect(byFEFO(never, neverToo)).toBe(-1);
    expect(byFEFO(neverToo, never)).toBe(1);
    expect(byFEFO(later, { ...later })).toBe(0);
  });

  test("the SQL spelling says the same", () => {
    expect(fefoOrder()).toBe("expires_at ASC NULLS LAST, id");
    expect(fefoOrder("credit_buckets")).toBe("credit_buckets.expires_at ASC NULLS LAST, credit_buckets.id");
  });
});

describe("taking credits in order", () => {
  const supply = [
    { id: "soon", free: 3 },
    { id: "later", free: 5 },
    { id: "never", free: 10 },
  ];

  test("each bucket is emptied before the next is touched", () => {
    expect(takeInOrder(supply, 2)).toEqual([{ bucketId: "soon", amount: 2 }]);
    expect(takeInOrder(supply, 9)).toEqual([
      { bucketId: "soon", amount: 3 },
      { bucketId: "later", amount: 5 },
      { bucketId: "never", amount: 1 },
    ]);
  });

  test("empty buckets are skipped and an uncovered rest is left untaken", () => {
    expect(takeInOrder([{ id: "empty", free: 0 }, ...supply], 3)).toEqual([{ bucketId: "soon", amount: 3 }]);
    expect(takeInOrder(supply, 30).reduce((sum, part) => sum + part.amount, 0)).toBe(18);
  });

  test("a debit names its bucket only when one bucket supplied all of it", () => {
    expect(soleBucket(supply, 0, 3)).toBe("soon");
    expect(soleBucket(supply, 2, 2)).toBeNull();
    expect(soleBucket(supply, 3, 5)).toBe("later");
    expect(soleBucket(supply, 8, 10)).toBe("never");
  });
});
