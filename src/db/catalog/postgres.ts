import { asc, eq, inArray, lt, sql } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import type { PostgresJsDatabase } from "drizzle-orm/postgres-js";
import type postgres from "postgres";
import type { PriceHistoryEntry } from "../feeds/records";
import { descriptionPrecedence, type FeedWriter, OPERATOR, productDescriptionUpdates, writerSourceId } from "../feeds/writers";
import type { PostgresHistory } from "../history/postgres";
import * as schema from "../schema/postgres";
import type { FeedRecord, OfferRecord, ProductRecord } from "../store";

const { products, merchants, offers, offerPriceHistory, catalogVersion } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

/** What the PostgreSQL store lends its catalog: its retrying transaction and the daily price history. */
export interface PostgresCatalogDeps {
  transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T>;
  history: PostgresHistory;
}

/**
 * The catalog on PostgreSQL: feed imports (each moving the catalog version), product and offer reads
 * with the products this instance remembers per catalog version, counts, statistics, and the price
 * history's listing and pruning.
 */
export class PostgresCatalog {
  private readonly history: PostgresHistory;

  constructor(
    private readonly client: postgres.Sql,
    private readonly db: DB,
    private readonly deps: PostgresCatalogDeps,
  ) {
    this.history = deps.history;
  }

  private transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T> {
    return this.deps.transaction(work, config);
  }

  /** Builds a statement on first use, so it is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  /**
   * Multi-row upserts instead of one statement per record. PostgreSQL refuses to update one row twice
   * in a statement, so the batch is first merged per key with the same result as applying the records
   * in order: a product keeps the last given value of each field, an offer the newest observation.
   * Rows go in key order so that concurrent imports lock them in the same order.
   */
  async applyFeedRecords(records: FeedRecord[], now: number, options: { writer?: FeedWriter } = {}): Promise<{ products: number; offers: number }> {
    const merged = mergeFeedRecords(records);
    const writer = options.writer ?? OPERATOR;
    const sourceId = writerSourceId(writer);
    await this.transaction(async (tx) => {
      // A new product gets the empty title when none is given; an update reads it as "absent".
      const productRow = (p: FeedRecord["product"]) => ({
        gtin: p.gtin,
        title: p.title ?? "",
        brand: p.brand ?? null,
        imageUrl: p.imageUrl ?? null,
        updatedAt: now,
        describedBy: sourceId,
      });
      const described = productDescriptionUpdates(descriptionPrecedence(writer));
      const set = {
        title: sql.raw(described.title),
        brand: sql.raw(described.brand),
        imageUrl: sql.raw(described.image_url),
        describedBy: sql.raw(described.described_by),
        updatedAt: sql`excluded.updated_at`,
      };
      for (const chunk of chunks(merged.products)) {
        await tx.insert(products).values(chunk.map(productRow)).onConflictDoUpdate({ target: products.gtin, set });
      }
      for (const chunk of chunks(merged.merchants.filter((m) => m.name !== undefined))) {
        await tx
          .insert(merchants)
          .values(chunk.map((m) => ({ id: m.id, name: m.name! })))
          .onConflictDoUpdate({ target: merchants.id, set: { name: sql`excluded.name` } });
      }
      for (const chunk of chunks(merged.merchants.filter((m) => m.name === undefined))) {
        await tx
          .insert(merchants)
          .values(chunk.map((m) => ({ id: m.id, name: m.id })))
          .onConflictDoNothing();
      }
      // `offers.x` is the stored row: an update that changes the state starts a new `state_since` (and
      // the history trigger keeps the state it replaces); an identical repeat keeps the old one.
      const changed = sql`excluded.price_amount IS DISTINCT FROM ${offers.priceAmount} OR excluded.currency IS DISTINCT FROM ${offers.currency}
        OR excluded.shipping_amount IS DISTINCT FROM ${offers.shippingAmount} OR excluded.availability IS DISTINCT FROM ${offers.availability}`;
      for (const chunk of merged.offerRounds.flatMap((round) => chunks(round))) {
        await tx
          .insert(offers)
          .values(chunk.map((offer) => ({ ...offer, sourceId, stateSince: offer.observedAt, stateSourceId: sourceId })))
          .onConflictDoUpdate({
            target: [offers.gtin, offers.merchantId],
            set: {
              priceAmount: sql`excluded.price_amount`,
              currency: sql`excluded.currency`,
              shippingAmount: sql`excluded.shipping_amount`,
              availability: sql`excluded.availability`,
              condition: sql`excluded.condition`,
              url: sql`excluded.url`,
              observedAt: sql`excluded.observed_at`,
              sourceId: sql`excluded.source_id`,
              stateSince: sql`CASE WHEN ${changed} THEN excluded.observed_at ELSE ${offers.stateSince} END`,
              stateSourceId: sql`CASE WHEN ${changed} THEN excluded.source_id ELSE ${offers.stateSourceId} END`,
            },
            setWhere: sql`excluded.observed_at >= ${offers.observedAt}`,
          });
      }
      // Last, so the row lock is held only until the commit: instances drop the products they keep
      // once they see the new version (imports of several instances queue here, never in a cycle).
      await tx
        .insert(catalogVersion)
        .values({ id: 1, version: 1 })
        .onConflictDoUpdate({ target: catalogVersion.id, set: { version: sql`${catalogVersion.version} + 1` } });
    });
    return { products: records.length, offers: records.filter((record) => record.offer !== undefined).length };
  }

  // One round trip: the product and its offers through a left join (a product may have none).
  private readonly productWithOffers = this.lazy(() =>
    this.db
      .select(PRODUCT_WITH_OFFERS_COLUMNS)
      .from(products)
      .leftJoin(offers, eq(offers.gtin, products.gtin))
      .leftJoin(merchants, eq(merchants.id, offers.merchantId))
      .where(eq(products.gtin, sql.placeholder("gtin")))
      .orderBy(asc(offers.merchantId))
      .prepare("product_with_offers"),
  );

  // Invariant: a product is handed out from memory only while the catalog version this instance
  // last saw (read with a request's key by findKeyCredential, or heard from the ChangeListener; after
  // the listener lost its connection, none until the next read) is the one it was read under; a read that
  // overlapped a newer sighting is not kept. Every import moves the version in its transaction, so a
  // look-up never sees products older than the imports committed before its request began, on any
  // instance, without reading them again while nothing was imported.
  private catalogSeen = -1;

  seeCatalogVersion(version: number): void {
    if (version > this.catalogSeen) this.catalogSeen = version;
  }

  /** Imports may have been missed: no product is handed out from memory until a version is read again. */
  forgetCatalogVersion(): void {
    this.catalogSeen = -1;
  }

  /** A product read under the current catalog version, from memory; undefined when it must be read. */
  private rememberedProduct(gtin: string): { product: ProductRecord; offers: OfferRecord[] } | undefined {
    const last = this.handedOut.get(gtin);
    return last !== undefined && last.version === this.catalogSeen && last.version >= 0 ? last.found : undefined;
  }

  async findProductWithOffers(gtin: string): Promise<{ product: ProductRecord; offers: OfferRecord[] } | null> {
    const remembered = this.rememberedProduct(gtin);
    if (remembered !== undefined) return remembered;
    const version = this.catalogSeen;
    return this.productFromRows(gtin, await this.productWithOffers().execute({ gtin }), version);
  }

  /** Per GTIN: the rows last read, the object made of them and the catalog version they were read under (-1: unknown). */
  private readonly handedOut = new Map<string, { rows: string; found: { product: ProductRecord; offers: OfferRecord[] }; version: number }>();

  /**
   * The product of a GTIN's rows, as the same object as last time while its rows are unchanged, so
   * what a caller derived from it stays valid: lookUpPrices keeps each product's prepared answer by
   * object, as with the SQLite store's cached products, instead of rebuilding it every request.
   * `version`: the catalog version seen when the read began; kept only if no newer one was seen since.
   */
  private productFromRows(gtin: string, rows: ProductWithOffersRow[], version: number): { product: ProductRecord; offers: OfferRecord[] } | null {
    if (rows.length === 0) {
      this.handedOut.delete(gtin);
      return null;
    }
    const readUnder = version === this.catalogSeen ? version : -1;
    const content = JSON.stringify(rows);
    const last = this.handedOut.get(gtin);
    if (last?.rows === content) {
      last.version = readUnder;
      return last.found;
    }
    const found = productOfRows(rows);
    if (last === undefined && this.handedOut.size >= REMEMBERED_PRODUCTS) this.handedOut.delete(this.handedOut.keys().next().value!);
    this.handedOut.set(gtin, { rows: content, found, version: readUnder });
    return found;
  }

  // One statement for the GTINs not in memory, the rows of each product together in the single look-up's order.
  async findProductsWithOffers(gtins: readonly string[]): Promise<Array<{ product: ProductRecord; offers: OfferRecord[] } | null>> {
    const remembered = gtins.map((gtin) => this.rememberedProduct(gtin));
    const missing = gtins.filter((_, index) => remembered[index] === undefined);
    if (missing.length === 0) return remembered as Array<{ product: ProductRecord; offers: OfferRecord[] }>;
    const version = this.catalogSeen;
    const rows = await this.db
      .select(PRODUCT_WITH_OFFERS_COLUMNS)
      .from(products)
      .leftJoin(offers, eq(offers.gtin, products.gtin))
      .leftJoin(merchants, eq(merchants.id, offers.merchantId))
      .where(inArray(products.gtin, missing))
      .orderBy(asc(products.gtin), asc(offers.merchantId));
    const byGTIN = new Map<string, typeof rows>();
    for (const row of rows) {
      const group = byGTIN.get(row.gtin);
      if (group === undefined) byGTIN.set(row.gtin, [row]);
      else group.push(row);
    }
    return gtins.map((gtin, index) => remembered[index] ?? this.productFromRows(gtin, byGTIN.get(gtin) ?? [], version));
  }

  async refreshCatalogStatistics(): Promise<void> {
    // Autovacuum analyzes a bulk-loaded table only on its next round (up to a minute later); until
    // then the planner may scan all offers for a batch look-up (10 ms instead of 1 ms for 100 GTINs).
    await this.client`ANALYZE products, offers, merchants`;
  }

  async countProducts(): Promise<number> {
    const [row] = await this.db.select({ count: sql<number>`count(*)`.mapWith(Number) }).from(products);
    return row!.count;
  }

  async listPriceHistory(gtin: string, merchantId?: string): Promise<PriceHistoryEntry[]> {
    // The states each offer replaced, then its current one (last among equal times).
    const merchant = merchantId ?? null;
    const rows = await this.db.execute<PriceHistoryEntry & Record<string, unknown>>(sql`
      SELECT gtin, merchant_id AS "merchantId", price_amount AS "priceAmount", currency, shipping_amount AS "shippingAmount", availability,
             observed_at AS "observedAt", source_id AS "sourceId"
      FROM (
        SELECT gtin, merchant_id, price_amount, currency, shipping_amount, availability, observed_at, source_id, id AS position
        FROM offer_price_history WHERE gtin = ${gtin} AND (${merchant}::text IS NULL OR merchant_id = ${merchant})
        UNION ALL
        SELECT gtin, merchant_id, price_amount, currency, shipping_amount, availability, state_since, state_source_id, ${Number.MAX_SAFE_INTEGER}::bigint
        FROM offers WHERE gtin = ${gtin} AND (${merchant}::text IS NULL OR merchant_id = ${merchant})
      ) history
      ORDER BY observed_at, position`);
    return rows.map(({ gtin, merchantId, priceAmount, currency, shippingAmount, availability, observedAt, sourceId }) => ({
      gtin,
      merchantId,
      priceAmount,
      currency,
      shippingAmount,
      availability,
      observedAt: Number(observedAt),
      sourceId,
    }));
  }

  async prunePriceHistory(before: number): Promise<number> {
    // An offer's newest entry is the offer itself (`state_since`), so it stays whatever its age.
    await this.history.pruneDays(before);
    const deleted = await this.db.delete(offerPriceHistory).where(lt(offerPriceHistory.observedAt, before)).returning({ id: offerPriceHistory.id });
    return deleted.length;
  }
}

/** Rows per multi-row INSERT: well under PostgreSQL's 65 535 parameters per statement. */
const INSERT_CHUNK = 1000;
/** Products whose last rows the store remembers (see productFromRows). */
const REMEMBERED_PRODUCTS = 20_000;

const PRODUCT_WITH_OFFERS_COLUMNS = {
  gtin: products.gtin,
  title: products.title,
  brand: products.brand,
  imageUrl: products.imageUrl,
  merchantId: offers.merchantId,
  merchantName: merchants.name,
  priceAmount: offers.priceAmount,
  currency: offers.currency,
  shippingAmount: offers.shippingAmount,
  availability: offers.availability,
  condition: offers.condition,
  url: offers.url,
  observedAt: offers.observedAt,
};

type ProductWithOffersRow = {
  [K in keyof typeof PRODUCT_WITH_OFFERS_COLUMNS]: (typeof PRODUCT_WITH_OFFERS_COLUMNS)[K]["_"]["data"] | (K extends "gtin" | "title" ? never : null);
};

/** A product and its offers from its rows (at least one) of the products ⟕ offers ⟕ merchants join. */
function productOfRows(rows: ProductWithOffersRow[]): { product: ProductRecord; offers: OfferRecord[] } {
  const first = rows[0]!;
  const found: OfferRecord[] = [];
  for (const row of rows) {
    if (row.merchantId === null) continue;
    found.push({
      merchantId: row.merchantId,
      merchantName: row.merchantName!,
      priceAmount: row.priceAmount!,
      currency: row.currency!,
      shippingAmount: row.shippingAmount,
      availability: row.availability!,
      condition: row.condition!,
      url: row.url,
      observedAt: row.observedAt!,
    });
  }
  return { product: { gtin: first.gtin, title: first.title, brand: first.brand, imageUrl: first.imageUrl }, offers: found };
}

function chunks<T>(rows: T[]): T[][] {
  const out: T[][] = [];
  for (let start = 0; start < rows.length; start += INSERT_CHUNK) out.push(rows.slice(start, start + INSERT_CHUNK));
  return out;
}

type MergedOffer = typeof offers.$inferInsert;

/** One row per product, merchant and offer of a batch, as if its records were applied one by one. */
function mergeFeedRecords(records: FeedRecord[]): {
  products: Array<FeedRecord["product"]>;
  merchants: Array<{ id: string; name?: string }>;
  /**
   * The offers in rounds: the first record of each (gtin, merchant) in the first round, its second
   * in the second, and so on. One INSERT … ON CONFLICT may touch a row only once, and applying the
   * rounds in order is applying the records one by one: the price history triggers see each change.
   */
  offerRounds: MergedOffer[][];
} {
  const productsByGTIN = new Map<string, FeedRecord["product"]>();
  const merchantsById = new Map<string, { id: string; name?: string }>();
  const offerRounds: Array<Map<string, MergedOffer>> = [];
  const occurrences = new Map<string, number>();
  for (const { product, offer } of records) {
    const known = productsByGTIN.get(product.gtin);
    productsByGTIN.set(product.gtin, {
      gtin: product.gtin,
      ...(known?.title !== undefined || product.title !== undefined ? { title: product.title ?? known?.title } : {}),
      ...(known?.brand !== undefined || product.brand !== undefined ? { brand: product.brand ?? known?.brand } : {}),
      ...(known?.imageUrl !== undefined || product.imageUrl !== undefined ? { imageUrl: product.imageUrl ?? known?.imageUrl } : {}),
    });
    if (offer === undefined) continue;
    const name = offer.merchantName ?? merchantsById.get(offer.merchantId)?.name;
    merchantsById.set(offer.merchantId, name === undefined ? { id: offer.merchantId } : { id: offer.merchantId, name });
    const key = `${product.gtin}\u0000${offer.merchantId}`;
    const round = occurrences.get(key) ?? 0;
    occurrences.set(key, round + 1);
    const { merchantName: _name, ...fields } = offer;
    if (offerRounds.length === round) offerRounds.push(new Map());
    offerRounds[round]!.set(key, { gtin: product.gtin, ...fields });
  }
  const byKey =
    <T>(key: (row: T) => string) =>
    (a: T, b: T) =>
      key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0;
  return {
    products: [...productsByGTIN.values()].sort(byKey((p) => p.gtin)),
    merchants: [...merchantsById.values()].sort(byKey((m) => m.id)),
    offerRounds: offerRounds.map((round) => [...round.values()].sort(byKey((o) => `${o.gtin}\u0000${o.merchantId}`))),
  };
}
