import { describe, expect, test } from "bun:test";
import { creditsTakenBack, mergeReversal, settleBucket } from "./reversals";

const open = { id: "dp_1", amount: 1000, status: "open" as const };

describe("merging refund and dispute reports", () => {
  test("the refunded amount only moves forward, so an older or repeated report is nothing new", () => {
    const first = mergeReversal(undefined, { refundedAmount: 400 })!;
    expect(first.refundedAmount).toBe(400);
    expect(mergeReversal(first, { refundedAmount: 250 })).toBeNull();
    expect(mergeReversal(first, { refundedAmount: 400 })).toBeNull();
    expect(mergeReversal(first, { refundedAmount: 1000 })!.refundedAmount).toBe(1000);
  });

  test("a first report is a whole reversal, even one of nothing", () => {
    expect(mergeReversal(undefined, { refundedAmount: 400 })).toEqual({ refundedAmount: 400, disputeId: null, disputeAmount: 0, disputeStatus: null });
    expect(mergeReversal(undefined, { refundedAmount: 0 })).toEqual({ refundedAmount: 0, disputeId: null, disputeAmount: 0, disputeStatus: null });
  });

  test("a won or lost dispute is final: a late open report changes nothing", () => {
    const won = mergeReversal(undefined, { dispute: { ...open, status: "won" } })!;
    expect(mergeReversal(won, { dispute: open })).toBeNull();
    expect(mergeReversal(won, { dispute: { ...open, status: "lost" } })).toBeNull();
    const opened = mergeReversal(undefined, { dispute: open })!;
    expect(mergeReversal(opened, { dispute: { ...open, status: "lost" } })!.disputeStatus).toBe("lost");
  });
});

describe("credits a reversal takes back", () => {
  const payment = { credits: 1000, amount: 1000 };
  test("refunds and open or lost disputes take credits in proportion to the money, a won dispute none", () => {
    expect(creditsTakenBack(payment, { refundedAmount: 250, disputeId: null, disputeAmount: 0, disputeStatus: null }).credits).toBe(250);
    expect(creditsTakenBack(payment, { refundedAmount: 250, disputeId: "dp_1", disputeAmount: 750, disputeStatus: "open" }).credits).toBe(1000);
    expect(creditsTakenBack(payment, { refundedAmount: 250, disputeId: "dp_1", disputeAmount: 750, disputeStatus: "won" }).credits).toBe(250);
    expect(creditsTakenBack(payment, { refundedAmount: 900, disputeId: "dp_1", disputeAmount: 900, disputeStatus: "lost" })).toEqual({
      amount: 1000,
      credits: 1000,
    });
  });

  test("a payment of nothing has nothing to take back", () => {
    expect(creditsTakenBack({ credits: 100, amount: 0 }, { refundedAmount: 50, disputeId: null, disputeAmount: 0, disputeStatus: null }).credits).toBe(0);
  });
});

describe("settling a payment's bucket", () => {
  test("a larger claim takes the free credits and is owed what requests in flight hold, never more", () => {
    expect(settleBucket({ previous: 0, target: 1000, free: 600, held: 100, owed: 0, taken: 0, expired: false })).toEqual({ delta: -600, owed: 100 });
  });

  test("a claim grown from an earlier one takes only the difference, and owes what it could not take", () => {
    expect(settleBucket({ previous: 200, target: 500, free: 1000, held: 0, owed: 0, taken: 200, expired: false })).toEqual({ delta: -300, owed: 0 });
    expect(settleBucket({ previous: 0, target: 1000, free: 600, held: 1000, owed: 0, taken: 0, expired: false })).toEqual({ delta: -600, owed: 400 });
  });

  test("an unchanged claim moves nothing and forgives nothing", () => {
    expect(settleBucket({ previous: 500, target: 500, free: 100, held: 50, owed: 80, taken: 420, expired: false })).toEqual({ delta: 0, owed: 80 });
  });

  test("a smaller claim forgives the spent part first, then what is owed, then gives back what was taken", () => {
    // 1000 claimed: 600 taken, 100 owed by a request in flight, 300 spent before the claim.
    const state = { previous: 1000, free: 0, held: 100, owed: 100, taken: 600, expired: false };
    expect(settleBucket({ ...state, target: 800 })).toEqual({ delta: 0, owed: 100 });
    expect(settleBucket({ ...state, target: 650 })).toEqual({ delta: 0, owed: 50 });
    expect(settleBucket({ ...state, target: 0 })).toEqual({ delta: 600, owed: 0 });
  });

  test("an expired bucket gets nothing back", () => {
    expect(settleBucket({ previous: 1000, target: 0, free: 0, held: 0, owed: 0, taken: 1000, expired: true })).toEqual({ delta: 0, owed: 0 });
  });
});
