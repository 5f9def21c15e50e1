// The price history facet's reads: an offer's states over a time range, or their aggregation per UTC
// day, paged by a keyset cursor. Both stores answer the same query with the same rows.
import type { Availability, Page } from "../store";

export const DAY_MS = 86_400_000;

/** Where the next page starts: strictly after this point in the answer's order. */
export type HistoryPosition =
  | { interval: "change"; validFrom: number; merchantId: string; position: number }
  | { interval: "day"; day: number; merchantId: string };

export interface HistoryQuery {
  /** Normalized GTIN-14. */
  gtin: string;
  /** Inclusive start and exclusive end of the range (epoch ms); `day` reads whole UTC days from the day of `from`. */
  from: number;
  to: number;
  /** The open end of each offer's current state. */
  now: number;
  merchantId: string | null;
  limit: number;
  after: HistoryPosition | null;
}

/** One state of an offer and the time it held: from `validFrom` until `validTo` (null: it still holds). */
export interface PriceStateRecord {
  merchantId: string;
  merchantName: string;
  priceAmount: number;
  currency: string;
  shippingAmount: number | null;
  availability: Availability;
  validFrom: number;
  validTo: number | null;
  /** Orders states that start at the same time (the history row's id; the current state comes last). */
  position: number;
}

/**
 * One UTC day of one offer: its lowest, highest and last price over the states that held during the
 * day (lowest and highest among those in the last one's currency), and its availability at the end
 * of the day (at `now` for the current day).
 */
export interface PriceDayRecord {
  merchantId: string;
  merchantName: string;
  /** Start of the UTC day (epoch ms). */
  day: number;
  currency: string;
  lowestAmount: number;
  highestAmount: number;
  lastAmount: number;
  availability: Availability;
}

export interface PriceHistoryReads {
  /** States that overlap [from, to), ordered by validFrom, merchant, position. */
  priceStates(query: HistoryQuery): Promise<Page<PriceStateRecord>>;
  /** Days of [day of from, to) on which an offer had a state, ordered by day, merchant. */
  priceDays(query: HistoryQuery): Promise<Page<PriceDayRecord>>;
}

/** The current state's position: after every history row that starts at the same time. */
export const CURRENT_STATE_POSITION = Number.MAX_SAFE_INTEGER;

const startOfDay = (time: number) => time - (((time % DAY_MS) + DAY_MS) % DAY_MS);

/**
 * The time a `day` query reads: the whole UTC days the range touches, from the cursor's day on, up to
 * `now` (the current day ends at `now`).
 */
export function dayRange(query: HistoryQuery): { firstDay: number; end: number } {
  let firstDay = startOfDay(query.from);
  if (query.after?.interval === "day") firstDay = Math.max(firstDay, query.after.day);
  const lastDayEnd = startOfDay(query.to - 1) + DAY_MS;
  return { firstDay, end: Math.min(lastDayEnd, query.now) };
}

export function encodeHistoryCursor(position: HistoryPosition): string {
  const text = position.interval === "change" ? `c.${position.validFrom}.${position.position}.${position.merchantId}` : `d.${position.day}.${position.merchantId}`;
  return Buffer.from(text).toString("base64url");
}

/** The position a cursor names, or null when it is not one this service made for that interval. */
export function decodeHistoryCursor(cursor: string, interval: "change" | "day"): HistoryPosition | null {
  if (!/^[A-Za-z0-9_-]{1,400}$/.test(cursor)) return null;
  const text = Buffer.from(cursor, "base64url").toString("utf8");
  const change = /^c\.(\d{1,16})\.(\d{1,16})\.(.{1,200})$/s.exec(text);
  if (change !== null && interval === "change") {
    const validFrom = Number(change[1]);
    const position = Number(change[2]);
    if (!Number.isSafeInteger(validFrom) || !Number.isSafeInteger(position)) return null;
    return { interval, validFrom, position, merchantId: change[3]! };
  }
  const day = /^d\.(\d{1,16})\.(.{1,200})$/s.exec(text);
  if (day !== null && interval === "day") {
    const start = Number(day[1]);
    if (!Number.isSafeInteger(start) || start % DAY_MS !== 0) return null;
    return { interval, day: start, merchantId: day[2]! };
  }
  return null;
}

/** Cuts a `limit + 1` result into a page whose cursor is its last row's position. */
export function historyPage<T>(rows: T[], limit: number, positionOf: (row: T) => HistoryPosition): Page<T> {
  const items = rows.slice(0, limit);
  return { items, nextCursor: rows.length > limit ? encodeHistoryCursor(positionOf(items[items.length - 1]!)) : null };
}
