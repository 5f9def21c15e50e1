import { describe, expect, test } from "bun:test";
import postgres from "postgres";
import { fefoOrder } from "./allocation";
import { cappedKey, fefo } from "./postgres-debits";

/** The strings array postgres.js keys its per-query memory by (its `origin` cache), which the typings do not expose. */
const stringsOf = (query: postgres.PendingQuery<postgres.Row[]>) => (query as unknown as { strings: readonly string[] }).strings;

describe("constant fragments of the PostgreSQL statements", () => {
  // No connection is opened: postgres.js connects on a query's first execution.
  const sql = postgres("postgres://127.0.0.1:1/none", { max: 1 });

  test("each text is one strings array, whatever the number of statements, so postgres.js keeps one entry per text", () => {
    expect(stringsOf(fefo(sql))).toBe(stringsOf(fefo(sql)));
    expect(stringsOf(fefo(sql, "credit_buckets"))).toBe(stringsOf(fefo(sql, "credit_buckets")));
    expect(stringsOf(cappedKey(sql))).toBe(stringsOf(cappedKey(sql)));
  });

  test("the fragment is its text, as a template literal written inline would be", () => {
    expect([...stringsOf(fefo(sql))]).toEqual([fefoOrder()]);
    expect([...stringsOf(fefo(sql, "credit_buckets"))]).toEqual([fefoOrder("credit_buckets")]);
    expect(stringsOf(fefo(sql))).not.toBe(stringsOf(fefo(sql, "credit_buckets")));
    expect([...stringsOf(cappedKey(sql))]).toEqual(["(monthly_credit_limit IS NOT NULL OR status <> 'ACTIVE')"]);
  });
});
