import type { Database } from "bun:sqlite";
import { periodStartOf, USAGE_PERIODS_MS, type UsageCount, type UsageTotal } from "../store";

/**
 * Usage counters on SQLite: requests and credits per organization, key and reason, by hour and by
 * day. The billed look-ups are counted inside their debit's transaction (addUsageCount); the rest
 * are flushed in batches (addUsageCounts).
 */
export class SQLiteUsage {
  constructor(
    private readonly database: Database,
    private readonly writeKeepingCaches: <T>(work: () => T) => T,
  ) {}

  /** Prepares a statement on first use, so the statement is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  // Adds to a usage counter row (requests and credits), creating it at zero first.
  private readonly upsertUsageCounter = this.lazy(() =>
    this.database.prepare<unknown, [string, number, number, string, string, number, number]>(
      `INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
       ON CONFLICT (organization_id, period_ms, period_start, key_id, reason) DO UPDATE SET requests = requests + excluded.requests, credits = credits + excluded.credits`,
    ),
  );

  /** Adds to the hour's row and the day's row of a count. */
  addUsageCount(organizationId: string, hourStart: number, keyId: string, reason: string, requests: number, credits: number): void {
    for (const periodMs of USAGE_PERIODS_MS)
      this.upsertUsageCounter().run(organizationId, periodMs, periodStartOf(hourStart, periodMs), keyId, reason, requests, credits);
  }

  async addUsageCounts(counts: UsageCount[]): Promise<void> {
    if (counts.length === 0) return;
    this.writeKeepingCaches(() => {
      for (const count of counts) this.addUsageCount(count.organizationId, count.hourStart, count.keyId, count.reason, count.requests, 0);
    });
  }

  async usageTotals(organizationId: string, query: { from: number; to: number; periodMs: number; byKey: boolean }): Promise<UsageTotal[]> {
    const statement = query.byKey ? this.usageTotalsByKey() : this.usageTotalsByReason();
    return statement.all(organizationId, query.periodMs, query.from, query.to);
  }

  private readonly usageTotalsByReason = this.lazy(() =>
    this.database.prepare<UsageTotal, [string, number, number, number]>(
      `SELECT period_start AS periodStart, '' AS keyId, reason, sum(requests) AS requests, sum(credits) AS credits
       FROM usage_counters WHERE organization_id = ?1 AND period_ms = ?2 AND period_start >= ?3 AND period_start < ?4
       GROUP BY period_start, reason ORDER BY period_start, reason`,
    ),
  );

  private readonly usageTotalsByKey = this.lazy(() =>
    this.database.prepare<UsageTotal, [string, number, number, number]>(
      `SELECT period_start AS periodStart, key_id AS keyId, reason, requests, credits
       FROM usage_counters WHERE organization_id = ?1 AND period_ms = ?2 AND period_start >= ?3 AND period_start < ?4
       ORDER BY period_start, key_id, reason`,
    ),
  );
}
