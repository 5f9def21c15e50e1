import type { DisputeReport } from "../store";

/** What the provider took back from a payment so far (a payment_reversals row). */
export interface Reversal {
  refundedAmount: number;
  disputeId: string | null;
  disputeAmount: number;
  disputeStatus: DisputeReport["status"] | null;
}

/** Ledger descriptions of the rows a reversal writes. */
export const DISPUTED = "Payment disputed: unspent credits withdrawn";
export const REINSTATED = "Dispute won: withdrawn credits given back";
export const REVERSED_BEFORE_PAID = "Payment refunded or disputed before it was recorded: credits withdrawn";

const NONE: Reversal = { refundedAmount: 0, disputeId: null, disputeAmount: 0, disputeStatus: null };

/**
 * The reversal after a report, or null when the report is nothing new: the refunded amount only
 * moves forward, and a dispute that is won or lost stays so (a late "open" changes nothing).
 */
export function mergeReversal(current: Reversal | undefined, report: { refundedAmount?: number; dispute?: DisputeReport }): Reversal | null {
  const was = current ?? NONE;
  const next = { ...was };
  if (report.refundedAmount !== undefined) next.refundedAmount = Math.max(was.refundedAmount, report.refundedAmount);
  const dispute = report.dispute;
  if (dispute !== undefined && (was.disputeStatus === null || was.disputeStatus === "open")) {
    next.disputeId = dispute.id;
    next.disputeAmount = dispute.amount;
    next.disputeStatus = dispute.status;
  }
  const changed = current === undefined || (Object.keys(next) as Array<keyof Reversal>).some((key) => next[key] !== was[key]);
  return changed ? next : null;
}

/**
 * The credits of a payment that its reversal takes back: in proportion to the money refunded or
 * withheld by an open or lost dispute (all of them when all of it is), in integers.
 */
export function creditsTakenBack(payment: { credits: number; amount: number }, reversal: Reversal): { amount: number; credits: number } {
  const withheld = reversal.disputeStatus === "open" || reversal.disputeStatus === "lost" ? reversal.disputeAmount : 0;
  const amount = Math.min(reversal.refundedAmount + withheld, payment.amount);
  const credits = amount === 0 ? 0 : amount === payment.amount ? payment.credits : Number((BigInt(payment.credits) * BigInt(amount)) / BigInt(payment.amount));
  return { amount, credits };
}

/**
 * How a payment's bucket moves when the credits its reversal claims go from `previous` to `target`.
 * A larger claim takes what is free now and is owed what requests in flight hold (their releases pay
 * it); what neither covers was spent. A smaller claim (a dispute won) first forgives the spent part,
 * then what is owed, and only then gives back credits actually taken, into a bucket not yet expired.
 */
export function settleBucket(input: { previous: number; target: number; free: number; held: number; owed: number; taken: number; expired: boolean }): {
  delta: number;
  owed: number;
} {
  const { previous, target, free, held, owed, taken } = input;
  if (target > previous) {
    const claim = target - previous;
    const take = Math.max(Math.min(claim, free), 0);
    return { delta: -take, owed: Math.min(owed + claim - take, held) };
  }
  const give = previous - target;
  const spent = Math.max(previous - taken - owed, 0);
  const forgiven = Math.min(give - Math.min(give, spent), owed);
  const restore = input.expired ? 0 : Math.min(give - Math.min(give, spent) - forgiven, taken);
  return { delta: restore, owed: owed - forgiven };
}
