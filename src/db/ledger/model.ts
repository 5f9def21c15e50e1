// The ledger's shared vocabulary: usage periods and counts, the billed reason, how a partial commit
// splits a hold, the two ways a debit ends without an answer, and the stale age of a reservation.

export const HOUR_MS = 3_600_000;
export const DAY_MS = 24 * HOUR_MS;
/** The periods each usage count is added to: its hour and its UTC day. */
export const USAGE_PERIODS_MS = [HOUR_MS, DAY_MS] as const;

/** The start of the period of `periodMs` (UTC-aligned) that holds `at`. */
export function periodStartOf(at: number, periodMs: number): number {
  return at - (((at % periodMs) + periodMs) % periodMs);
}

/** The start of the UTC hour of `at`: the hour a usage counter row belongs to. */
export function hourStartOf(at: number): number {
  return periodStartOf(at, HOUR_MS);
}

/** Requests of one outcome to add to a usage counter row. */
export interface UsageCount {
  organizationId: string;
  /** '' when no key is known. */
  keyId: string;
  hourStart: number;
  reason: string;
  requests: number;
}

/** One summed row of usage counters: a period (its start), a reason and, when asked, a key (else ''). */
export interface UsageTotal {
  periodStart: number;
  keyId: string;
  reason: string;
  requests: number;
  credits: number;
}

/** The reason billed look-ups are counted under (in the debit's transaction). */
export const BILLED_REASON = "fresh-offer";

/**
 * A reservation's allocations (FEFO order) split into the first `keep` credits and the rest: what a
 * partial commit keeps is the soonest-expiring part.
 */
export function splitAllocations(allocations: Array<{ bucketId: string; amount: number }>, keep: number) {
  const kept: Array<{ bucketId: string; amount: number }> = [];
  const given: Array<{ bucketId: string; amount: number }> = [];
  let left = keep;
  for (const { bucketId, amount } of allocations) {
    const taken = Math.min(amount, left);
    left -= taken;
    if (taken > 0) kept.push({ bucketId, amount: taken });
    if (amount > taken) given.push({ bucketId, amount: amount - taken });
  }
  return { kept, given };
}

/**
 * commitReservation found the organization's credits spent meanwhile (PostgreSQL: another instance
 * spent them between the look-up's balance check and its debit): nothing was debited, and the
 * look-up is answered as a 402 with `available`, the credits left.
 */
export class CreditsSpentMeanwhile extends Error {
  constructor(readonly available: number) {
    super("the organization's credits were spent before this debit");
  }
}

/**
 * A debit whose outcome is unknown: the database stopped answering after its transaction may have
 * committed (PostgreSQL away longer than a debit waits for it). Its hold is given back; whether the
 * look-up was billed is in the ledger, under its request id, once the database answers again.
 */
export class DebitInDoubt extends Error {
  constructor(cause: unknown) {
    super("the database stopped answering while this debit was written; it may have committed", { cause });
  }
}

/** A reservation older than this belongs to a request that died (crash, kill): give its credits back. */
export const STALE_RESERVATION_MS = 60_000;
