// A debit plan (planDebits) written on SQLite, inside the caller's write transaction: the one writer
// of the group commit's debits and the watch evaluators'.
import type { Database } from "bun:sqlite";
import { newId } from "../../lib/ids";
import { balanceEventData, balanceEventTypes, type NewWebhookEvent } from "../webhooks/records";
import type { DebitPlan } from "./debit-plan";

/** The writer's statements, prepared once per database (bun:sqlite caches `query` by its text). */
const STATEMENTS = {
  bucket: "UPDATE credit_buckets SET remaining = remaining - ?2 WHERE id = ?1",
  sum: "UPDATE organizations SET ledger_balance = ledger_balance - ?2 WHERE id = ?1",
  usage: `INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
          VALUES (?1, ?2, 'usage', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)`,
  counter: `INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
            ON CONFLICT (organization_id, period_ms, period_start, key_id, reason) DO UPDATE SET requests = requests + excluded.requests, credits = credits + excluded.credits`,
  spending: `INSERT INTO api_key_monthly_usage (key_id, month, spent) VALUES (?1, ?2, ?3)
             ON CONFLICT (key_id, month) DO UPDATE SET spent = spent + excluded.spent`,
} as const;

/**
 * The buckets, the organizations' sums, the usage rows, the usage counters under `reason`, the key
 * lines' monthly spending, and the balance events (through `emit`, in the same transaction).
 */
export function writePlanSQLite(database: Database, plan: DebitPlan, options: { reason: string; emit(events: NewWebhookEvent[]): void }): void {
  for (const bucket of plan.buckets) database.query(STATEMENTS.bucket).run(bucket.id, bucket.amount);
  for (const organization of plan.organizations) database.query(STATEMENTS.sum).run(organization.id, organization.amount);
  const usage = database.query(STATEMENTS.usage);
  for (const row of plan.ledger) {
    usage.run(row.id, row.organizationId, row.amount, row.balanceAfter, row.bucketId, row.keyId, row.requestId, row.gtin, row.description, row.createdAt);
  }
  const counter = database.query(STATEMENTS.counter);
  for (const c of plan.counters) counter.run(c.organizationId, c.periodMs, c.periodStart, c.keyId, options.reason, c.requests, c.credits);
  const spending = database.query(STATEMENTS.spending);
  for (const s of plan.spending) spending.run(s.line, s.month, s.spent);
  for (const { organizationId, after, threshold, createdAt, before } of plan.crossings) {
    options.emit(
      balanceEventTypes(before, after, threshold).map((type) => ({
        id: newId("msg", createdAt),
        organizationId,
        type,
        data: balanceEventData(type, organizationId, after, threshold),
        createdAt,
      })),
    );
  }
}
