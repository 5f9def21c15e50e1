import type { SQL } from "drizzle-orm";
import { PgDialect } from "drizzle-orm/pg-core";
import type postgres from "postgres";
import { emitPostgres } from "../webhooks/postgres";
import { planDebits } from "../ledger/debit-plan";
import { lockedStateOf, lockStatements, writePlan } from "../ledger/postgres-debits";
import { page } from "../rows";
import type { Page } from "../store";
import type { NewWebhookEvent } from "../webhooks/records";
import {
  type CreateWatchResult,
  currentState,
  evaluateWatches,
  initialArming,
  type NewWatch,
  type OfferState,
  type PriceWatch,
  publicWatch,
  settleWatches,
  WATCH_USAGE_REASON,
  type WatchBatchInput,
  type WatchBatchResult,
  type WatchRow,
} from "./records";

type Sql = postgres.Sql | postgres.TransactionSql;
type Evaluated = ReturnType<typeof evaluateWatches>;

const WATCH_COLUMNS = `id, organization_id, gtin, merchant_id, trigger, below_amount, below_currency, status, paused_reason, armed, last_merchant_id,
  last_price, last_currency, last_availability, last_observed_at, created_at, last_triggered_at`;

interface WatchDatabaseRow {
  id: string;
  organization_id: string;
  gtin: string;
  merchant_id: string | null;
  trigger: PriceWatch["trigger"];
  below_amount: string | null;
  below_currency: string | null;
  status: PriceWatch["status"];
  paused_reason: PriceWatch["pausedReason"];
  armed: boolean;
  last_merchant_id: string | null;
  last_price: string | null;
  last_currency: string | null;
  last_availability: string | null;
  last_observed_at: string | null;
  created_at: string;
  last_triggered_at: string | null;
}

const numberOrNull = (value: string | null) => (value === null ? null : Number(value));

function toWatchRow(row: WatchDatabaseRow): WatchRow {
  return {
    id: row.id,
    organizationId: row.organization_id,
    gtin: row.gtin,
    merchantId: row.merchant_id,
    trigger: row.trigger,
    below: row.below_amount === null || row.below_currency === null ? null : { amount: Number(row.below_amount), currency: row.below_currency },
    status: row.status,
    pausedReason: row.paused_reason,
    createdAt: Number(row.created_at),
    lastTriggeredAt: numberOrNull(row.last_triggered_at),
    armed: row.armed,
    last: {
      merchantId: row.last_merchant_id,
      price: numberOrNull(row.last_price),
      currency: row.last_currency,
      availability: row.last_availability,
      observedAt: numberOrNull(row.last_observed_at),
    },
  };
}

/** A deadlock or a serialization failure: another transaction won; the run is retried from the start. */
function isRetryable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === "40P01" || code === "40001";
}

const dialect = new PgDialect();

/** Writes events and their deliveries inside `tx`, through the outbox's own writer. */
async function emit(tx: Sql, events: NewWebhookEvent[]): Promise<void> {
  await emitPostgres(
    {
      execute: (query: SQL) => {
        const { sql, params } = dialect.sqlToQuery(query);
        return tx.unsafe(sql, params as never[]);
      },
    },
    events,
  );
}

/**
 * The PostgreSQL store's price watches. An evaluator run is one transaction: it takes queued changes
 * with SKIP LOCKED (instances take different ones) and locks the changed products' watches, so two
 * instances never evaluate a watch at once; the debit locks the buckets and the organizations' sums
 * in the group commit's order (buckets, then sums), so it never deadlocks with a look-up's debit.
 */
export class PostgresWatches {
  constructor(private readonly client: postgres.Sql) {}

  private async offersOf(sql: Sql, gtins: string[]): Promise<OfferState[]> {
    const rows = await sql<Array<{ gtin: string; merchant_id: string; price_amount: string; currency: string; availability: string; observed_at: string }>>`
      SELECT gtin, merchant_id, price_amount, currency, availability, observed_at FROM offers WHERE gtin = ANY(${gtins}::text[])`;
    return rows.map((row) => ({
      gtin: row.gtin,
      merchantId: row.merchant_id,
      price: Number(row.price_amount),
      currency: row.currency,
      availability: row.availability,
      observedAt: Number(row.observed_at),
    }));
  }

  async create(watch: NewWatch, rules: { limit: number; freshnessWindowMs: number }): Promise<CreateWatchResult> {
    return this.client.begin(async (tx): Promise<CreateWatchResult> => {
      // The organization's row serializes its watch creations, so the limit holds across instances.
      await tx`SELECT 1 FROM organizations WHERE id = ${watch.organizationId} FOR NO KEY UPDATE`;
      const [{ count }] = await tx<[{ count: string }]>`SELECT count(*) AS count FROM price_watches WHERE organization_id = ${watch.organizationId}`;
      if (Number(count) >= rules.limit) return { ok: false, limit: rules.limit };
      const state = currentState(watch, await this.offersOf(tx, [watch.gtin]), watch.now, rules.freshnessWindowMs);
      const [row] = await tx<WatchDatabaseRow[]>`
        INSERT INTO price_watches (id, organization_id, gtin, merchant_id, trigger, below_amount, below_currency, status, paused_reason, armed,
          last_merchant_id, last_price, last_currency, last_availability, last_observed_at, created_at, last_triggered_at)
        VALUES (${watch.id}, ${watch.organizationId}, ${watch.gtin}, ${watch.merchantId}, ${watch.trigger}, ${watch.below?.amount ?? null}, ${watch.below?.currency ?? null},
          'active', NULL, ${initialArming(watch, state)}, ${state.merchantId}, ${state.price}, ${state.currency}, ${state.availability}, ${state.observedAt}, ${watch.now}, NULL)
        RETURNING ${tx.unsafe(WATCH_COLUMNS)}`;
      return { ok: true, watch: publicWatch(toWatchRow(row!)) };
    }) as Promise<CreateWatchResult>;
  }

  async get(organizationId: string, id: string): Promise<PriceWatch | null> {
    const [row] = await this.client<
      WatchDatabaseRow[]
    >`SELECT ${this.client.unsafe(WATCH_COLUMNS)} FROM price_watches WHERE id = ${id} AND organization_id = ${organizationId}`;
    return row === undefined ? null : publicWatch(toWatchRow(row));
  }

  async list(organizationId: string, query: { limit: number; after?: string }): Promise<Page<PriceWatch>> {
    const rows = await this.client<WatchDatabaseRow[]>`
      SELECT ${this.client.unsafe(WATCH_COLUMNS)} FROM price_watches
      WHERE organization_id = ${organizationId} AND (${query.after ?? null}::text IS NULL OR id < ${query.after ?? null}::text)
      ORDER BY id DESC LIMIT ${query.limit + 1}`;
    return page(
      rows.map((row) => publicWatch(toWatchRow(row))),
      query.limit,
    );
  }

  async delete(organizationId: string, id: string): Promise<boolean> {
    const deleted = await this.client`DELETE FROM price_watches WHERE id = ${id} AND organization_id = ${organizationId}`;
    return deleted.count === 1;
  }

  async run(input: WatchBatchInput): Promise<WatchBatchResult> {
    // Reads first: an idle run begins no transaction.
    const [queued] = await this.client`SELECT 1 FROM watch_changes LIMIT 1`;
    const payable = await this.client<Array<{ id: string }>>`
      SELECT p.organization_id AS id FROM (SELECT DISTINCT organization_id FROM price_watches WHERE status = 'paused') p
      WHERE (SELECT coalesce(sum(remaining), 0) FROM credit_buckets b
             WHERE b.organization_id = p.organization_id AND b.remaining > 0 AND (b.expires_at IS NULL OR b.expires_at > ${input.now})) >= ${input.creditCost}`;
    if (queued === undefined && payable.length === 0) return { changes: 0, events: 0, paused: 0, resumed: 0 };
    for (let attempt = 1; ; attempt++) {
      try {
        return (await this.client.begin((tx) =>
          this.runIn(
            tx,
            input,
            payable.map((row) => row.id),
          ),
        )) as WatchBatchResult;
      } catch (error) {
        if (!isRetryable(error) || attempt >= 5) throw error;
      }
    }
  }

  private async runIn(tx: postgres.TransactionSql, input: WatchBatchInput, payable: string[]): Promise<WatchBatchResult> {
    let resumed = 0;
    if (payable.length > 0) {
      resumed = (
        await tx`UPDATE price_watches SET status = 'active', paused_reason = NULL WHERE organization_id = ANY(${payable}::text[]) AND status = 'paused'`
      ).count;
    }
    const changes = await tx<Array<{ gtin: string }>>`
      DELETE FROM watch_changes WHERE id IN (SELECT id FROM watch_changes ORDER BY id LIMIT ${input.limit} FOR UPDATE SKIP LOCKED) RETURNING gtin`;
    if (changes.length === 0) return { changes: 0, events: 0, paused: 0, resumed };
    const gtins = [...new Set(changes.map((change) => change.gtin))].sort();
    const watchRows = await tx<WatchDatabaseRow[]>`
      SELECT ${tx.unsafe(WATCH_COLUMNS)} FROM price_watches WHERE gtin = ANY(${gtins}::text[]) ORDER BY id FOR UPDATE`;
    const watches = watchRows.map(toWatchRow);
    const { fired, moved } = evaluateWatches(watches, await this.offersOf(tx, gtins), input);
    let paused = 0;
    let events = 0;
    if (fired.length > 0) {
      const charged = await this.chargeFired(tx, fired, input);
      events = charged.events;
      moved.push(...charged.updates);
      paused = charged.paused;
    }
    if (moved.length > 0) await this.saveWatchStates(tx, moved);
    return { changes: changes.length, events, paused, resumed };
  }

  /** Charges the watches that fired (their debits, balance events and notifications), and pauses those whose organization could not pay. */
  private async chargeFired(
    tx: postgres.TransactionSql,
    fired: Evaluated["fired"],
    input: WatchBatchInput,
  ): Promise<{ events: number; paused: number; updates: Evaluated["moved"] }> {
    const organizations = [...new Set(fired.map((watch) => watch.watch.organizationId))].sort();
    const [buckets, sums, keys] = lockStatements(tx, { organizations, keyIds: [], rowIds: [], now: input.now });
    const locked = lockedStateOf(await buckets, await sums, await keys);
    const plan = planDebits(
      fired.map((watch) => watch.debit),
      locked,
    );
    if (plan.committed.length > 0) await writePlan(tx, plan, { reason: WATCH_USAGE_REASON });
    const settled = settleWatches(fired, new Set(plan.committed), input.now);
    await emit(tx, settled.events);
    let paused = 0;
    if (settled.unpaid.length > 0) {
      paused = (
        await tx`UPDATE price_watches SET status = 'paused', paused_reason = 'insufficient-credits' WHERE organization_id = ANY(${settled.unpaid}::text[]) AND status = 'active'`
      ).count;
    }
    return { events: settled.events.length, paused, updates: settled.updates };
  }

  /** Stores the watches' new armed state and last seen offer. */
  private async saveWatchStates(tx: postgres.TransactionSql, moved: Evaluated["moved"]): Promise<void> {
    const rows = moved.map((update) => ({
      id: update.id,
      armed: update.armed,
      merchant_id: update.state.merchantId,
      price: update.state.price,
      currency: update.state.currency,
      availability: update.state.availability,
      observed_at: update.state.observedAt,
      triggered_at: update.triggeredAt,
    }));
    await tx`
        UPDATE price_watches w SET armed = t.armed, last_merchant_id = t.merchant_id, last_price = t.price, last_currency = t.currency,
          last_availability = t.availability, last_observed_at = t.observed_at, last_triggered_at = coalesce(t.triggered_at, w.last_triggered_at)
        FROM jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb)
          AS t(id text, armed boolean, merchant_id text, price bigint, currency text, availability text, observed_at bigint, triggered_at bigint)
        WHERE w.id = t.id`;
  }
}
