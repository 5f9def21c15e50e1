import { and, eq, lte } from "drizzle-orm";
import type { BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import * as schema from "../schema/sqlite";
import type { IdempotencyClaim, Store, UsageRecord } from "../store";

const { idempotencyRecords } = schema;

type DB = BunSQLiteDatabase<typeof schema>;

/**
 * Idempotency-Key claims on SQLite. The store's debit batch also completes a billed request's claim
 * in its own transaction (completeIdempotencyRecord) and checks that the claim is still the request's (ownsClaim).
 */
export class SQLiteIdempotency {
  constructor(
    private readonly db: DB,
    private readonly write: <T>(work: (db: DB) => T) => T,
  ) {}

  async claimIdempotencyKey(input: Parameters<Store["claimIdempotencyKey"]>[0]): Promise<IdempotencyClaim> {
    return this.write((tx): IdempotencyClaim => {
      const where = and(eq(idempotencyRecords.scope, input.scope), eq(idempotencyRecords.keyHash, input.keyHash));
      const existing = tx.select().from(idempotencyRecords).where(where).get();
      const reusable =
        existing === undefined ||
        existing.expiresAt <= input.now ||
        (existing.status === "in-progress" && existing.createdAt < input.now - input.abandonAfterMs);
      if (!reusable) return { claimed: false, record: existing };
      const claim = {
        scope: input.scope,
        keyHash: input.keyHash,
        requestHash: input.requestHash,
        status: "in-progress" as const,
        responseStatus: null,
        responseBody: null,
        // One serve process owns a SQLite file, so its clock is the one every claim is judged by.
        createdAt: input.now,
        expiresAt: input.now + input.ttlMs,
      };
      if (existing === undefined) tx.insert(idempotencyRecords).values(claim).run();
      else tx.update(idempotencyRecords).set(claim).where(where).run();
      return { claimed: true, claimedAt: claim.createdAt };
    });
  }

  async completeIdempotencyKey(input: Parameters<Store["completeIdempotencyKey"]>[0]): Promise<void> {
    this.completeIdempotencyRecord(input);
  }

  completeIdempotencyRecord(input: Parameters<Store["completeIdempotencyKey"]>[0]): void {
    this.db
      .update(idempotencyRecords)
      .set({ status: "done", responseStatus: input.responseStatus, responseBody: input.responseBody })
      .where(this.ownClaim(input))
      .run();
  }

  /** The in-progress claim a request made at `claimedAt` (see IdempotencyClaim), if it is still that request's. */
  private ownClaim(claim: { scope: string; keyHash: string; claimedAt: number }) {
    return and(
      eq(idempotencyRecords.scope, claim.scope),
      eq(idempotencyRecords.keyHash, claim.keyHash),
      eq(idempotencyRecords.status, "in-progress"),
      eq(idempotencyRecords.createdAt, claim.claimedAt),
    );
  }

  ownsClaim(usage: UsageRecord): boolean {
    return (
      usage.idempotency === undefined ||
      this.db.select({ scope: idempotencyRecords.scope }).from(idempotencyRecords).where(this.ownClaim(usage.idempotency)).get() !== undefined
    );
  }

  async releaseIdempotencyKey(input: Parameters<Store["releaseIdempotencyKey"]>[0]): Promise<void> {
    this.db.delete(idempotencyRecords).where(this.ownClaim(input)).run();
  }

  async deleteExpiredIdempotencyRecords(now: number): Promise<number> {
    return this.db.delete(idempotencyRecords).where(lte(idempotencyRecords.expiresAt, now)).returning({ scope: idempotencyRecords.scope }).all().length;
  }
}
