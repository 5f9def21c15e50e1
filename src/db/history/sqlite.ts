import type { Database, Statement } from "bun:sqlite";
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

/**
 * The merchant condition (?2): a statement for one merchant and one for all, so that each is planned
 * for its case (the primary keys lead with the merchant; a range of every merchant reads by time).
 */
const merchant = (one: boolean, table = "") => (one ? `${table}merchant_id = ?2` : "?2 IS NULL");

/**
 * The states that held in [?3, ?4), in the answer's order, after the cursor (?5 ?6 ?7, or nulls):
 * the history rows that started in the range (read in index order, up to ?8), per offer the row that
 * started before the range and held into it, and each offer's current state. ?1 the GTIN, ?2 a
 * merchant id or null for all.
 */
const statesSQL = (one: boolean) => `
  SELECT p.merchantId, m.name AS merchantName, p.priceAmount, p.currency, p.shippingAmount, p.availability, p.validFrom, p.validTo, p.position
  FROM (
    SELECT * FROM (
      SELECT merchant_id AS merchantId, price_amount AS priceAmount, currency, shipping_amount AS shippingAmount, availability,
             observed_at AS validFrom, valid_to AS validTo, id AS position
      FROM offer_price_history
      WHERE gtin = ?1 AND ${merchant(one)} AND observed_at >= max(?3, coalesce(?5, ?3)) AND observed_at < ?4
        AND (?5 IS NULL OR (observed_at, merchant_id, id) > (?5, ?6, ?7))
      ORDER BY observed_at, merchant_id, id
      LIMIT ?8
    )
    UNION ALL
    SELECT h.merchant_id, h.price_amount, h.currency, h.shipping_amount, h.availability, h.observed_at, h.valid_to, h.id
    FROM offers o JOIN offer_price_history h ON h.id = (
      SELECT x.id FROM offer_price_history x WHERE x.gtin = o.gtin AND x.merchant_id = o.merchant_id AND x.observed_at < ?3 ORDER BY x.observed_at DESC, x.id DESC LIMIT 1
    )
    WHERE o.gtin = ?1 AND ${merchant(one, "o.")} AND h.valid_to > ?3
      AND (?5 IS NULL OR (h.observed_at, h.merchant_id, h.id) > (?5, ?6, ?7))
    UNION ALL
    SELECT merchant_id, price_amount, currency, shipping_amount, availability, state_since, NULL, ${CURRENT_STATE_POSITION}
    FROM offers
    WHERE gtin = ?1 AND ${merchant(one)} AND state_since < ?4
      AND (?5 IS NULL OR (state_since, merchant_id, ${CURRENT_STATE_POSITION}) > (?5, ?6, ?7))
  ) p JOIN merchants m ON m.id = p.merchantId
  ORDER BY p.validFrom, p.merchantId, p.position
  LIMIT ?8`;

/** Each offer's current state and its last day row before the first day read (?3). */
const dayOffersSQL = (one: boolean) => `
  SELECT o.merchant_id AS merchantId, m.name AS merchantName, o.price_amount AS priceAmount, o.currency, o.availability,
         coalesce(o.state_since, o.observed_at) AS stateSince,
         EXISTS (
           SELECT 1 FROM offer_price_days d
           WHERE d.gtin = o.gtin AND d.merchant_id = o.merchant_id AND d.day = coalesce(o.state_since, o.observed_at) - coalesce(o.state_since, o.observed_at) % ${DAY_MS}
         ) AS hasDay,
         b.day AS beforeDay, b.last_amount AS beforeAmount, b.currency AS beforeCurrency, b.availability AS beforeAvailability
  FROM offers o JOIN merchants m ON m.id = o.merchant_id
  LEFT JOIN offer_price_days b ON b.gtin = o.gtin AND b.merchant_id = o.merchant_id
    AND b.day = (SELECT max(x.day) FROM offer_price_days x WHERE x.gtin = o.gtin AND x.merchant_id = o.merchant_id AND x.day < ?3)
  WHERE o.gtin = ?1 AND ${merchant(one, "o.")}`;

/** The day rows of [?3, ?4], in day order, up to ?5. */
const dayRowsSQL = (one: boolean) => `
  SELECT merchant_id AS merchantId, day, currency, lowest_amount AS lowestAmount, highest_amount AS highestAmount, last_amount AS lastAmount, availability
  FROM offer_price_days
  WHERE gtin = ?1 AND ${merchant(one)} AND day >= ?3 AND day <= ?4
  ORDER BY day, merchant_id
  LIMIT ?5`;

/** Each statement for every merchant ([0]) and for one ([1]). */
const STATES_SQL = [statesSQL(false), statesSQL(true)];
const DAY_OFFERS_SQL = [dayOffersSQL(false), dayOffersSQL(true)];
const DAY_ROWS_SQL = [dayRowsSQL(false), dayRowsSQL(true)];

type Bindings = Array<string | number | null>;
type DayOfferRow = Omit<DayOffer, "hasDay" | "before"> & {
  hasDay: number;
  beforeDay: number | null;
  beforeAmount: number;
  beforeCurrency: string;
  beforeAvailability: DayOffer["availability"];
};

/** The SQLite store's price history reads, on the store's one connection. */
export class SQLiteHistory implements PriceHistoryReads {
  private readonly statements = new Map<string, Statement>();

  constructor(private readonly database: Database) {}

  private statement<Row>(sql: string): Statement<Row, Bindings> {
    let statement = this.statements.get(sql);
    if (statement === undefined) this.statements.set(sql, (statement = this.database.query(sql)));
    return statement as unknown as Statement<Row, Bindings>;
  }

  async priceStates(query: HistoryQuery): Promise<Page<PriceStateRecord>> {
    const after = query.after?.interval === "change" ? query.after : null;
    const rows = this.statement<PriceStateRecord>(STATES_SQL[Number(query.merchantId !== null)]!).all(
      query.gtin,
      query.merchantId,
      query.from,
      query.to,
      after?.validFrom ?? null,
      after?.merchantId ?? null,
      after?.position ?? null,
      query.limit + 1,
    );
    return historyPage(rows, query.limit, (row) => ({ interval: "change", validFrom: row.validFrom, merchantId: row.merchantId, position: row.position }));
  }

  async priceDays(query: HistoryQuery): Promise<Page<PriceDayRecord>> {
    const { firstDay, end } = dayRange(query);
    if (end <= firstDay) return { items: [], nextCursor: null };
    const offers = this.statement<DayOfferRow>(DAY_OFFERS_SQL[Number(query.merchantId !== null)]!)
      .all(query.gtin, query.merchantId, firstDay)
      .map(
        ({ hasDay, beforeDay, beforeAmount, beforeCurrency, beforeAvailability, ...offer }): DayOffer => ({
          ...offer,
          hasDay: hasDay === 1,
          before: beforeDay === null ? null : { day: beforeDay, lastAmount: beforeAmount, currency: beforeCurrency, availability: beforeAvailability },
        }),
      );
    const rowsRead = dayRowsToRead(query, offers.length);
    const rows = this.statement<DayRow>(DAY_ROWS_SQL[Number(query.merchantId !== null)]!).all(query.gtin, query.merchantId, firstDay, end - 1, rowsRead);
    return assembleDays(query, offers, rows, rowsRead);
  }

  /** Deletes the day rows of the days before `before`'s day. */
  pruneDays(before: number): number {
    return this.database.query("DELETE FROM offer_price_days WHERE day < ?").run(before - (before % DAY_MS)).changes;
  }
}
