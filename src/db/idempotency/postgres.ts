import { and, eq, lte } from "drizzle-orm";
import type { PostgresJsDatabase } from "drizzle-orm/postgres-js";
import type postgres from "postgres";
import { TRANSACTION_ATTEMPTS } from "../database-errors";
import * as schema from "../schema/postgres";
import type { IdempotencyClaim, Store } from "../store";

const { idempotencyRecords } = schema;

type DB = PostgresJsDatabase<typeof schema>;

/** Idempotency-Key claims on PostgreSQL; `databaseNow` is the store's reading of the database's clock. */
export class PostgresIdempotency {
  constructor(
    private readonly client: postgres.Sql,
    private readonly db: DB,
    private readonly databaseNow: () => postgres.PendingQuery<postgres.Row[]>,
  ) {}

  // Invariant: one statement claims: the insert, or the takeover of an expired or abandoned record
  // (a conditional update of the conflicting row, which PostgreSQL re-checks under its row lock), so
  // of two instances claiming one key at once exactly one gets it. A claim is dated by the database's
  // own time (databaseNow), the one clock every instance shares, so an instance whose clock runs
  // ahead cannot take over a claim whose request is still running. Only the 24 h expiry of stored
  // answers follows the caller's clock: a minute of skew there replays or re-runs nothing unsafe.
  async claimIdempotencyKey(input: Parameters<Store["claimIdempotencyKey"]>[0]): Promise<IdempotencyClaim> {
    for (let attempt = 1; ; attempt++) {
      const claimed = await this.client<Array<{ created_at: string }>>`
        INSERT INTO idempotency_records (scope, key_hash, request_hash, status, response_status, response_body, created_at, expires_at)
        VALUES (${input.scope}, ${input.keyHash}, ${input.requestHash}, 'in-progress', NULL, NULL, ${this.databaseNow()}, ${input.now + input.ttlMs})
        ON CONFLICT (scope, key_hash) DO UPDATE SET
          request_hash = excluded.request_hash, status = excluded.status, response_status = NULL, response_body = NULL,
          created_at = excluded.created_at, expires_at = excluded.expires_at
        WHERE idempotency_records.expires_at <= ${input.now}
           OR (idempotency_records.status = 'in-progress' AND idempotency_records.created_at < excluded.created_at - ${input.abandonAfterMs}::bigint)
        RETURNING created_at`;
      if (claimed.length === 1) return { claimed: true, claimedAt: Number(claimed[0]!.created_at) };
      const [record] = await this.db
        .select()
        .from(idempotencyRecords)
        .where(and(eq(idempotencyRecords.scope, input.scope), eq(idempotencyRecords.keyHash, input.keyHash)));
      if (record !== undefined) return { claimed: false, record };
      // The record was released between the two statements: claim again.
      if (attempt >= TRANSACTION_ATTEMPTS) throw new Error("claimIdempotencyKey: the record keeps changing");
    }
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

  async completeIdempotencyKey(input: Parameters<Store["completeIdempotencyKey"]>[0]): Promise<void> {
    await this.db
      .update(idempotencyRecords)
      .set({ status: "done", responseStatus: input.responseStatus, responseBody: input.responseBody })
      .where(this.ownClaim(input));
  }

  async releaseIdempotencyKey(input: Parameters<Store["releaseIdempotencyKey"]>[0]): Promise<void> {
    await this.db.delete(idempotencyRecords).where(this.ownClaim(input));
  }

  async deleteExpiredIdempotencyRecords(now: number): Promise<number> {
    const deleted = await this.db.delete(idempotencyRecords).where(lte(idempotencyRecords.expiresAt, now)).returning({ scope: idempotencyRecords.scope });
    return deleted.length;
  }
}
