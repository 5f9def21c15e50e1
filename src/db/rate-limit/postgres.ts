import type postgres from "postgres";
import type { RateTokenGrant, RateTokenLease, SharedRateBuckets } from "../store";

const byBucket = (a: { bucket: string }, b: { bucket: string }) => (a.bucket < b.bucket ? -1 : a.bucket > b.bucket ? 1 : 0);

/** The shared buckets of rate_limit_buckets, through the functions of migration 0016 (buckets in one order, as they lock). */
export class PostgresRateBuckets implements SharedRateBuckets {
  constructor(private readonly client: postgres.Sql) {}

  async lease(leases: readonly RateTokenLease[], now: number): Promise<RateTokenGrant[]> {
    const sorted = [...leases].sort(byBucket);
    const rows = await this.client<Array<{ leased_bucket: string; granted: number; tokens_left: number }>>`
      SELECT leased_bucket, granted, tokens_left FROM lease_rate_tokens(
        ${now}::bigint, ${sorted.map((lease) => lease.bucket)}::text[], ${sorted.map((lease) => lease.capacity)}::float8[],
        ${sorted.map((lease) => lease.refillPerMs)}::float8[], ${sorted.map((lease) => lease.need)}::float8[],
        ${sorted.map((lease) => lease.ask)}::float8[])`;
    return rows.map((row) => ({ bucket: row.leased_bucket, granted: row.granted, tokensLeft: row.tokens_left }));
  }

  async giveBack(returns: ReadonlyArray<{ bucket: string; amount: number }>): Promise<void> {
    if (returns.length === 0) return;
    const sorted = [...returns].sort(byBucket);
    await this.client`SELECT return_rate_tokens(${sorted.map((entry) => entry.bucket)}::text[], ${sorted.map((entry) => entry.amount)}::float8[])`;
  }
}
