import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { postgresMigrations, sqliteMigrations } from "../../drizzle/embedded";
import { decodeHistoryCursor, type HistoryQuery, type PriceDayRecord, type PriceStateRecord } from "../../src/db/history/records";
import { applyPostgresMigrations, applySQLiteMigrations } from "../../src/db/migrate";
import { openDebitConnection, openPostgresClient } from "../../src/db/postgres-client";
import { PostgresStore } from "../../src/db/postgres-store";
import { openSQLite, sqlitePathFromURL, SQLiteStore } from "../../src/db/sqlite-store";
import type { FeedRecord, Store } from "../../src/db/store";
import { createTestDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/context";

// The day aggregation the database keeps (offer_price_days, written by the history trigger, filled
// for older history by its migration) against the same aggregation computed from the listed states.

const GTIN = "04006381333931";
const DAY = 86_400_000;
const D0 = Date.parse("2026-11-01T00:00:00.000Z");
const NOW = D0 + 12 * DAY + 15 * 3_600_000;
const MERCHANTS = ["m-a", "m-b", "m-c"];

/** A small deterministic generator (mulberry32). */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Observations in time order: prices from a small set (repeats are no change), some at midnight, some days with none. */
function observations(seed: number): FeedRecord[] {
  const next = random(seed);
  const records: FeedRecord[] = [];
  let at = D0 - DAY / 2;
  while (at < NOW) {
    const merchantId = MERCHANTS[Math.floor(next() * MERCHANTS.length)]!;
    records.push({
      product: { gtin: GTIN, title: "Pen", brand: null as unknown as undefined },
      offer: {
        merchantId,
        merchantName: merchantId.toUpperCase(),
        priceAmount: 100 * (1 + Math.floor(next() * 5)),
        currency: "EUR",
        shippingAmount: null,
        availability: next() < 0.2 ? "out_of_stock" : "in_stock",
        condition: "new",
        url: null,
        observedAt: at,
      },
    });
    at += next() < 0.1 ? DAY - (at % DAY) : Math.floor(next() * 20 * 3_600_000);
  }
  return records;
}

/** The days as computed from the listed states: every state that held during the day, the last one's currency. */
async function expectedDays(store: Store, from: number, to: number, merchants = MERCHANTS): Promise<unknown[]> {
  const states = await store.listPriceHistory(GTIN);
  const points: unknown[] = [];
  for (let day = from - (from % DAY); day < Math.min(to, NOW); day += DAY) {
    for (const merchantId of merchants) {
      const own = states.filter((state) => state.merchantId === merchantId);
      const held = own.filter((state, index) => {
        const end = own[index + 1]?.observedAt ?? NOW;
        return state.observedAt < Math.min(day + DAY, NOW) && end > day;
      });
      if (held.length === 0) continue;
      const last = held[held.length - 1]!;
      const prices = held.map((state) => state.priceAmount);
      points.push([new Date(day).toISOString().slice(0, 10), merchantId, Math.min(...prices), Math.max(...prices), last.priceAmount, last.availability]);
    }
  }
  return points;
}

async function expectedStates(store: Store, from: number, to: number): Promise<unknown[]> {
  const states = await store.listPriceHistory(GTIN);
  const ranged = MERCHANTS.flatMap((merchantId) => {
    const own = states.filter((state) => state.merchantId === merchantId);
    return own.map((state, index) => ({ ...state, validTo: own[index + 1]?.observedAt ?? null }));
  });
  return ranged
    .filter((state) => state.observedAt < to && (state.validTo === null || state.validTo > from))
    .sort((a, b) => a.observedAt - b.observedAt || (a.merchantId < b.merchantId ? -1 : a.merchantId > b.merchantId ? 1 : 0))
    .map((state) => [state.merchantId, state.priceAmount, state.availability, state.observedAt, state.validTo]);
}

/** Every page of a read, `limit` points at a time. */
async function allPages<T>(
  read: (query: HistoryQuery) => Promise<{ items: T[]; nextCursor: string | null }>,
  base: Omit<HistoryQuery, "after">,
  interval: "change" | "day",
): Promise<T[]> {
  const items: T[] = [];
  let after: HistoryQuery["after"] = null;
  for (let page = 0; page < 1000; page++) {
    const result = await read({ ...base, after });
    items.push(...result.items);
    if (result.nextCursor === null) return items;
    after = decodeHistoryCursor(result.nextCursor, interval);
  }
  throw new Error("too many pages");
}

const dayPoints = (days: PriceDayRecord[]) =>
  days.map((day) => [new Date(day.day).toISOString().slice(0, 10), day.merchantId, day.lowestAmount, day.highestAmount, day.lastAmount, day.availability]);
const statePoints = (states: PriceStateRecord[]) =>
  states.map((state) => [state.merchantId, state.priceAmount, state.availability, state.validFrom, state.validTo]);

let database: TestDatabase;
beforeEach(async () => {
  database = await createTestDatabase();
});
afterEach(() => database.drop());

/** A store on the test database, its history written by `records` after migrating up to (not including) `beforeMigration`, then migrated fully. */
async function storeWith(records: FeedRecord[], beforeMigration?: string): Promise<Store> {
  const apply = async (store: Store) => {
    for (const record of records) await store.applyFeedRecords([record], record.offer!.observedAt);
  };
  if (TEST_DATABASE_URL === null) {
    if (beforeMigration !== undefined) {
      const connection = openSQLite(sqlitePathFromURL(database.url));
      applySQLiteMigrations(
        connection,
        sqliteMigrations.slice(
          0,
          sqliteMigrations.findIndex((m) => m.tag.endsWith(beforeMigration)),
        ),
      );
      await apply(new SQLiteStore(connection));
      connection.close();
      return SQLiteStore.open(database.url);
    }
    const store = SQLiteStore.open(database.url);
    await apply(store);
    return store;
  }
  if (beforeMigration !== undefined) {
    await applyPostgresMigrations(
      database.url,
      postgresMigrations.slice(
        0,
        postgresMigrations.findIndex((m) => m.tag.endsWith(beforeMigration)),
      ),
    );
    const early = new PostgresStore(openPostgresClient(database.url), openDebitConnection(database.url));
    await apply(early);
    await early.close();
    return PostgresStore.open(database.url);
  }
  const store = await PostgresStore.open(database.url);
  await apply(store);
  return store;
}

describe("price history reads against the listed states", () => {
  for (const [label, beforeMigration] of [
    ["written by the trigger", undefined],
    ["written before the migration that keeps days", "price_history_days"],
  ] as const) {
    test(`days and states over several ranges and page sizes (${label})`, async () => {
      const store = await storeWith(observations(label.length), beforeMigration);
      try {
        // The history is rich enough to mean something: many states, most days with several.
        expect((await store.listPriceHistory(GTIN)).length).toBeGreaterThan(20);
        expect((await expectedDays(store, D0, NOW)).length).toBe(3 * 13);
        for (const [from, to] of [
          [D0, NOW],
          [D0 + 3 * DAY + 5_000, D0 + 7 * DAY + 1],
          [D0 - 5 * DAY, D0 + DAY],
        ] as const) {
          for (const limit of [1, 4, 1000]) {
            const base = { gtin: GTIN, from, to, now: NOW, merchantId: null, limit };
            expect(dayPoints(await allPages((query) => store.priceDays(query), base, "day"))).toEqual((await expectedDays(store, from, to)) as never);
            expect(statePoints(await allPages((query) => store.priceStates(query), base, "change"))).toEqual((await expectedStates(store, from, to)) as never);
          }
          const oneMerchant = await allPages((query) => store.priceDays(query), { gtin: GTIN, from, to, now: NOW, merchantId: "m-b", limit: 3 }, "day");
          expect(dayPoints(oneMerchant)).toEqual(((await expectedDays(store, from, to)) as unknown[][]).filter((point) => point[1] === "m-b") as never);
        }
      } finally {
        await store.close();
      }
    });
  }
});

test("a product with more offers than one read expects (250 merchants) gets every day of every offer, in pages and at once", async () => {
  // Some ids with characters JSON must escape, in code unit order as the points are.
  const merchants = Array.from({ length: 250 }, (_, index) => `m-${String(index).padStart(3, "0")}${index % 50 === 7 ? '"\\é' : ""}`).sort();
  const records: FeedRecord[] = [];
  for (let day = 0; day < 3; day++) {
    for (const [index, merchantId] of merchants.entries()) {
      records.push({
        product: { gtin: GTIN, title: "Pen", brand: null as unknown as undefined },
        offer: {
          merchantId,
          merchantName: merchantId.toUpperCase(),
          priceAmount: 100 + ((day * 7 + index) % 13),
          currency: "EUR",
          shippingAmount: null,
          availability: "in_stock",
          condition: "new",
          url: null,
          observedAt: D0 + day * DAY + ((index * 600_000) % DAY),
        },
      });
    }
  }
  const store = await storeWith([]);
  try {
    for (const record of records) await store.applyFeedRecords([record], record.offer!.observedAt);
    const expected = await expectedDays(store, D0, NOW, merchants);
    // Every merchant on each of the 13 days from its first state on.
    expect(expected.length).toBe(250 * 13);
    for (const limit of [40, 5000]) {
      const base = { gtin: GTIN, from: D0, to: NOW, now: NOW, merchantId: null, limit };
      expect(dayPoints(await allPages((query) => store.priceDays(query), base, "day"))).toEqual(expected as never);
    }
  } finally {
    await store.close();
  }
});
