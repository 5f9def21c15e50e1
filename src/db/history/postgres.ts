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

/** The same states as JSON arrays in `PriceStateRecord` order, in one row (see DAYS_SQL). */
const STATES_JSON = `
  SELECT coalesce(json_agg(json_build_array(
           s."merchantId", s."merchantName", s."priceAmount", s.currency, s."shippingAmount", s.availability, s."validFrom", s."validTo", s.position
         ) ORDER BY s."validFrom", s."merchantId", s.position), '[]') AS states
  FROM (${STATES_SQL}) s`;

/** Each offer's current state and its last day row before the first day read ($3), as JSON arrays in `DayOffer` order. */
const DAY_OFFERS_JSON = `
  SELECT coalesce(json_agg(json_build_array(
           o.merchant_id, m.name, o.price_amount, o.currency, o.availability, coalesce(o.state_since, o.observed_at),
           EXISTS (
             SELECT 1 FROM offer_price_days d
             WHERE d.gtin = o.gtin AND d.merchant_id = o.merchant_id AND d.day = coalesce(o.state_since, o.observed_at) - coalesce(o.state_since, o.observed_at) % ${DAY_MS}
           ),
           b.day, b.last_amount, b.currency, b.availability)), '[]')
  FROM offers o JOIN merchants m ON m.id = o.merchant_id
  LEFT JOIN LATERAL (
    SELECT x.day, x.last_amount, x.currency, x.availability FROM offer_price_days x
    WHERE x.gtin = o.gtin AND x.merchant_id = o.merchant_id AND x.day < $3::bigint ORDER BY x.day DESC LIMIT 1
  ) b ON true
  WHERE o.gtin = $1 AND ($2::text IS NULL OR o.merchant_id = $2)`;

/** The offers a day read assembles, counted as DAY_OFFERS_JSON lists them. */
const DAY_OFFER_COUNT = `
  SELECT count(*) FROM offers o JOIN merchants m ON m.id = o.merchant_id
  WHERE o.gtin = $1 AND ($2::text IS NULL OR o.merchant_id = $2)`;

/**
 * The day rows of [$3, $4], the first `$5 + 2 × offers` in day order (dayRowsToRead), as JSON
 * arrays in `DayRow` order, themselves in no particular order: the assembly keys them by day and
 * merchant, so the aggregate sorts nothing.
 */
const DAY_ROWS_JSON = `
  SELECT coalesce(json_agg(json_build_array(merchant_id, day, currency, lowest_amount, highest_amount, last_amount, availability)), '[]')
  FROM (
    SELECT * FROM offer_price_days
    WHERE gtin = $1 AND ($2::text IS NULL OR merchant_id = $2) AND day >= $3::bigint AND day <= $4::bigint
    ORDER BY day, merchant_id
    LIMIT $5::bigint + 2 * (${DAY_OFFER_COUNT})
  ) r`;

/**
 * Both in one statement and one row of two JSON values: parsing a thousand day rows column by column
 * from the wire cost the service more than the rest of the read; one `JSON.parse` of the same data is
 * a fraction of it.
 */
const DAYS_SQL = `SELECT (${DAY_OFFERS_JSON}) AS offers, (${DAY_ROWS_JSON}) AS rows`;

type StateTuple = [string, string, number, string, number | null, PriceStateRecord["availability"], number, number | null, number];
type DayOfferTuple = [string, string, number, string, DayOffer["availability"], number, boolean, number | null, number, string, DayOffer["availability"]];
type DayRowTuple = [string, number, string, number, number, number, DayRow["availability"]];

function toDayOffer([merchantId, merchantName, priceAmount, currency, availability, stateSince, hasDay, beforeDay, ...before]: DayOfferTuple): DayOffer {
  const [lastAmount, beforeCurrency, beforeAvailability] = before;
  return {
    merchantId,
    merchantName,
    priceAmount,
    currency,
    availability,
    stateSince,
    hasDay,
    before: beforeDay === null ? null : { day: beforeDay, lastAmount, currency: beforeCurrency, availability: beforeAvailability },
  };
}

function toState([merchantId, merchantName, priceAmount, currency, shippingAmount, availability, validFrom, validTo, position]: StateTuple): PriceStateRecord {
  return { merchantId, merchantName, priceAmount, currency, shippingAmount, availability, validFrom, validTo, position };
}

function toDayRow([merchantId, day, currency, lowestAmount, highestAmount, lastAmount, availability]: DayRowTuple): DayRow {
  return { merchantId, day, currency, lowestAmount, highestAmount, lastAmount, availability };
}

/**
 * Planned per call (not prepared): a prepared statement's generic plan cannot know whether `merchant`
 * is null, nor how wide the range is, and reads the whole history where the custom plan reads a page.
 */
const UNPREPARED = { prepare: false };

/** The PostgreSQL store's price history reads. */
export class PostgresHistory implements PriceHistoryReads {
  constructor(private readonly client: postgres.Sql) {}

  async priceStates(query: HistoryQuery): Promise<Page<PriceStateRecord>> {
    const after = query.after?.interval === "change" ? query.after : null;
    const [read] = await this.client.unsafe<Array<{ states: StateTuple[] }>>(
      STATES_JSON,
      [query.gtin, query.merchantId, query.from, query.to, after?.validFrom ?? null, after?.merchantId ?? null, after?.position ?? null, query.limit + 1],
      UNPREPARED,
    );
    return historyPage(read!.states.map(toState), query.limit, (row) => ({
      interval: "change",
      validFrom: row.validFrom,
      merchantId: row.merchantId,
      position: row.position,
    }));
  }

  async priceDays(query: HistoryQuery): Promise<Page<PriceDayRecord>> {
    const { firstDay, end } = dayRange(query);
    if (end <= firstDay) return { items: [], nextCursor: null };
    const [read] = await this.client.unsafe<Array<{ offers: DayOfferTuple[]; rows: DayRowTuple[] }>>(
      DAYS_SQL,
      [query.gtin, query.merchantId, firstDay, end - 1, query.limit + 1],
      UNPREPARED,
    );
    const offers = read!.offers.map(toDayOffer);
    return assembleDays(query, offers, read!.rows.map(toDayRow), dayRowsToRead(query, offers.length));
  }

  /** Deletes the day rows of the days before `before`'s day. */
  async pruneDays(before: number): Promise<number> {
    const deleted = await this.client`DELETE FROM offer_price_days WHERE day < ${before - (before % DAY_MS)}`;
    return deleted.count;
  }
}
