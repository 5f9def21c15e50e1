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

/** An offer as the day read starts from: its current state, and the last day row before the days read. */
export interface DayOffer {
  merchantId: string;
  merchantName: string;
  priceAmount: number;
  currency: string;
  availability: Availability;
  stateSince: number;
  /** Whether a day row holds the current state's first day (else the offer itself stands for it). */
  hasDay: boolean;
  before: { day: number; lastAmount: number; currency: string; availability: Availability } | null;
}

/** A row of offer_price_days. */
export interface DayRow {
  merchantId: string;
  day: number;
  currency: string;
  lowestAmount: number;
  highestAmount: number;
  lastAmount: number;
  availability: Availability;
}

/** How many day rows a page reads: enough whole days for `limit + 1` points after the cursor. */
export function dayRowsToRead(query: HistoryQuery, offers: number): number {
  return query.limit + 1 + 2 * offers;
}

/**
 * The points of a `day` page from the day rows of the days read (`rows`, the first `rowsRead` at
 * most in day order, given in any order) and each offer's state before them: a day with a row
 * gives that row; a day without one repeats the last price of the offer's previous day (its only
 * state held all day). An offer's first state until its first change has no row: the offer itself
 * stands for its first day.
 */
export function assembleDays(query: HistoryQuery, offers: DayOffer[], rows: DayRow[], rowsRead: number): Page<PriceDayRecord> {
  const { firstDay, end } = dayRange(query);
  if (end <= firstDay || offers.length === 0) return { items: [], nextCursor: null };
  let lastDay = startOfDay(end - 1);
  const byDay = new Map<string, DayRow>();
  let lastDayRead = Number.NEGATIVE_INFINITY;
  for (const row of rows) {
    byDay.set(`${row.day}|${row.merchantId}`, row);
    lastDayRead = Math.max(lastDayRead, row.day);
  }
  // A read cut short by its limit knows whole days only up to the day before its last one.
  if (rows.length >= rowsRead) lastDay = lastDayRead - DAY_MS;
  const carried = new Map<string, { amount: number; currency: string; availability: Availability }>();
  for (const offer of offers) {
    let before =
      offer.before === null
        ? null
        : { day: offer.before.day, amount: offer.before.lastAmount, currency: offer.before.currency, availability: offer.before.availability };
    if (!offer.hasDay) {
      const day = startOfDay(offer.stateSince);
      const own = {
        merchantId: offer.merchantId,
        day,
        currency: offer.currency,
        lowestAmount: offer.priceAmount,
        highestAmount: offer.priceAmount,
        lastAmount: offer.priceAmount,
        availability: offer.availability,
      };
      if (day < firstDay) {
        if (before === null || before.day < day) before = { day, amount: offer.priceAmount, currency: offer.currency, availability: offer.availability };
      } else byDay.set(`${day}|${offer.merchantId}`, own);
    }
    if (before !== null) carried.set(offer.merchantId, before);
  }
  const merchants = offers.map((offer) => offer.merchantId).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const names = new Map(offers.map((offer) => [offer.merchantId, offer.merchantName]));
  const after = query.after?.interval === "day" ? query.after : null;
  const points: PriceDayRecord[] = [];
  for (let day = firstDay; day <= lastDay && points.length <= query.limit; day += DAY_MS) {
    for (const merchantId of merchants) {
      const row = byDay.get(`${day}|${merchantId}`);
      let point: PriceDayRecord;
      if (row !== undefined) {
        carried.set(merchantId, { amount: row.lastAmount, currency: row.currency, availability: row.availability });
        point = { ...row, merchantName: names.get(merchantId)! };
      } else {
        const held = carried.get(merchantId);
        if (held === undefined) continue;
        point = {
          merchantId,
          merchantName: names.get(merchantId)!,
          day,
          currency: held.currency,
          lowestAmount: held.amount,
          highestAmount: held.amount,
          lastAmount: held.amount,
          availability: held.availability,
        };
      }
      if (after !== null && day === after.day && merchantId <= after.merchantId) continue;
      points.push(point);
      if (points.length > query.limit) break;
    }
  }
  return historyPage(points, query.limit, (row) => ({ interval: "day", day: row.day, merchantId: row.merchantId }));
}

export interface PriceHistoryReads {
  /** States that overlap [from, to), ordered by validFrom, merchant, position. */
  priceStates(query: HistoryQuery): Promise<Page<PriceStateRecord>>;
  /** Days of [day of from, to) on which an offer had a state, ordered by day, merchant (code unit order). */
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
  const text =
    position.interval === "change" ? `c.${position.validFrom}.${position.position}.${position.merchantId}` : `d.${position.day}.${position.merchantId}`;
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
