import type postgres from "postgres";
import { retrying } from "../postgres-retry";
import { DAY_MS, HOUR_MS, type UsageCount, type UsageTotal } from "../store";

/** Usage counters on PostgreSQL: requests and credits per organization, key and reason, by hour and by day (the debit statements count billed look-ups themselves). */
export class PostgresUsage {
  constructor(private readonly client: postgres.Sql) {}

  // One statement per flush; merged per row first (PostgreSQL refuses to update a row twice in one
  // statement) and in one order, so flushes of several instances lock rows alike.
  async addUsageCounts(counts: UsageCount[]): Promise<void> {
    if (counts.length === 0) return;
    const merged = new Map<string, UsageCount>();
    for (const count of counts) {
      const id = `${count.organizationId}\u0000${count.hourStart}\u0000${count.keyId}\u0000${count.reason}`;
      const seen = merged.get(id);
      if (seen === undefined) merged.set(id, { ...count });
      else seen.requests += count.requests;
    }
    const rows = [...merged.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, count]) => ({
        organization_id: count.organizationId,
        hour_start: count.hourStart,
        key_id: count.keyId,
        reason: count.reason,
        requests: count.requests,
      }));
    await retrying(
      () => this.client`
        INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits)
        SELECT organization_id, periods.ms, hour_start - hour_start % periods.ms, key_id, reason, sum(requests), 0
        FROM jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb) AS input(organization_id text, hour_start bigint, key_id text, reason text, requests bigint)
        CROSS JOIN (VALUES (${HOUR_MS}::int), (${DAY_MS}::int)) AS periods(ms)
        GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (organization_id, period_ms, period_start, key_id, reason) DO UPDATE SET requests = usage_counters.requests + excluded.requests`,
    );
  }

  async usageTotals(organizationId: string, query: { from: number; to: number; periodMs: number; byKey: boolean }): Promise<UsageTotal[]> {
    const keyColumn = query.byKey ? this.client`key_id` : this.client`''::text`;
    const rows = await this.client<Array<{ period_start: string; key_id: string; reason: string; requests: string; credits: string }>>`
      SELECT period_start, ${keyColumn} AS key_id, reason, sum(requests) AS requests, sum(credits) AS credits
      FROM usage_counters WHERE organization_id = ${organizationId} AND period_ms = ${query.periodMs}::int AND period_start >= ${query.from}::bigint AND period_start < ${query.to}::bigint
      GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`;
    return rows.map((row) => ({
      periodStart: Number(row.period_start),
      keyId: row.key_id,
      reason: row.reason,
      requests: Number(row.requests),
      credits: Number(row.credits),
    }));
  }
}
