import type { Database, SQLQueryBindings, Statement } from "bun:sqlite";
import { eq, sql } from "drizzle-orm";
import type { BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import type { PriceHistoryEntry } from "../feeds/records";
import { descriptionPrecedence, type FeedWriter, OPERATOR, productDescriptionUpdates, writerSourceId } from "../feeds/writers";
import type { SQLiteHistory } from "../history/sqlite";
import * as schema from "../schema/sqlite";
import type { FeedRecord, OfferRecord, ProductRecord } from "../store";

const { products, merchants, offers } = schema;

type DB = BunSQLiteDatabase<typeof schema>;

/**
 * What the SQLite store lends its catalog: its write transaction, its cache check and the product
 * cache (the store's own map, cleared with the other read caches), and the daily price history.
 */
export interface SQLiteCatalogDeps {
  write<T>(work: (db: DB) => T): T;
  syncCaches(): void;
  productCache: Map<string, { product: ProductRecord; offers: OfferRecord[] } | null>;
  history: SQLiteHistory;
}

/** The catalog on SQLite: feed imports, product and offer reads through the product cache, counts, and the price history's listing and pruning. */
export class SQLiteCatalog {
  private readonly productCache: SQLiteCatalogDeps["productCache"];
  private readonly history: SQLiteHistory;

  constructor(
    private readonly database: Database,
    private readonly db: DB,
    private readonly deps: SQLiteCatalogDeps,
  ) {
    this.productCache = deps.productCache;
    this.history = deps.history;
  }

  private write<T>(work: (db: DB) => T): T {
    return this.deps.write(work);
  }

  private syncCaches(): void {
    this.deps.syncCaches();
  }

  /** Prepares a statement on first use, so the statement is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  // Absent optional fields (null) keep what is stored; offers keep the newer observation. Imports
  // are the one bulk write, and a bun:sqlite call costs more than the row it writes, so rows go
  // IMPORT_ROWS_PER_STATEMENT at a time as `INSERT … SELECT … FROM (VALUES …)` (the `WHERE true`
  // lets SQLite parse the upsert clause after a SELECT). SQLite upserts those rows one after the
  // other, in order, so a key repeated within a statement updates the row its earlier copy wrote,
  // and the price history triggers see every change a batch makes, as with one statement per record.
  // Each product and merchant is upserted once per batch; a title is never empty when given, so the
  // empty title a new product gets without one is also how an update tells "absent".
  private readonly importStatements = new Map<string, Statement>();

  private importStatement(kind: ImportKind, rows: number): Statement {
    const key = `${kind}:${rows}`;
    let statement = this.importStatements.get(key);
    if (statement === undefined) {
      statement = this.database.prepare(kind === "offer" ? offerUpsertSQL(rows) : productUpsertSQL(rows, kind === "product-any" ? "any" : "own"));
      this.importStatements.set(key, statement);
    }
    return statement;
  }

  private readonly importMerchant = this.lazy(() =>
    this.database.prepare<unknown, [string, string | null]>(
      "INSERT INTO merchants (id, name) VALUES (?1, coalesce(?2, ?1)) ON CONFLICT (id) DO UPDATE SET name = coalesce(?2, name)",
    ),
  );

  /** Runs the `kind` upsert over `values` (`columns` per row), IMPORT_ROWS_PER_STATEMENT rows per statement. */
  private upsertRows(kind: ImportKind, columns: number, values: SQLQueryBindings[]): void {
    const perStatement = IMPORT_ROWS_PER_STATEMENT * columns;
    for (let start = 0; start < values.length; start += perStatement) {
      const chunk = start === 0 && values.length <= perStatement ? values : values.slice(start, start + perStatement);
      this.importStatement(kind, chunk.length / columns).run(...chunk);
    }
  }

  async applyFeedRecords(records: FeedRecord[], now: number, options: { writer?: FeedWriter } = {}): Promise<{ products: number; offers: number }> {
    const writer = options.writer ?? OPERATOR;
    const sourceId = writerSourceId(writer);
    const productKind: ImportKind = descriptionPrecedence(writer) === "any" ? "product-any" : "product-own";
    const { products: mergedProducts, merchants: mergedMerchants } = mergeProductsAndMerchants(records);
    const productValues: SQLQueryBindings[] = [];
    for (const product of mergedProducts) productValues.push(product.gtin, product.title ?? "", product.brand ?? null, product.imageUrl ?? null, now, sourceId);
    const offerValues: SQLQueryBindings[] = [];
    for (const { product, offer } of records) {
      if (offer === undefined) continue;
      offerValues.push(
        product.gtin,
        offer.merchantId,
        offer.priceAmount,
        offer.currency,
        offer.shippingAmount,
        offer.availability,
        offer.condition,
        offer.url,
        offer.observedAt,
        sourceId,
      );
    }
    const merchantStatement = this.importMerchant();
    return this.write(() => {
      this.upsertRows(productKind, PRODUCT_COLUMNS, productValues);
      for (const merchant of mergedMerchants) merchantStatement.run(merchant.id, merchant.name ?? null);
      this.upsertRows("offer", OFFER_COLUMNS, offerValues);
      return { products: records.length, offers: offerValues.length / OFFER_COLUMNS };
    });
  }

  private readonly productByGTIN = this.lazy(() =>
    this.db
      .select({ gtin: products.gtin, title: products.title, brand: products.brand, imageUrl: products.imageUrl })
      .from(products)
      .where(eq(products.gtin, sql.placeholder("gtin")))
      .prepare(),
  );

  private readonly offersByGTIN = this.lazy(() =>
    this.db
      .select({
        merchantId: offers.merchantId,
        merchantName: merchants.name,
        priceAmount: offers.priceAmount,
        currency: offers.currency,
        shippingAmount: offers.shippingAmount,
        availability: offers.availability,
        condition: offers.condition,
        url: offers.url,
        observedAt: offers.observedAt,
      })
      .from(offers)
      .innerJoin(merchants, eq(merchants.id, offers.merchantId))
      .where(eq(offers.gtin, sql.placeholder("gtin")))
      .prepare(),
  );

  async findProductWithOffers(gtin: string) {
    this.syncCaches();
    return this.productWithOffers(gtin);
  }

  async findProductsWithOffers(gtins: readonly string[]) {
    this.syncCaches();
    return gtins.map((gtin) => this.productWithOffers(gtin));
  }

  private productWithOffers(gtin: string): { product: ProductRecord; offers: OfferRecord[] } | null {
    const cached = this.productCache.get(gtin);
    if (cached !== undefined) return cached;
    const product = this.productByGTIN().get({ gtin });
    const found = product === undefined ? null : { product, offers: this.offersByGTIN().all({ gtin }) };
    if (this.productCache.size >= PRODUCT_CACHE_SIZE) this.productCache.delete(this.productCache.keys().next().value!);
    this.productCache.set(gtin, found);
    return found;
  }

  /** Nothing to do: without statistics SQLite's planner already takes the primary keys the look-ups use. */
  async refreshCatalogStatistics(): Promise<void> {}

  async countProducts(): Promise<number> {
    return this.db.select({ count: sql<number>`count(*)` }).from(products).get()!.count;
  }

  async listPriceHistory(gtin: string, merchantId?: string): Promise<PriceHistoryEntry[]> {
    return this.database
      .query<PriceHistoryEntry, [string, string | null]>(
        `SELECT gtin, merchantId, priceAmount, currency, shippingAmount, availability, observedAt, sourceId FROM (${PRICE_HISTORY_SQL}) ORDER BY observedAt, position`,
      )
      .all(gtin, merchantId ?? null);
  }

  async prunePriceHistory(before: number): Promise<number> {
    // An offer's newest entry is the offer itself (`state_since`), so it stays whatever its age.
    return this.write(() => {
      this.history.pruneDays(before);
      return this.database.query("DELETE FROM offer_price_history WHERE observed_at < ?").run(before).changes;
    });
  }
}

const PRODUCT_CACHE_SIZE = 100_000;

/**
 * The products and merchants of a batch, each once, with what applying the records one by one would
 * leave: the last given title, brand, image and merchant name win, absent ones keep the stored value.
 */
function mergeProductsAndMerchants(records: FeedRecord[]): { products: Array<FeedRecord["product"]>; merchants: Array<{ id: string; name?: string }> } {
  const products = new Map<string, FeedRecord["product"]>();
  const merchantsById = new Map<string, { id: string; name?: string }>();
  for (const { product, offer } of records) {
    const known = products.get(product.gtin);
    if (known === undefined) products.set(product.gtin, { ...product });
    else {
      if (product.title !== undefined) known.title = product.title;
      if (product.brand !== undefined) known.brand = product.brand;
      if (product.imageUrl !== undefined) known.imageUrl = product.imageUrl;
    }
    if (offer === undefined) continue;
    const merchant = merchantsById.get(offer.merchantId);
    if (merchant === undefined)
      merchantsById.set(offer.merchantId, offer.merchantName === undefined ? { id: offer.merchantId } : { id: offer.merchantId, name: offer.merchantName });
    else if (offer.merchantName !== undefined) merchant.name = offer.merchantName;
  }
  return { products: [...products.values()], merchants: [...merchantsById.values()] };
}

/**
 * An offer's price history: the states it replaced, then its current one (last among equal times).
 * Parameters: ?1 the GTIN, ?2 a merchant id or null for all.
 */
const PRICE_HISTORY_SQL = `
  SELECT gtin, merchant_id AS merchantId, price_amount AS priceAmount, currency, shipping_amount AS shippingAmount, availability,
         observed_at AS observedAt, source_id AS sourceId, id AS position
  FROM offer_price_history WHERE gtin = ?1 AND (?2 IS NULL OR merchant_id = ?2)
  UNION ALL
  SELECT gtin, merchant_id, price_amount, currency, shipping_amount, availability, state_since, state_source_id, ${Number.MAX_SAFE_INTEGER}
  FROM offers WHERE gtin = ?1 AND (?2 IS NULL OR merchant_id = ?2)`;

/** Rows per import upsert statement: past about a hundred, longer statements stop paying off. */
const IMPORT_ROWS_PER_STATEMENT = 100;
const PRODUCT_COLUMNS = 6;

/** The upsert statements of an import: products under either description precedence, offers. */
type ImportKind = "product-any" | "product-own" | "offer";
const OFFER_COLUMNS = 10;

function valuesList(rows: number, columns: number): string {
  const row = `(${Array.from({ length: columns }, () => "?").join(", ")})`;
  return Array.from({ length: rows }, () => row).join(", ");
}

function productUpsertSQL(rows: number, precedence: "any" | "own"): string {
  const described = Object.entries(productDescriptionUpdates(precedence)).map(([column, value]) => `${column} = ${value}`);
  return `INSERT INTO products (gtin, title, brand, image_url, updated_at, described_by) SELECT * FROM (VALUES ${valuesList(rows, PRODUCT_COLUMNS)}) WHERE true
    ON CONFLICT (gtin) DO UPDATE SET ${described.join(", ")}, updated_at = excluded.updated_at`;
}

function offerUpsertSQL(rows: number): string {
  // `offers.x` is the stored row: an update that changes the state starts a new `state_since` (and
  // the history trigger keeps the state it replaces); an identical repeat keeps the old one.
  const changed = `excluded.price_amount IS NOT offers.price_amount OR excluded.currency IS NOT offers.currency
    OR excluded.shipping_amount IS NOT offers.shipping_amount OR excluded.availability IS NOT offers.availability`;
  return `INSERT INTO offers (gtin, merchant_id, price_amount, currency, shipping_amount, availability, condition, url, observed_at, source_id, state_since, state_source_id)
    SELECT *, column9, column10 FROM (VALUES ${valuesList(rows, OFFER_COLUMNS)}) WHERE true
    ON CONFLICT (gtin, merchant_id) DO UPDATE SET price_amount = excluded.price_amount, currency = excluded.currency,
      shipping_amount = excluded.shipping_amount, availability = excluded.availability, condition = excluded.condition,
      url = excluded.url, observed_at = excluded.observed_at, source_id = excluded.source_id,
      state_since = CASE WHEN ${changed} THEN excluded.observed_at ELSE offers.state_since END,
      state_source_id = CASE WHEN ${changed} THEN excluded.source_id ELSE offers.state_source_id END
    WHERE excluded.observed_at >= offers.observed_at`;
}
