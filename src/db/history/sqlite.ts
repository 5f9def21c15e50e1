import type { Database, Statement } from "bun:sqlite";
import type { Page } from "../store";
import { CURRENT_STATE_POSITION, DAY_MS, dayRange, historyPage, type HistoryQuery, type PriceDayRecord, type PriceHistoryReads, type PriceStateRecord } from "./records";

/**
 * Every state of a product's offers and the time it held: the states the history table keeps, then
 * each offer's current one (from `state_since`, still holding). Parameters: ?1 the GTIN, ?2 a merchant
 * id or null for all.
 */
const RANGED_STATES = `
  states AS (
    SELECT merchant_id, price_amount, currency, shipping_amount, availability, observed_at AS valid_from, id AS position
    FROM offer_price_history WHERE gtin = ?1 AND (?2 IS NULL OR merchant_id = ?2)
    UNION ALL
    SELECT merchant_id, price_amount, currency, shipping_amount, availability, state_since, ${CURRENT_STATE_POSITION}
    FROM offers WHERE gtin = ?1 AND (?2 IS NULL OR merchant_id = ?2)
  ),
  ranged AS (
    SELECT *, lead(valid_from) OVER (PARTITION BY merchant_id ORDER BY valid_from, position) AS valid_to FROM states
  )`;

/** ?3 from, ?4 to, ?5 ?6 ?7 the cursor's validFrom, merchant and position (or nulls), ?8 rows. */
const STATES_SQL = `
  WITH ${RANGED_STATES}
  SELECT r.merchant_id AS merchantId, m.name AS merchantName, r.price_amount AS priceAmount, r.currency, r.shipping_amount AS shippingAmount,
         r.availability, r.valid_from AS validFrom, r.valid_to AS validTo, r.position
  FROM ranged r JOIN merchants m ON m.id = r.merchant_id
  WHERE r.valid_from < ?4 AND (r.valid_to IS NULL OR r.valid_to > ?3)
    AND (?5 IS NULL OR (r.valid_from, r.merchant_id, r.position) > (?5, ?6, ?7))
  ORDER BY r.valid_from, r.merchant_id, r.position
  LIMIT ?8`;

/**
 * ?3 the first day, ?4 the end of the time read, ?5 the cursor's day and ?6 merchant (or nulls), ?7 rows.
 * Each state is clipped to the time read and repeated for every UTC day it held on; per day and
 * merchant the last state (latest start) gives the last price, its currency and the availability.
 */
const DAYS_SQL = `
  WITH RECURSIVE ${RANGED_STATES},
  clipped AS (
    SELECT merchant_id, price_amount, currency, availability, valid_from, position,
           max(valid_from, ?3) AS s, min(coalesce(valid_to, ?4), ?4) AS e
    FROM ranged WHERE valid_from < ?4 AND (valid_to IS NULL OR valid_to > ?3)
  ),
  expanded AS (
    SELECT merchant_id, price_amount, currency, availability, valid_from, position, s - s % ${DAY_MS} AS day, (e - 1) - (e - 1) % ${DAY_MS} AS last_day
    FROM clipped WHERE e > s
    UNION ALL
    SELECT merchant_id, price_amount, currency, availability, valid_from, position, day + ${DAY_MS}, last_day FROM expanded WHERE day < last_day
  ),
  marked AS (
    SELECT merchant_id, day, price_amount, currency,
           first_value(price_amount) OVER w AS last_amount, first_value(currency) OVER w AS last_currency, first_value(availability) OVER w AS last_availability
    FROM expanded
    WHERE ?5 IS NULL OR (day, merchant_id) > (?5, ?6)
    WINDOW w AS (PARTITION BY merchant_id, day ORDER BY valid_from DESC, position DESC)
  ),
  days AS (
    SELECT merchant_id, day, last_currency, last_amount, last_availability,
           min(price_amount) FILTER (WHERE currency = last_currency) AS lowest, max(price_amount) FILTER (WHERE currency = last_currency) AS highest
    FROM marked GROUP BY merchant_id, day, last_currency, last_amount, last_availability
    ORDER BY day, merchant_id
    LIMIT ?7
  )
  SELECT d.merchant_id AS merchantId, m.name AS merchantName, d.day, d.last_currency AS currency, d.lowest AS lowestAmount, d.highest AS highestAmount,
         d.last_amount AS lastAmount, d.last_availability AS availability
  FROM days d JOIN merchants m ON m.id = d.merchant_id
  ORDER BY d.day, d.merchant_id`;

type Bindings = Array<string | number | null>;

/** The SQLite store's price history reads, on the store's one connection. */
export class SQLiteHistory implements PriceHistoryReads {
  private statesStatement: Statement<PriceStateRecord, Bindings> | null = null;
  private daysStatement: Statement<PriceDayRecord, Bindings> | null = null;

  constructor(private readonly database: Database) {}

  async priceStates(query: HistoryQuery): Promise<Page<PriceStateRecord>> {
    this.statesStatement ??= this.database.query<PriceStateRecord, Bindings>(STATES_SQL);
    const after = query.after?.interval === "change" ? query.after : null;
    const rows = this.statesStatement.all(query.gtin, query.merchantId, query.from, query.to, after?.validFrom ?? null, after?.merchantId ?? null, after?.position ?? null, query.limit + 1);
    return historyPage(rows, query.limit, (row) => ({ interval: "change", validFrom: row.validFrom, merchantId: row.merchantId, position: row.position }));
  }

  async priceDays(query: HistoryQuery): Promise<Page<PriceDayRecord>> {
    this.daysStatement ??= this.database.query<PriceDayRecord, Bindings>(DAYS_SQL);
    const { firstDay, end } = dayRange(query);
    const after = query.after?.interval === "day" ? query.after : null;
    const rows = end <= firstDay ? [] : this.daysStatement.all(query.gtin, query.merchantId, firstDay, end, after?.day ?? null, after?.merchantId ?? null, query.limit + 1);
    return historyPage(rows, query.limit, (row) => ({ interval: "day", day: row.day, merchantId: row.merchantId }));
  }
}
