import type postgres from "postgres";
import type { Page } from "../store";
import {
  assembleDays,
  CURRENT_STATE_POSITION,
  DAY_MS,
  dayRange,
  dayRowsToRead,
  type DayOffer,
  type DayRow,
  historyPage,
  type HistoryQuery,
  type PriceDayRecord,
  type PriceHistoryReads,
  type PriceStateRecord,
} from "./records";

/** The states that held in [$3, $4) after the cursor ($5 $6 $7), up to $8 (see history/sqlite.ts). */
const STATES_SQL = `
  SELECT p."merchantId", m.name AS "merchantName", p."priceAmount", p.currency, p."shippingAmount", p.availability, p."validFrom", p."validTo", p.position
  FROM (
    (SELECT merchant_id AS "merchantId", price_amount AS "priceAmount", currency, shipping_amount AS "shippingAmount", availability,
            observed_at AS "validFrom", valid_to AS "validTo", id AS position
     FROM offer_price_history
     WHERE gtin = $1 AND ($2::text IS NULL OR merchant_id = $2) AND observed_at >= greatest($3::bigint, coalesce($5::bigint, $3::bigint)) AND observed_at < $4::bigint
       AND ($5::bigint IS NULL OR (observed_at, merchant_id, id) > ($5::bigint, $6::text, $7::bigint))
     ORDER BY observed_at, merchant_id, id
     LIMIT $8)
    UNION ALL
    SELECT h.merchant_id, h.price_amount, h.currency, h.shipping_amount, h.availability, h.observed_at, h.valid_to, h.id
    FROM offers o JOIN offer_price_history h ON h.id = (
      SELECT x.id FROM offer_price_history x WHERE x.gtin = o.gtin AND x.merchant_id = o.merchant_id AND x.observed_at < $3::bigint ORDER BY x.observed_at DESC, x.id DESC LIMIT 1
    )
    WHERE o.gtin = $1 AND ($2::text IS NULL OR o.merchant_id = $2) AND h.valid_to > $3::bigint
      AND ($5::bigint IS NULL OR (h.observed_at, h.merchant_id, h.id) > ($5::bigint, $6::text, $7::bigint))
    UNION ALL
    SELECT merchant_id, price_amount, currency, shipping_amount, availability, state_since, NULL, ${CURRENT_STATE_POSITION}::bigint
    FROM offers
    WHERE gtin = $1 AND ($2::text IS NULL OR merchant_id = $2) AND state_since < $4::bigint
      AND ($5::bigint IS NULL OR (state_since, merchant_id, ${CURRENT_STATE_POSITION}::bigint) > ($5::bigint, $6::text, $7::bigint))
  ) p JOIN merchants m ON m.id = p."merchantId"
  ORDER BY p."validFrom", p."merchantId", p.position
  LIMIT $8`;

/** Each offer's current state and its last day row before the first day read ($3). */
const DAY_OFFERS_SQL = `
  SELECT o.merchant_id AS "merchantId", m.name AS "merchantName", o.price_amount AS "priceAmount", o.currency, o.availability,
         coalesce(o.state_since, o.observed_at) AS "stateSince",
         EXISTS (
           SELECT 1 FROM offer_price_days d
           WHERE d.gtin = o.gtin AND d.merchant_id = o.merchant_id AND d.day = coalesce(o.state_since, o.observed_at) - coalesce(o.state_since, o.observed_at) % ${DAY_MS}
         ) AS "hasDay",
         b.day AS "beforeDay", b.last_amount AS "beforeAmount", b.currency AS "beforeCurrency", b.availability AS "beforeAvailability"
  FROM offers o JOIN merchants m ON m.id = o.merchant_id
  LEFT JOIN LATERAL (
    SELECT x.day, x.last_amount, x.currency, x.availability FROM offer_price_days x
    WHERE x.gtin = o.gtin AND x.merchant_id = o.merchant_id AND x.day < $3::bigint ORDER BY x.day DESC LIMIT 1
  ) b ON true
  WHERE o.gtin = $1 AND ($2::text IS NULL OR o.merchant_id = $2)`;

/** The day rows of [$3, $4], in day order, up to $5. */
const DAY_ROWS_SQL = `
  SELECT merchant_id AS "merchantId", day, currency, lowest_amount AS "lowestAmount", highest_amount AS "highestAmount", last_amount AS "lastAmount", availability
  FROM offer_price_days
  WHERE gtin = $1 AND ($2::text IS NULL OR merchant_id = $2) AND day >= $3::bigint AND day <= $4::bigint
  ORDER BY day, merchant_id
  LIMIT $5`;

type Row = Record<string, unknown>;
/** Offers per product a day read expects at most when it reads the offers and the rows at once. */
const MAX_OFFERS_PER_READ = 100;

function toDayOffer(row: Row): DayOffer {
  return {
    merchantId: row.merchantId as string,
    merchantName: row.merchantName as string,
    priceAmount: Number(row.priceAmount),
    currency: row.currency as string,
    availability: row.availability as DayOffer["availability"],
    stateSince: Number(row.stateSince),
    hasDay: row.hasDay === true,
    before:
      row.beforeDay === null
        ? null
        : {
            day: Number(row.beforeDay),
            lastAmount: Number(row.beforeAmount),
            currency: row.beforeCurrency as string,
            availability: row.beforeAvailability as DayOffer["availability"],
          },
  };
}

function toDayRow(row: Row): DayRow {
  return {
    merchantId: row.merchantId as string,
    day: Number(row.day),
    currency: row.currency as string,
    lowestAmount: Number(row.lowestAmount),
    highestAmount: Number(row.highestAmount),
    lastAmount: Number(row.lastAmount),
    availability: row.availability as DayRow["availability"],
  };
}
/**
 * Planned per call (not prepared): a prepared statement's generic plan cannot know whether `merchant`
 * is null, nor how wide the range is, and reads the whole history where the custom plan reads a page.
 */
const UNPREPARED = { prepare: false };
const numberOrNull = (value: unknown) => (value === null ? null : Number(value));

/** The PostgreSQL store's price history reads. */
export class PostgresHistory implements PriceHistoryReads {
  constructor(private readonly client: postgres.Sql) {}

  async priceStates(query: HistoryQuery): Promise<Page<PriceStateRecord>> {
    const after = query.after?.interval === "change" ? query.after : null;
    const rows = await this.client.unsafe<Row[]>(
      STATES_SQL,
      [query.gtin, query.merchantId, query.from, query.to, after?.validFrom ?? null, after?.merchantId ?? null, after?.position ?? null, query.limit + 1],
      UNPREPARED,
    );
    const states = rows.map(
      (row): PriceStateRecord => ({
        merchantId: row.merchantId as string,
        merchantName: row.merchantName as string,
        priceAmount: Number(row.priceAmount),
        currency: row.currency as string,
        shippingAmount: numberOrNull(row.shippingAmount),
        availability: row.availability as PriceStateRecord["availability"],
        validFrom: Number(row.validFrom),
        validTo: numberOrNull(row.validTo),
        position: Number(row.position),
      }),
    );
    return historyPage(states, query.limit, (row) => ({ interval: "change", validFrom: row.validFrom, merchantId: row.merchantId, position: row.position }));
  }

  async priceDays(query: HistoryQuery): Promise<Page<PriceDayRecord>> {
    const { firstDay, end } = dayRange(query);
    if (end <= firstDay) return { items: [], nextCursor: null };
    // Both statements at once, on two connections of the pool: the rows read are bounded by the
    // offers' count, so the read asks for at most `limit + 1 + 2 × MAX_OFFERS_PER_READ` and the
    // assembly cuts it to the offers there are.
    const rowsRead = dayRowsToRead(query, MAX_OFFERS_PER_READ);
    const [offerRows, dayRows] = await Promise.all([
      this.client.unsafe<Row[]>(DAY_OFFERS_SQL, [query.gtin, query.merchantId, firstDay], UNPREPARED),
      this.client.unsafe<Row[]>(DAY_ROWS_SQL, [query.gtin, query.merchantId, firstDay, end - 1, rowsRead], UNPREPARED),
    ]);
    if (offerRows.length > MAX_OFFERS_PER_READ) return this.priceDaysOneByOne(query, offerRows, firstDay, end);
    const offers = offerRows.map(toDayOffer);
    const rows = dayRows.map(toDayRow);
    return assembleDays(query, offers, rows, rowsRead);
  }

  /** A product with more offers than one concurrent read allows for: the rows are read once the offers are known. */
  private async priceDaysOneByOne(query: HistoryQuery, offerRows: Row[], firstDay: number, end: number): Promise<Page<PriceDayRecord>> {
    const offers = offerRows.map(toDayOffer);
    const rowsRead = dayRowsToRead(query, offers.length);
    const rows = (await this.client.unsafe<Row[]>(DAY_ROWS_SQL, [query.gtin, query.merchantId, firstDay, end - 1, rowsRead], UNPREPARED)).map(toDayRow);
    return assembleDays(query, offers, rows, rowsRead);
  }

  /** Deletes the day rows of the days before `before`'s day. */
  async pruneDays(before: number): Promise<number> {
    const deleted = await this.client`DELETE FROM offer_price_days WHERE day < ${before - (before % DAY_MS)}`;
    return deleted.count;
  }
}
