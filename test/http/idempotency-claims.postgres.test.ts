import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { drizzle } from "drizzle-orm/postgres-js";
import type postgres from "postgres";
import { TRANSACTION_ATTEMPTS } from "../../src/db/database-errors";
import { PostgresIdempotency } from "../../src/db/idempotency/postgres";
import { applyPostgresMigrations } from "../../src/db/migrate";
import { openPostgresClient } from "../../src/db/postgres-client";
import * as schema from "../../src/db/schema/postgres";
import { createTestDatabase, type TestDatabase } from "../support/context";

// A claim is one statement; when it finds the key claimed by another request, a second statement
// reads that record. Here the other request's record is released between the two (as when its
// request fails at that moment): the claim tries again rather than answering with no record.
let database: TestDatabase;
let sql: postgres.Sql;

beforeEach(async () => {
  database = await createTestDatabase();
  await applyPostgresMigrations(database.url);
  sql = openPostgresClient(database.url);
});

afterEach(async () => {
  await sql.end();
  await database.drop();
});

const claim = { scope: "org POST /x", keyHash: "key-1", requestHash: "body", ttlMs: 86_400_000, abandonAfterMs: 60_000 };

/**
 * Claims on a client around which another request holds the key before each claiming statement
 * (its record written afresh) and releases it right after, for the first `releases` statements.
 */
function claimsWithReleases(releases: number): { idempotency: PostgresIdempotency; statements: () => number } {
  let statements = 0;
  const client = ((strings: TemplateStringsArray, ...values: unknown[]) => {
    statements++;
    const racing = statements <= releases;
    const other = racing
      ? sql`INSERT INTO idempotency_records (scope, key_hash, request_hash, status, created_at, expires_at)
            VALUES (${claim.scope}, ${claim.keyHash}, 'other', 'in-progress', (extract(epoch from now()) * 1000)::bigint, ${Date.now() + claim.ttlMs})`
      : Promise.resolve();
    return other.then(async () => {
      const rows = await sql(strings, ...(values as never[]));
      if (racing) await sql`DELETE FROM idempotency_records WHERE scope = ${claim.scope} AND key_hash = ${claim.keyHash}`;
      return rows;
    });
  }) as unknown as postgres.Sql;
  const idempotency = new PostgresIdempotency(client, drizzle(sql, { schema }), () => sql`(extract(epoch from now()) * 1000)::bigint`);
  return { idempotency, statements: () => statements };
}

describe("an Idempotency-Key claim on PostgreSQL whose rival record is released in between", () => {
  test("claims on its next attempt", async () => {
    const { idempotency, statements } = claimsWithReleases(1);
    const result = await idempotency.claimIdempotencyKey({ ...claim, now: Date.now() });
    expect(result.claimed).toBe(true);
    expect(statements()).toBe(2);
    const [record] = await sql`SELECT request_hash, status FROM idempotency_records WHERE scope = ${claim.scope} AND key_hash = ${claim.keyHash}`;
    expect(record).toEqual({ request_hash: "body", status: "in-progress" });
  });

  test(`gives up after ${TRANSACTION_ATTEMPTS} attempts when it keeps changing`, async () => {
    // Ten releases in a row: more than it tries, and few enough that a claim that never gave up ends.
    const { idempotency, statements } = claimsWithReleases(10);
    await expect(idempotency.claimIdempotencyKey({ ...claim, now: Date.now() })).rejects.toThrow("claimIdempotencyKey: the record keeps changing");
    expect(statements()).toBe(TRANSACTION_ATTEMPTS);
  });
});
