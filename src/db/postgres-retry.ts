import { errorCode, TRANSACTION_ATTEMPTS } from "./database-errors";

/**
 * Runs a transaction (or a single-statement one) again from the start when PostgreSQL aborted it
 * for a deadlock or a serialization failure: both mean "another transaction won; retry".
 */
export async function retrying<T>(run: () => Promise<T>, alsoRetry: (error: unknown) => boolean = () => false): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      if (attempt >= TRANSACTION_ATTEMPTS || !(isRetryable(error) || alsoRetry(error))) throw error;
    }
  }
}

/**
 * The bucket check (`remaining >= 0`) refused a reservation although the credits were there. A
 * release that committed after the reserve statement's snapshot raised a bucket (1 → 4, say): the
 * `FOR UPDATE` CTE locks and reads the new row (4) and takes 3 from it, but PostgreSQL computes the
 * UPDATE's new row from the snapshot's version first (1 − 3) and checks constraints on it before it
 * finds the newer version and recomputes (4 − 3). With the constraint dropped, no bucket ever went
 * below zero in the same race (releases racing reserves, 60 rounds of 8). The statement is refused
 * whole (nothing held, nothing debited), so it runs again on a fresh snapshot, like a deadlock.
 */
export function isOverdrawRefused(error: unknown): boolean {
  const cause = ((error as { cause?: unknown } | null)?.cause ?? error) as { code?: string; constraint_name?: string } | null;
  return cause?.code === "23514" && cause.constraint_name === "credit_buckets_remaining_not_negative";
}

/** Deadlock (40P01) and serialization failure (40001). */
function isRetryable(error: unknown): boolean {
  const code = errorCode(error);
  return code === "40P01" || code === "40001";
}
