import type { Database } from "bun:sqlite";
import { type LockedState, planDebits } from "../ledger/debit-plan";
import { writePlanSQLite } from "../ledger/sqlite-plan";
import { page } from "../rows";
import { SQLiteWebhooks } from "../webhooks/sqlite";
import type { Page } from "../store";
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
  type WatchUpdate,
} from "./records";

const WATCH_SELECT = `SELECT id, organization_id AS organizationId, gtin, merchant_id AS merchantId, trigger, below_amount AS belowAmount, below_currency AS belowCurrency,
  status, paused_reason AS pausedReason, armed, last_merchant_id AS lastMerchantId, last_price AS lastPrice, last_currency AS lastCurrency,
  last_availability AS lastAvailability, last_observed_at AS lastObservedAt, created_at AS createdAt, last_triggered_at AS lastTriggeredAt FROM price_watches`;

interface WatchDatabaseRow {
  id: string;
  organizationId: string;
  gtin: string;
  merchantId: string | null;
  trigger: PriceWatch["trigger"];
  belowAmount: number | null;
  belowCurrency: string | null;
  status: PriceWatch["status"];
  pausedReason: PriceWatch["pausedReason"];
  armed: number;
  lastMerchantId: string | null;
  lastPrice: number | null;
  lastCurrency: string | null;
  lastAvailability: string | null;
  lastObservedAt: number | null;
  createdAt: number;
  lastTriggeredAt: number | null;
}

function toWatchRow(row: WatchDatabaseRow): WatchRow {
  return {
    id: row.id,
    organizationId: row.organizationId,
    gtin: row.gtin,
    merchantId: row.merchantId,
    trigger: row.trigger,
    below: row.belowAmount === null || row.belowCurrency === null ? null : { amount: row.belowAmount, currency: row.belowCurrency },
    status: row.status,
    pausedReason: row.pausedReason,
    createdAt: row.createdAt,
    lastTriggeredAt: row.lastTriggeredAt,
    armed: row.armed === 1,
    last: {
      merchantId: row.lastMerchantId,
      price: row.lastPrice,
      currency: row.lastCurrency,
      availability: row.lastAvailability,
      observedAt: row.lastObservedAt,
    },
  };
}

/**
 * The SQLite store's price watches. The evaluator's run is one write transaction on the store's
 * connection: the queued changes it consumes, the events, their debit, the watches' state.
 * `spendableBuckets` is the store's own: an organization's unexpired buckets in FEFO order, less
 * what requests in flight of this process hold, so a watch event never takes held credits.
 */
type Evaluated = ReturnType<typeof evaluateWatches>;

export class SQLiteWatches {
  private readonly webhooks: SQLiteWebhooks;

  constructor(
    private readonly database: Database,
    private readonly spendableBuckets: (organizationId: string, now: number) => Array<{ id: string; free: number }>,
  ) {
    this.webhooks = new SQLiteWebhooks(database);
  }

  private readonly statements = new Map<string, ReturnType<Database["prepare"]>>();
  private statement(text: string) {
    let prepared = this.statements.get(text);
    if (prepared === undefined) {
      prepared = this.database.prepare(text);
      this.statements.set(text, prepared);
    }
    return prepared;
  }

  private offersOf(gtins: string[]): OfferState[] {
    return this.statement(
      `SELECT gtin, merchant_id AS merchantId, price_amount AS price, currency, availability, observed_at AS observedAt
       FROM offers WHERE gtin IN (SELECT value FROM json_each(?1))`,
    ).all(JSON.stringify(gtins)) as OfferState[];
  }

  create(watch: NewWatch, rules: { limit: number; freshnessWindowMs: number }): CreateWatchResult {
    return this.database
      .transaction((): CreateWatchResult => {
        const { count } = this.statement("SELECT count(*) AS count FROM price_watches WHERE organization_id = ?1").get(watch.organizationId) as {
          count: number;
        };
        if (count >= rules.limit) return { ok: false, limit: rules.limit };
        const state = currentState(watch, this.offersOf([watch.gtin]), watch.now, rules.freshnessWindowMs);
        this.statement(
          `INSERT INTO price_watches (id, organization_id, gtin, merchant_id, trigger, below_amount, below_currency, status, paused_reason, armed,
           last_merchant_id, last_price, last_currency, last_availability, last_observed_at, created_at, last_triggered_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'active', NULL, ?8, ?9, ?10, ?11, ?12, ?13, ?14, NULL)`,
        ).run(
          watch.id,
          watch.organizationId,
          watch.gtin,
          watch.merchantId,
          watch.trigger,
          watch.below?.amount ?? null,
          watch.below?.currency ?? null,
          initialArming(watch, state) ? 1 : 0,
          state.merchantId,
          state.price,
          state.currency,
          state.availability,
          state.observedAt,
          watch.now,
        );
        return { ok: true, watch: publicWatch(this.row(watch.organizationId, watch.id)!) };
      })
      .immediate();
  }

  private row(organizationId: string, id: string): WatchRow | null {
    const row = this.statement(`${WATCH_SELECT} WHERE id = ?1 AND organization_id = ?2`).get(id, organizationId) as WatchDatabaseRow | null;
    return row === null ? null : toWatchRow(row);
  }

  get(organizationId: string, id: string): PriceWatch | null {
    const row = this.row(organizationId, id);
    return row === null ? null : publicWatch(row);
  }

  list(organizationId: string, query: { limit: number; after?: string }): Page<PriceWatch> {
    const rows = this.statement(`${WATCH_SELECT} WHERE organization_id = ?1 AND (?2 IS NULL OR id < ?2) ORDER BY id DESC LIMIT ?3`).all(
      organizationId,
      query.after ?? null,
      query.limit + 1,
    ) as WatchDatabaseRow[];
    return page(
      rows.map((row) => publicWatch(toWatchRow(row))),
      query.limit,
    );
  }

  delete(organizationId: string, id: string): boolean {
    return this.statement("DELETE FROM price_watches WHERE id = ?1 AND organization_id = ?2").run(id, organizationId).changes === 1;
  }

  private spendable(organizationId: string, now: number): number {
    return this.spendableBuckets(organizationId, now).reduce((sum, bucket) => sum + bucket.free, 0);
  }

  run(input: WatchBatchInput): WatchBatchResult {
    // Reads first: an idle run writes nothing (a write would also drop the store's read caches).
    const queued = this.statement("SELECT 1 FROM watch_changes LIMIT 1").get() !== null;
    const paused = (this.statement("SELECT DISTINCT organization_id AS id FROM price_watches WHERE status = 'paused'").all() as Array<{ id: string }>).map(
      (row) => row.id,
    );
    const payable = paused.filter((organizationId) => this.spendable(organizationId, input.now) >= input.creditCost);
    if (!queued && payable.length === 0) return { changes: 0, events: 0, paused: 0, resumed: 0 };
    return this.database
      .transaction((): WatchBatchResult => {
        let resumed = 0;
        for (const organizationId of payable) {
          resumed += this.statement("UPDATE price_watches SET status = 'active', paused_reason = NULL WHERE organization_id = ?1 AND status = 'paused'").run(
            organizationId,
          ).changes;
        }
        const changes = this.statement("SELECT id, gtin FROM watch_changes ORDER BY id LIMIT ?1").all(input.limit) as Array<{ id: number; gtin: string }>;
        if (changes.length === 0) return { changes: 0, events: 0, paused: 0, resumed };
        this.statement("DELETE FROM watch_changes WHERE id <= ?1").run(changes[changes.length - 1]!.id);
        const gtins = [...new Set(changes.map((change) => change.gtin))];
        const watches = (
          this.statement(`${WATCH_SELECT} WHERE gtin IN (SELECT value FROM json_each(?1)) ORDER BY id`).all(JSON.stringify(gtins)) as WatchDatabaseRow[]
        ).map(toWatchRow);
        const { fired, moved } = evaluateWatches(watches, this.offersOf(gtins), input);
        const charged = fired.length > 0 ? this.chargeFired(fired, input) : { events: 0, paused: 0, updates: [] };
        moved.push(...charged.updates);
        for (const update of moved) this.writeState(update);
        return { changes: changes.length, events: charged.events, paused: charged.paused, resumed };
      })
      .immediate();
  }

  /** Charges the watches that fired (their debits, balance events and notifications), and pauses those whose organization could not pay. */
  private chargeFired(fired: Evaluated["fired"], input: WatchBatchInput): { events: number; paused: number; updates: Evaluated["moved"] } {
    const plan = planDebits(
      fired.map((watch) => watch.debit),
      this.lockedState([...new Set(fired.map((watch) => watch.watch.organizationId))].sort(), input.now),
    );
    writePlanSQLite(this.database, plan, { reason: WATCH_USAGE_REASON, emit: (events) => this.webhooks.emit(events) });
    const settled = settleWatches(fired, new Set(plan.committed), input.now);
    this.webhooks.emit(settled.events);
    let paused = 0;
    for (const organizationId of settled.unpaid) {
      paused += this.statement(
        "UPDATE price_watches SET status = 'paused', paused_reason = 'insufficient-credits' WHERE organization_id = ?1 AND status = 'active'",
      ).run(organizationId).changes;
    }
    return { events: settled.events.length, paused, updates: settled.updates };
  }

  /** The organizations' sums and spendable buckets (less what requests of this process hold), as the debit planner reads them. */
  private lockedState(organizations: string[], now: number): LockedState {
    const sums = new Map<string, { ledgerBalance: number; lowCreditThreshold: number | null }>();
    const buckets: LockedState["buckets"] = [];
    for (const organizationId of organizations) {
      sums.set(
        organizationId,
        this.statement("SELECT ledger_balance AS ledgerBalance, low_credit_threshold AS lowCreditThreshold FROM organizations WHERE id = ?1").get(
          organizationId,
        ) as {
          ledgerBalance: number;
          lowCreditThreshold: number | null;
        },
      );
      for (const bucket of this.spendableBuckets(organizationId, now)) buckets.push({ id: bucket.id, organizationId, remaining: bucket.free });
    }
    return { buckets, organizations: sums, keys: new Map() };
  }

  private writeState(update: WatchUpdate): void {
    const { state } = update;
    this.statement(
      `UPDATE price_watches SET armed = ?2, last_merchant_id = ?3, last_price = ?4, last_currency = ?5, last_availability = ?6, last_observed_at = ?7,
         last_triggered_at = coalesce(?8, last_triggered_at) WHERE id = ?1`,
    ).run(update.id, update.armed ? 1 : 0, state.merchantId, state.price, state.currency, state.availability, state.observedAt, update.triggeredAt);
  }
}
