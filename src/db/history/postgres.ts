import type postgres from "postgres";
import type { Page } from "../store";
import { CURRENT_STATE_POSITION, DAY_MS, dayRange, historyPage, type HistoryQuery, type PriceDayRecord, type PriceHistoryReads, type PriceStateRecord } from "./records";

/** Every state of a product's offers and the time it held (see history/sqlite.ts). $1 the GTIN, $2 a merchant id or null. */
const RANGED_STATES = `
  states AS (
    SELECT merchant_id, price_amount, currency, shipping_amount, availability, observed_at AS valid_from, id AS position
    FROM offer_price_history WHERE gtin = $1 AND ($2::text IS NULL OR merchant_id = $2)
    UNION ALL
    SELECT merchant_id, price_amount, currency, shipping_amount, availability, state_since, ${CURRENT_STATE_POSITION}::bigint
    FROM offers WHERE gtin = $1 AND ($2::text IS NULL OR merchant_id = $2)
  ),
  ranged AS (
    SELECT *, lead(valid_from) OVER (PARTITION BY merchant_id ORDER BY valid_from, position) AS valid_to FROM states
  )`;

/** $3 from, $4 to, $5 $6 $7 the cursor's validFrom, merchant and position (or nulls), $8 rows. */
const STATES_SQL = `
  WITH ${RANGED_STATES}
  SELECT r.merchant_id AS "merchantId", m.name AS "merchantName", r.price_amount AS "priceAmount", r.currency, r.shipping_amount AS "shippingAmount",
         r.availability, r.valid_from AS "validFrom", r.valid_to AS "validTo", r.position
  FROM ranged r JOIN merchants m ON m.id = r.merchant_id
  WHERE r.valid_from < $4::bigint AND (r.valid_to IS NULL OR r.valid_to > $3::bigint)
    AND ($5::bigint IS NULL OR (r.valid_from, r.merchant_id, r.position) > ($5::bigint, $6::text, $7::bigint))
  ORDER BY r.valid_from, r.merchant_id, r.position
  LIMIT $8`;

/** $3 the first day, $4 the end of the time read, $5 the cursor's day and $6 merchant (or nulls), $7 rows. */
const DAYS_SQL = `
  WITH ${RANGED_STATES},
  clipped AS (
    SELECT merchant_id, price_amount, currency, availability, valid_from, position,
           greatest(valid_from, $3::bigint) AS s, least(coalesce(valid_to, $4::bigint), $4::bigint) AS e
    FROM ranged WHERE valid_from < $4::bigint AND (valid_to IS NULL OR valid_to > $3::bigint)
  ),
  expanded AS (
    SELECT c.merchant_id, c.price_amount, c.currency, c.availability, c.valid_from, c.position, d.day
    FROM clipped c CROSS JOIN LATERAL generate_series(c.s - c.s % ${DAY_MS}, (c.e - 1) - (c.e - 1) % ${DAY_MS}, ${DAY_MS}::bigint) AS d(day)
    WHERE c.e > c.s
  ),
  marked AS (
    SELECT merchant_id, day, price_amount, currency,
           first_value(price_amount) OVER w AS last_amount, first_value(currency) OVER w AS last_currency, first_value(availability) OVER w AS last_availability
    FROM expanded
    WHERE $5::bigint IS NULL OR (day, merchant_id) > ($5::bigint, $6::text)
    WINDOW w AS (PARTITION BY merchant_id, day ORDER BY valid_from DESC, position DESC)
  ),
  days AS (
    SELECT merchant_id, day, last_currency, last_amount, last_availability,
           min(price_amount) FILTER (WHERE currency = last_currency) AS lowest, max(price_amount) FILTER (WHERE currency = last_currency) AS highest
    FROM marked GROUP BY merchant_id, day, last_currency, last_amount, last_availability
    ORDER BY day, merchant_id
    LIMIT $7
  )
  SELECT d.merchant_id AS "merchantId", m.name AS "merchantName", d.day, d.last_currency AS currency, d.lowest AS "lowestAmount", d.highest AS "highestAmount",
         d.last_amount AS "lastAmount", d.last_availability AS availability
  FROM days d JOIN merchants m ON m.id = d.merchant_id
  ORDER BY d.day, d.merchant_id`;

type Row = Record<string, unknown>;

/** The PostgreSQL store's price history reads: one statement each, aggregated by the database. */
export class PostgresHistory implements PriceHistoryReads {
  constructor(private readonly client: postgres.Sql) {}

  async priceStates(query: HistoryQuery): Promise<Page<PriceStateRecord>> {
    const after = query.after?.interval === "change" ? query.after : null;
    const rows = await this.client.unsafe<Row[]>(
      STATES_SQL,
      [query.gtin, query.merchantId, query.from, query.to, after?.validFrom ?? null, after?.merchantId ?? null, after?.position ?? null, query.limit + 1],
      { prepare: true },
    );
    const states = rows.map(
      (row): PriceStateRecord => ({
        merchantId: row.merchantId as string,
        merchantName: row.merchantName as string,
        priceAmount: Number(row.priceAmount),
        currency: row.currency as string,
        shippingAmount: row.shippingAmount === null ? null : Number(row.shippingAmount),
        availability: row.availability as PriceStateRecord["availability"],
        validFrom: Number(row.validFrom),
        validTo: row.validTo === null ? null : Number(row.validTo),
        position: Number(row.position),
      }),
    );
    return historyPage(states, query.limit, (row) => ({ interval: "change", validFrom: row.validFrom, merchantId: row.merchantId, position: row.position }));
  }

  async priceDays(query: HistoryQuery): Promise<Page<PriceDayRecord>> {
    const { firstDay, end } = dayRange(query);
    const after = query.after?.interval === "day" ? query.after : null;
    if (end <= firstDay) return { items: [], nextCursor: null };
    const rows = await this.client.unsafe<Row[]>(DAYS_SQL, [query.gtin, query.merchantId, firstDay, end, after?.day ?? null, after?.merchantId ?? null, query.limit + 1], { prepare: true });
    const days = rows.map(
      (row): PriceDayRecord => ({
        merchantId: row.merchantId as string,
        merchantName: row.merchantName as string,
        day: Number(row.day),
        currency: row.currency as string,
        lowestAmount: Number(row.lowestAmount),
        highestAmount: Number(row.highestAmount),
        lastAmount: Number(row.lastAmount),
        availability: row.availability as PriceDayRecord["availability"],
      }),
    );
    return historyPage(days, query.limit, (row) => ({ interval: "day", day: row.day, merchantId: row.merchantId }));
  }
}
