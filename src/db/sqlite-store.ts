import { Database } from "bun:sqlite";
import { and, asc, desc, eq, gt, gte, inArray, isNotNull, isNull, lt, lte, or, sql } from "drizzle-orm";
import { type BunSQLiteDatabase, drizzle } from "drizzle-orm/bun-sqlite";
import { newId } from "../lib/ids";
import { page, toKeyRecord } from "./rows";
import type {
  CompleteOrderInput,
  CompleteOrderResult,
  CreditGrant,
  InvoiceInput,
  InvoiceRecord,
  NewOrder,
  Order,
  PaymentInput,
  ProviderEvent,
  RenewSubscriptionInput,
  SubscriptionRecord,
} from "./billing-records";
import { decodeLedgerCursor, encodeLedgerCursor } from "./cursor";
import { applySQLiteMigrations } from "./migrate";
import * as schema from "./schema/sqlite";
import { SYSTEM_USER_ID } from "./store";
import type {
  ApiKeyRecord,
  Balance,
  Bucket,
  FeedRecord,
  IdempotencyClaim,
  Invitation,
  KeyCredential,
  LedgerTransaction,
  NewApiKey,
  OfferRecord,
  Organization,
  Page,
  ProductRecord,
  Reservation,
  SessionRecord,
  SessionWithUser,
  SignInOutcome,
  Store,
  TransactionQuery,
  TransactionType,
  UsageRecord,
  User,
} from "./store";

const { organizations, users, sessions, apiKeys, products, merchants, offers, creditBuckets, creditTransactions } = schema;
const { invitations, idempotencyRecords } = schema;
const { orders, subscriptions, invoices, payments, providerEvents } = schema;

type DB = BunSQLiteDatabase<typeof schema>;



/** Opens (and creates) a SQLite database: WAL, a busy timeout for concurrent CLI writers, foreign keys on. */
export function openSQLite(path: string): Database {
  const database = new Database(path, { create: true, strict: true });
  database.exec("PRAGMA journal_mode = WAL");
  database.exec("PRAGMA synchronous = NORMAL");
  database.exec("PRAGMA busy_timeout = 5000");
  database.exec("PRAGMA foreign_keys = ON");
  return database;
}

export function sqlitePathFromURL(databaseUrl: string): string {
  const path = databaseUrl.replace(/^sqlite:(\/\/)?/, "");
  return path === "" ? ":memory:" : path;
}

const keyRecordColumns = {
  id: apiKeys.id,
  organizationId: apiKeys.organizationId,
  name: apiKeys.name,
  keyPrefix: apiKeys.keyPrefix,
  status: apiKeys.status,
  replacedBy: apiKeys.replacedBy,
  createdAt: apiKeys.createdAt,
  lastUsedAt: apiKeys.lastUsedAt,
  createdById: users.id,
  createdByName: users.name,
  createdByEmail: users.email,
};


// Soonest-expiring first; buckets that never expire last; then oldest first.
const FEFO = [sql`${creditBuckets.expiresAt} IS NULL`, asc(creditBuckets.expiresAt), asc(creditBuckets.id)] as const;

const PRODUCT_CACHE_SIZE = 100_000;

export class SQLiteStore implements Store {
  readonly dialect = "sqlite";
  private readonly db: DB;

  constructor(private readonly database: Database) {
    this.db = drizzle(database, { schema });
  }

  static open(databaseUrl: string): SQLiteStore {
    const database = openSQLite(sqlitePathFromURL(databaseUrl));
    applySQLiteMigrations(database);
    return new SQLiteStore(database);
  }

  /** The raw connection, for `backup` and for tests that inspect or corrupt state on purpose. */
  get connection(): Database {
    return this.database;
  }

  private closed = false;

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      this.database.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    } finally {
      this.database.close();
    }
  }

  async isReachable(): Promise<boolean> {
    try {
      return this.database.query("SELECT 1 AS ok").get() !== null;
    } catch {
      return false;
    }
  }

  /**
   * Runs `work` in one BEGIN IMMEDIATE transaction (bun:sqlite's own, cheaper than drizzle's
   * wrapper); every statement inside runs on this connection, so it is part of the transaction.
   */
  private write<T>(work: (db: DB) => T): T {
    return this.database.transaction(() => work(this.db)).immediate();
  }

  /**
   * A write whose effect on the read caches is applied by the caller (the billing debit) or that
   * touches nothing cached (lastUsedAt). Any other change seen before it still clears the caches.
   */
  private writeKeepingCaches<T>(work: () => T): T {
    this.syncCaches("all connections");
    const result = this.database.transaction(work).immediate();
    this.seenChanges = this.totalChanges().get()!.changes;
    return result;
  }

  // Read caches for the data endpoint's hot path: key credentials, products with offers, and
  // spendable buckets. SQLite tells exactly when they may be stale: `data_version` changes when
  // another connection (the operator CLI: import, grants, revocations) commits, `total_changes()`
  // when this connection writes. Either moving clears every cache; the billing debit alone updates
  // the cached buckets in place instead. `total_changes()` is nearly free and checked before every
  // cached read; `data_version` costs a read transaction, so it is checked where a data request
  // starts (the key look-up): another connection can only add credits, products or revocations,
  // never take credits away, so a request that started before such a commit is safe to finish on
  // what it saw, and the next request sees the commit.
  private readonly keyCache = new Map<string, KeyCredential>();
  private readonly productCache = new Map<string, { product: ProductRecord; offers: OfferRecord[] } | null>();
  private readonly bucketCache = new Map<string, Array<{ id: string; remaining: number; expiresAt: number | null }>>();
  private seenDataVersion = -1;
  private seenChanges = -1;
  private readonly dataVersion = this.lazy(() => this.database.query<{ data_version: number }, []>("PRAGMA data_version"));
  private readonly totalChanges = this.lazy(() => this.database.query<{ changes: number }, []>("SELECT total_changes() AS changes"));

  /** Drops every cache when anything was committed since the last check that the caches do not reflect. */
  private syncCaches(scope: "this connection" | "all connections" = "this connection"): void {
    const version = scope === "all connections" ? this.dataVersion().get()!.data_version : this.seenDataVersion;
    const changes = this.totalChanges().get()!.changes;
    if (version !== this.seenDataVersion || changes !== this.seenChanges) {
      this.keyCache.clear();
      this.productCache.clear();
      this.bucketCache.clear();
      this.seenDataVersion = version;
      this.seenChanges = changes;
    }
  }

  async createOrganization(input: { name: string; now: number }): Promise<Organization> {
    const organization = { id: newId("org", input.now), name: input.name, createdAt: input.now };
    this.db.insert(organizations).values(organization).run();
    return organization;
  }

  async getOrganization(id: string): Promise<Organization | null> {
    const row = this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .where(eq(organizations.id, id))
      .get();
    return row ?? null;
  }

  async listOrganizations(): Promise<Organization[]> {
    return this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .orderBy(desc(organizations.id))
      .all();
  }

  async ensureSystemUser(now: number): Promise<User> {
    this.db
      .insert(users)
      .values({ id: SYSTEM_USER_ID, email: null, name: "system", subject: null, organizationId: null, role: "member", createdAt: now })
      .onConflictDoNothing()
      .run();
    return this.db.select().from(users).where(eq(users.id, SYSTEM_USER_ID)).get()!;
  }

  async findSessionWithUser(sessionId: string): Promise<SessionWithUser | null> {
    const row = this.db.select().from(sessions).innerJoin(users, eq(users.id, sessions.userId)).where(eq(sessions.id, sessionId)).get();
    return row ? { session: row.sessions, user: row.users } : null;
  }

  private keyQuery() {
    return this.db.select(keyRecordColumns).from(apiKeys).innerJoin(users, eq(users.id, apiKeys.createdBy));
  }

  async insertApiKey(key: NewApiKey): Promise<ApiKeyRecord> {
    this.db.insert(apiKeys).values({ ...key, status: "ACTIVE" }).run();
    return (await this.getApiKeyById(key.id))!;
  }

  private readonly credentialByHash = this.lazy(() =>
    this.db
      .select({ id: apiKeys.id, organizationId: apiKeys.organizationId, keyPrefix: apiKeys.keyPrefix, keyHash: apiKeys.keyHash, status: apiKeys.status })
      .from(apiKeys)
      .where(eq(apiKeys.keyHash, sql.placeholder("hash")))
      .prepare(),
  );

  async findKeyCredential(keyHash: string): Promise<KeyCredential | null> {
    this.syncCaches("all connections");
    const cached = this.keyCache.get(keyHash);
    if (cached !== undefined) return cached;
    const credential = this.credentialByHash().get({ hash: keyHash });
    if (credential === undefined) return null;
    this.keyCache.set(keyHash, credential);
    return credential;
  }

  async getApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null> {
    const row = this.keyQuery().where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId))).get();
    return row ? toKeyRecord(row) : null;
  }

  async getApiKeyById(id: string): Promise<ApiKeyRecord | null> {
    const row = this.keyQuery().where(eq(apiKeys.id, id)).get();
    return row ? toKeyRecord(row) : null;
  }

  async listApiKeys(organizationId: string, query: { limit: number; after?: string }): Promise<Page<ApiKeyRecord>> {
    const rows = this.keyQuery()
      .where(and(eq(apiKeys.organizationId, organizationId), query.after ? lt(apiKeys.id, query.after) : undefined))
      .orderBy(desc(apiKeys.id))
      .limit(query.limit + 1)
      .all();
    return page(rows.map(toKeyRecord), query.limit);
  }

  async revokeApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null> {
    const changed = this.db
      .update(apiKeys)
      .set({ status: "REVOKED" })
      .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
      .returning({ id: apiKeys.id })
      .all();
    return changed.length === 1 ? this.getApiKey(organizationId, id) : null;
  }

  async rotateApiKey(organizationId: string, id: string, replacement: NewApiKey): Promise<ApiKeyRecord | null> {
    const rotated = this.write((tx) => {
      const changed = tx
        .update(apiKeys)
        .set({ status: "ROTATED", replacedBy: replacement.id })
        .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
        .returning({ id: apiKeys.id })
        .all();
      if (changed.length !== 1) return false;
      tx.insert(apiKeys).values({ ...replacement, status: "ACTIVE" }).run();
      return true;
    });
    return rotated ? this.getApiKeyById(replacement.id) : null;
  }

  async touchApiKeys(lastUsed: Map<string, number>): Promise<void> {
    if (lastUsed.size === 0) return;
    const tx = this.db;
    this.writeKeepingCaches(() => {
      for (const [id, at] of lastUsed) {
        tx.update(apiKeys)
          .set({ lastUsedAt: sql`max(coalesce(${apiKeys.lastUsedAt}, 0), ${at})` })
          .where(eq(apiKeys.id, id))
          .run();
      }
    });
  }

  // Absent optional fields (null placeholders) keep what is stored; offers keep the newer observation.
  private readonly upsertProduct = this.lazy(() =>
    this.db
      .insert(products)
      .values({
        gtin: sql.placeholder("gtin"),
        title: sql`coalesce(${sql.placeholder("title")}, '')`,
        brand: sql.placeholder("brand"),
        imageUrl: sql.placeholder("imageUrl"),
        updatedAt: sql.placeholder("now"),
      })
      .onConflictDoUpdate({
        target: products.gtin,
        set: {
          title: sql`coalesce(${sql.placeholder("title")}, ${products.title})`,
          brand: sql`coalesce(excluded.brand, ${products.brand})`,
          imageUrl: sql`coalesce(excluded.image_url, ${products.imageUrl})`,
          updatedAt: sql`excluded.updated_at`,
        },
      })
      .prepare(),
  );

  private readonly upsertMerchant = this.lazy(() =>
    this.db
      .insert(merchants)
      .values({ id: sql.placeholder("id"), name: sql`coalesce(${sql.placeholder("name")}, ${sql.placeholder("id")})` })
      .onConflictDoUpdate({ target: merchants.id, set: { name: sql`coalesce(${sql.placeholder("name")}, ${merchants.name})` } })
      .prepare(),
  );

  private readonly upsertOffer = this.lazy(() =>
    this.db
      .insert(offers)
      .values({
        gtin: sql.placeholder("gtin"),
        merchantId: sql.placeholder("merchantId"),
        priceAmount: sql.placeholder("priceAmount"),
        currency: sql.placeholder("currency"),
        shippingAmount: sql.placeholder("shippingAmount"),
        availability: sql.placeholder("availability"),
        condition: sql.placeholder("condition"),
        url: sql.placeholder("url"),
        observedAt: sql.placeholder("observedAt"),
      })
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
        },
        setWhere: sql`excluded.observed_at >= ${offers.observedAt}`,
      })
      .prepare(),
  );

  async applyFeedRecords(records: FeedRecord[], now: number): Promise<{ products: number; offers: number }> {
    return this.write(() => {
      let offerCount = 0;
      for (const { product, offer } of records) {
        this.upsertProduct().run({ gtin: product.gtin, title: product.title ?? null, brand: product.brand ?? null, imageUrl: product.imageUrl ?? null, now });
        if (offer === undefined) continue;
        this.upsertMerchant().run({ id: offer.merchantId, name: offer.merchantName ?? null });
        this.upsertOffer().run({ gtin: product.gtin, ...offer });
        offerCount++;
      }
      return { products: records.length, offers: offerCount };
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
    const cached = this.productCache.get(gtin);
    if (cached !== undefined) return cached;
    const product = this.productByGTIN().get({ gtin });
    const found = product === undefined ? null : { product, offers: this.offersByGTIN().all({ gtin }) };
    if (this.productCache.size >= PRODUCT_CACHE_SIZE) this.productCache.delete(this.productCache.keys().next().value!);
    this.productCache.set(gtin, found);
    return found;
  }

  async countProducts(): Promise<number> {
    return this.db.select({ count: sql<number>`count(*)` }).from(products).get()!.count;
  }

  private readonly moveLedgerStatement = this.lazy(() =>
    this.db
      .update(organizations)
      .set({ ledgerBalance: sql`${organizations.ledgerBalance} + ${sql.placeholder("amount")}` })
      .where(eq(organizations.id, sql.placeholder("organizationId")))
      .returning({ ledgerBalance: organizations.ledgerBalance })
      .prepare(),
  );

  private readonly insertTransaction = this.lazy(() =>
    this.db
      .insert(creditTransactions)
      .values({
        id: sql.placeholder("id"),
        organizationId: sql.placeholder("organizationId"),
        type: sql.placeholder("type"),
        amount: sql.placeholder("amount"),
        balanceAfter: sql.placeholder("balanceAfter"),
        bucketId: sql.placeholder("bucketId"),
        keyId: sql.placeholder("keyId"),
        requestId: sql.placeholder("requestId"),
        gtin: sql.placeholder("gtin"),
        description: sql.placeholder("description"),
        createdAt: sql.placeholder("createdAt"),
      })
      .prepare(),
  );

  /** Appends a ledger row and moves the running sum; the only way credits enter or leave the ledger. */
  private appendLedger(row: Omit<LedgerTransaction, "id" | "balanceAfter" | "bucketId" | "keyId" | "requestId" | "gtin"> & Partial<Pick<LedgerTransaction, "bucketId" | "keyId" | "requestId" | "gtin">>): void {
    const balanceAfter = this.moveLedger(row.organizationId, row.amount);
    this.insertTransaction().run({
      id: newId("txn", row.createdAt),
      bucketId: null,
      keyId: null,
      requestId: null,
      gtin: null,
      ...row,
      balanceAfter,
    });
  }

  private readonly adjustBucket = this.lazy(() =>
    this.db
      .update(creditBuckets)
      .set({ remaining: sql`${creditBuckets.remaining} + ${sql.placeholder("delta")}` })
      .where(eq(creditBuckets.id, sql.placeholder("bucketId")))
      .prepare(),
  );

  /** Adds `amount` to the organization's running ledger sum and returns the new sum (the row's balanceAfter). */
  private moveLedger(organizationId: string, amount: number): number {
    const row = this.moveLedgerStatement().get({ organizationId, amount });
    if (row === undefined) throw new Error(`organization ${organizationId} does not exist`);
    return row.ledgerBalance;
  }

  /** Inserts a bucket and its ledger row inside `tx`. */
  private insertGrant(tx: DB, organizationId: string, grant: CreditGrant, now: number): Bucket {
    const bucket: Bucket = {
      id: newId("bkt", now),
      organizationId,
      source: grant.source,
      granted: grant.amount,
      remaining: grant.amount,
      expiresAt: grant.expiresAt,
      createdAt: now,
    };
    tx.insert(creditBuckets).values(bucket).run();
    this.appendLedger({ organizationId, type: grant.type, amount: grant.amount, bucketId: bucket.id, description: grant.description, createdAt: now });
    return bucket;
  }

  // Invariant: a bucket and its ledger row are written together; ledger sum = available + reserved.
  async grantCredits(input: Parameters<Store["grantCredits"]>[0]): Promise<Bucket> {
    const { organizationId, now, ...grant } = input;
    return this.write((tx) => this.insertGrant(tx, organizationId, grant, now));
  }

  /**
   * Writes off the expired buckets (of one organization, or all) with an `expiry` ledger row each.
   * Credits held by a request in flight stay in their bucket until it commits or releases; a
   * later sweep writes off what a release gives back.
   */
  private writeOffExpired(organizationId: string | null, now: number): number {
    const expired = this.db
      .select({ id: creditBuckets.id, organizationId: creditBuckets.organizationId, remaining: creditBuckets.remaining })
      .from(creditBuckets)
      .where(
        and(
          organizationId === null ? undefined : eq(creditBuckets.organizationId, organizationId),
          gt(creditBuckets.remaining, 0),
          lte(creditBuckets.expiresAt, now),
        ),
      )
      .all();
    let written = 0;
    for (const bucket of expired) {
      const amount = bucket.remaining - (this.holds.get(bucket.id) ?? 0);
      if (amount <= 0) continue;
      this.adjustBucket().run({ bucketId: bucket.id, delta: -amount });
      this.appendLedger({ organizationId: bucket.organizationId, type: "expiry", amount: -amount, bucketId: bucket.id, description: "Expired credits written off", createdAt: now });
      written++;
    }
    return written;
  }

  private readonly bucketsWithCredits = this.lazy(() =>
    this.db
      .select({ id: creditBuckets.id, remaining: creditBuckets.remaining, expiresAt: creditBuckets.expiresAt })
      .from(creditBuckets)
      .where(and(eq(creditBuckets.organizationId, sql.placeholder("organizationId")), gt(creditBuckets.remaining, 0)))
      .orderBy(...FEFO)
      .prepare(),
  );

  // Reservations live in memory: one `serve` process owns a SQLite file, JavaScript runs one request
  // at a time between awaits, and a hold is taken synchronously after reading the buckets, so two
  // requests can never hold the same credit. A crash loses only holds, never credits: buckets are
  // debited only when a usage row is written, in the same transaction.
  private readonly holds = new Map<string, number>();
  private readonly heldReservations = new Map<string, { organizationId: string; amount: number; allocations: Array<{ bucketId: string; amount: number }>; keyId: string | null; requestId: string }>();

  /** Spendable buckets (unexpired, FEFO) with what requests in flight hold already taken out. */
  private spendableBuckets(organizationId: string, now: number): Array<{ id: string; free: number }> {
    const spendable: Array<{ id: string; free: number }> = [];
    this.syncCaches();
    let buckets = this.bucketCache.get(organizationId);
    if (buckets === undefined) {
      buckets = this.bucketsWithCredits().all({ organizationId });
      this.bucketCache.set(organizationId, buckets);
    }
    for (const bucket of buckets) {
      if (bucket.expiresAt !== null && bucket.expiresAt <= now) continue;
      const free = bucket.remaining - (this.holds.get(bucket.id) ?? 0);
      if (free > 0) spendable.push({ id: bucket.id, free });
    }
    return spendable;
  }

  private changeHold(bucketId: string, delta: number): void {
    const held = (this.holds.get(bucketId) ?? 0) + delta;
    if (held === 0) this.holds.delete(bucketId);
    else this.holds.set(bucketId, held);
  }

  // Invariant: the credits held never exceed a bucket's remaining credits.
  async reserveCredits(input: Parameters<Store["reserveCredits"]>[0]): Promise<Reservation> {
    const buckets = this.spendableBuckets(input.organizationId, input.now);
    const available = buckets.reduce((sum, bucket) => sum + bucket.free, 0);
    if (available < input.amount) return { ok: false, available };
    const allocations: Array<{ bucketId: string; amount: number }> = [];
    let missing = input.amount;
    for (const bucket of buckets) {
      if (missing === 0) break;
      const take = Math.min(bucket.free, missing);
      this.changeHold(bucket.id, take);
      allocations.push({ bucketId: bucket.id, amount: take });
      missing -= take;
    }
    const reservationId = newId("res", input.now);
    this.heldReservations.set(reservationId, { organizationId: input.organizationId, amount: input.amount, allocations, keyId: input.keyId, requestId: input.requestId });
    return { ok: true, reservationId };
  }

  private pendingCommits: Array<{ reservationId: string; usage: UsageRecord; done: (error: unknown) => void }> = [];

  /**
   * Group commit: the debits of every request that reaches commit in the same event-loop turn are
   * written in one transaction, and each request is answered only after that transaction commits.
   */
  commitReservation(reservationId: string, usage: UsageRecord): Promise<boolean> {
    if (!this.heldReservations.has(reservationId)) return Promise.resolve(false);
    return new Promise<boolean>((resolve, reject) => {
      if (this.pendingCommits.length === 0) setImmediate(() => this.flushCommits());
      this.pendingCommits.push({ reservationId, usage, done: (error) => (error === false ? resolve(false) : error === undefined ? resolve(true) : reject(error)) });
    });
  }

  private readonly setLedgerBalance = this.lazy(() =>
    this.db
      .update(organizations)
      .set({ ledgerBalance: sql`${sql.placeholder("ledgerBalance")}` })
      .where(eq(organizations.id, sql.placeholder("organizationId")))
      .prepare(),
  );

  private readonly ledgerBalanceOf = this.lazy(() =>
    this.db.select({ ledgerBalance: organizations.ledgerBalance }).from(organizations).where(eq(organizations.id, sql.placeholder("organizationId"))).prepare(),
  );

  // Invariant: the buckets' debits, the usage rows and the running ledger sum of a batch commit
  // together, so each request is billed exactly once and balanceAfter follows the ledger order.
  private debitBatch(items: Array<{ reservationId: string; usage: UsageRecord }>): void {
    const bucketDebits = new Map<string, number>();
    const ledgerBalances = new Map<string, number>();
    for (const { reservationId, usage } of items) {
      const reservation = this.heldReservations.get(reservationId)!;
      for (const allocation of reservation.allocations) bucketDebits.set(allocation.bucketId, (bucketDebits.get(allocation.bucketId) ?? 0) + allocation.amount);
      const balanceAfter = (ledgerBalances.get(reservation.organizationId) ?? this.ledgerBalanceOf().get({ organizationId: reservation.organizationId })!.ledgerBalance) - reservation.amount;
      ledgerBalances.set(reservation.organizationId, balanceAfter);
      this.insertTransaction().run({
        id: newId("txn", usage.now),
        organizationId: reservation.organizationId,
        type: "usage",
        amount: -reservation.amount,
        balanceAfter,
        bucketId: reservation.allocations.length === 1 ? reservation.allocations[0]!.bucketId : null,
        keyId: reservation.keyId,
        requestId: reservation.requestId,
        gtin: usage.gtin,
        description: usage.description,
        createdAt: usage.now,
      });
      if (usage.idempotency !== undefined) this.completeIdempotencyRecord(usage.idempotency);
    }
    for (const [bucketId, amount] of bucketDebits) this.adjustBucket().run({ bucketId, delta: -amount });
    for (const [organizationId, ledgerBalance] of ledgerBalances) this.setLedgerBalance().run({ organizationId, ledgerBalance });
  }

  private flushCommits(): void {
    // One reservation committed twice at once is debited once: the later calls answer false.
    const seen = new Set<string>();
    const batch = this.pendingCommits.filter((item) => !seen.has(item.reservationId) && seen.add(item.reservationId));
    const kept = new Set(batch);
    const repeated = this.pendingCommits.filter((item) => !kept.has(item));
    this.pendingCommits = [];
    for (const item of repeated) item.done(false);
    const settle = (item: (typeof batch)[number], error?: unknown) => {
      if (error === undefined) this.debitCachedBuckets(item.reservationId);
      if (error === undefined) this.dropReservation(item.reservationId);
      item.done(error);
    };
    try {
      this.writeKeepingCaches(() => this.debitBatch(batch));
      batch.forEach((item) => settle(item));
    } catch {
      // One bad debit must not fail its neighbours: retry each alone and fail only the culprit.
      for (const item of batch) {
        try {
          this.writeKeepingCaches(() => this.debitBatch([item]));
          settle(item);
        } catch (error) {
          settle(item, error);
        }
      }
    }
  }

  /** After a committed debit, the cached buckets take the same debit (so the cache stays exact). */
  private debitCachedBuckets(reservationId: string): void {
    const reservation = this.heldReservations.get(reservationId)!;
    const buckets = this.bucketCache.get(reservation.organizationId);
    if (buckets === undefined) return;
    for (const allocation of reservation.allocations) {
      const bucket = buckets.find((b) => b.id === allocation.bucketId);
      if (bucket === undefined) this.bucketCache.delete(reservation.organizationId);
      else bucket.remaining -= allocation.amount;
    }
  }

  private dropReservation(reservationId: string): boolean {
    const reservation = this.heldReservations.get(reservationId);
    if (reservation === undefined) return false;
    this.heldReservations.delete(reservationId);
    for (const allocation of reservation.allocations) this.changeHold(allocation.bucketId, -allocation.amount);
    return true;
  }

  async releaseReservation(reservationId: string): Promise<boolean> {
    return this.dropReservation(reservationId);
  }

  async recoverInFlightWork(_now: number): Promise<void> {
    this.write((tx) => tx.delete(idempotencyRecords).where(eq(idempotencyRecords.status, "in-progress")).run());
  }

  /** Holds are in memory and die with the process, so nothing is ever left to sweep. */
  async releaseStaleReservations(_olderThan: number): Promise<number> {
    return 0;
  }

  async availableCredits(organizationId: string, now: number): Promise<number> {
    return this.spendableBuckets(organizationId, now).reduce((sum, bucket) => sum + bucket.free, 0);
  }

  async getBalance(organizationId: string, now: number): Promise<Balance> {
    return this.write((tx) => {
      this.writeOffExpired(organizationId, now);
      // Spent, written-off and clawed-back buckets are history: the ledger tells it, the balance does not list them.
      const buckets = tx
        .select()
        .from(creditBuckets)
        .where(and(eq(creditBuckets.organizationId, organizationId), gt(creditBuckets.remaining, 0)))
        .orderBy(...FEFO)
        .all()
        .map((bucket) => ({ ...bucket, remaining: bucket.remaining - (this.holds.get(bucket.id) ?? 0) }));
      let reserved = 0;
      for (const reservation of this.heldReservations.values()) if (reservation.organizationId === organizationId) reserved += reservation.amount;
      const available = buckets.reduce((sum, b) => sum + (b.expiresAt === null || b.expiresAt > now ? b.remaining : 0), 0);
      return { available, reserved, buckets };
    });
  }

  // Raw SQL for the index hint: with one type the (org, type, createdAt, id) index answers a page
  // with a single range scan however rare the type; the planner, without statistics, would pick the
  // (org, createdAt, id) index and filter millions of usage rows. The upper bound merges the cursor
  // and `to` into one row-value comparison, which both indexes can range over.
  private readonly transactionPage = this.lazy(() => {
    const tail = `(created_at, id) < ($beforeAt, $beforeId) AND created_at >= $from ORDER BY created_at DESC, id DESC LIMIT $limit`;
    return {
      all: this.database.query<TransactionRow, TransactionParams>(
        `SELECT * FROM credit_transactions INDEXED BY credit_transactions_org_created_idx WHERE organization_id = $organizationId AND ${tail}`,
      ),
      oneType: this.database.query<TransactionRow, TransactionParams & { type: string }>(
        `SELECT * FROM credit_transactions INDEXED BY credit_transactions_org_type_created_idx WHERE organization_id = $organizationId AND type = $type AND ${tail}`,
      ),
      someTypes: this.database.query<TransactionRow, TransactionParams & { types: string }>(
        `SELECT * FROM credit_transactions INDEXED BY credit_transactions_org_created_idx WHERE organization_id = $organizationId AND type IN (SELECT value FROM json_each($types)) AND ${tail}`,
      ),
    };
  });

  async listTransactions(organizationId: string, query: TransactionQuery): Promise<Page<LedgerTransaction>> {
    let before = { createdAt: Number.MAX_SAFE_INTEGER, id: "" };
    if (query.after !== undefined) {
      const position = decodeLedgerCursor(query.after);
      if (position === null) throw new Error("listTransactions: malformed cursor");
      before = position;
    }
    // created_at < to  ⇔  (created_at, id) < (to, ""), since every id sorts after "".
    if (query.to !== undefined && (query.to < before.createdAt || (query.to === before.createdAt && before.id !== ""))) {
      before = { createdAt: query.to, id: "" };
    }
    const params: TransactionParams = { organizationId, beforeAt: before.createdAt, beforeId: before.id, from: query.from ?? Number.MIN_SAFE_INTEGER, limit: query.limit + 1 };
    const statements = this.transactionPage();
    const types = query.types ?? [];
    const rows =
      types.length === 0
        ? statements.all.all(params)
        : types.length === 1
          ? statements.oneType.all({ ...params, type: types[0]! })
          : statements.someTypes.all({ ...params, types: JSON.stringify(types) });
    const items = rows.slice(0, query.limit).map(toTransaction);
    const last = items[items.length - 1];
    return { items, nextCursor: rows.length > query.limit && last ? encodeLedgerCursor(last) : null };
  }

  async expireBuckets(now: number): Promise<number> {
    return this.write(() => this.writeOffExpired(null, now));
  }

  /** Prepares a statement on first use, so the statement is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  // --- sessions, sign-in and invitations (issue 3) ---

  async signInSubject(input: Parameters<Store["signInSubject"]>[0]): Promise<SignInOutcome> {
    return this.write((tx): SignInOutcome => {
      const existing = tx.select().from(users).where(eq(users.subject, input.subject)).get();
      if (existing !== undefined) return { outcome: "existing", user: existing };
      if (tx.select({ id: users.id }).from(users).where(eq(users.email, input.email)).get() !== undefined) return { outcome: "email-taken" };

      const invitation = tx.delete(invitations).where(eq(invitations.email, input.email)).returning().get();
      let organizationId: string;
      if (invitation !== undefined) {
        organizationId = invitation.organizationId;
      } else {
        organizationId = newId("org", input.now);
        tx.insert(organizations).values({ id: organizationId, name: input.newOrganizationName, createdAt: input.now }).run();
        if (input.trialCredits > 0) this.insertTrialGrant(tx, organizationId, input.trialCredits, input.now);
      }
      const user = {
        id: newId("usr", input.now),
        email: input.email,
        name: input.name,
        subject: input.subject,
        organizationId,
        role: invitation?.role ?? ("owner" as const),
        createdAt: input.now,
      };
      tx.insert(users).values(user).run();
      return { outcome: invitation !== undefined ? "joined" : "created", user };
    });
  }

  // The same bucket + ledger row as grantCredits, inside the sign-in transaction (SQLite has no nested transactions).
  private insertTrialGrant(tx: DB, organizationId: string, amount: number, now: number): void {
    const bucketId = newId("bkt", now);
    tx.insert(creditBuckets).values({ id: bucketId, organizationId, source: "trial", granted: amount, remaining: amount, expiresAt: null, createdAt: now }).run();
    this.appendLedger({ organizationId, type: "trial", amount, bucketId, description: "Trial credits", createdAt: now });
  }

  async getUserByEmail(email: string): Promise<User | null> {
    return this.db.select().from(users).where(eq(users.email, email)).get() ?? null;
  }

  async insertSession(session: SessionRecord): Promise<void> {
    this.db.insert(sessions).values(session).run();
  }

  async rotateSessionToken(input: Parameters<Store["rotateSessionToken"]>[0]): Promise<SessionRecord | null> {
    const row = this.db
      .update(sessions)
      .set({ tokenHash: input.newTokenHash, expiresAt: input.expiresAt })
      .where(
        and(
          eq(sessions.id, input.id),
          eq(sessions.tokenHash, input.currentTokenHash),
          isNull(sessions.revokedAt),
          gt(sessions.expiresAt, input.now),
          gt(sessions.absoluteExpiresAt, input.now),
        ),
      )
      .returning()
      .get();
    return row ?? null;
  }

  async revokeSession(id: string, now: number): Promise<boolean> {
    const changed = this.db
      .update(sessions)
      .set({ revokedAt: now })
      .where(and(eq(sessions.id, id), isNull(sessions.revokedAt)))
      .returning({ id: sessions.id })
      .all();
    return changed.length === 1;
  }

  async deleteDeadSessions(now: number): Promise<number> {
    return this.db.delete(sessions).where(or(isNotNull(sessions.revokedAt), lte(sessions.expiresAt, now))).returning({ id: sessions.id }).all().length;
  }

  async upsertInvitation(invitation: Invitation): Promise<Invitation> {
    this.db
      .insert(invitations)
      .values(invitation)
      .onConflictDoUpdate({ target: invitations.email, set: { organizationId: invitation.organizationId, role: invitation.role, createdAt: invitation.createdAt } })
      .run();
    return invitation;
  }

  // --- idempotency records (issue 3) ---

  async claimIdempotencyKey(input: Parameters<Store["claimIdempotencyKey"]>[0]): Promise<IdempotencyClaim> {
    return this.write((tx): IdempotencyClaim => {
      const where = and(eq(idempotencyRecords.scope, input.scope), eq(idempotencyRecords.keyHash, input.keyHash));
      const existing = tx.select().from(idempotencyRecords).where(where).get();
      const reusable =
        existing === undefined ||
        existing.expiresAt <= input.now ||
        (existing.status === "in-progress" && existing.createdAt < input.abandonedBefore);
      if (!reusable) return { claimed: false, record: existing };
      const claim = {
        scope: input.scope,
        keyHash: input.keyHash,
        requestHash: input.requestHash,
        status: "in-progress" as const,
        responseStatus: null,
        responseBody: null,
        createdAt: input.now,
        expiresAt: input.expiresAt,
      };
      if (existing === undefined) tx.insert(idempotencyRecords).values(claim).run();
      else tx.update(idempotencyRecords).set(claim).where(where).run();
      return { claimed: true };
    });
  }

  async completeIdempotencyKey(input: Parameters<Store["completeIdempotencyKey"]>[0]): Promise<void> {
    this.completeIdempotencyRecord(input);
  }

  private completeIdempotencyRecord(input: Parameters<Store["completeIdempotencyKey"]>[0]): void {
    this.db
      .update(idempotencyRecords)
      .set({ status: "done", responseStatus: input.responseStatus, responseBody: input.responseBody })
      .where(and(eq(idempotencyRecords.scope, input.scope), eq(idempotencyRecords.keyHash, input.keyHash)))
      .run();
  }

  async releaseIdempotencyKey(scope: string, keyHash: string): Promise<void> {
    this.db
      .delete(idempotencyRecords)
      .where(and(eq(idempotencyRecords.scope, scope), eq(idempotencyRecords.keyHash, keyHash), eq(idempotencyRecords.status, "in-progress")))
      .run();
  }

  async deleteExpiredIdempotencyRecords(now: number): Promise<number> {
    return this.db.delete(idempotencyRecords).where(lte(idempotencyRecords.expiresAt, now)).returning({ scope: idempotencyRecords.scope }).all().length;
  }

  // --- billing ---

  async createOrder(order: NewOrder): Promise<Order> {
    return this.db.insert(orders).values({ ...order, status: "pending" }).returning().get();
  }

  async getOrder(id: string): Promise<Order | null> {
    return this.db.select().from(orders).where(eq(orders.id, id)).get() ?? null;
  }

  async findOrderByProviderRef(providerRef: string): Promise<Order | null> {
    return this.db.select().from(orders).where(eq(orders.providerRef, providerRef)).get() ?? null;
  }

  async listOrders(query: { organizationId?: string; limit: number; after?: string }): Promise<Page<Order>> {
    const rows = this.db
      .select()
      .from(orders)
      .where(and(query.organizationId ? eq(orders.organizationId, query.organizationId) : undefined, query.after ? lt(orders.id, query.after) : undefined))
      .orderBy(desc(orders.id))
      .limit(query.limit + 1)
      .all();
    return page(rows, query.limit);
  }

  /** Inserts the event row inside `tx`; false when it was already there (the event was applied before). */
  private claimEvent(tx: DB, event: ProviderEvent | null, now: number): boolean {
    if (event === null) return true;
    const inserted = tx.insert(providerEvents).values({ id: event.id, type: event.type, receivedAt: now }).onConflictDoNothing().returning({ id: providerEvents.id }).all();
    return inserted.length === 1;
  }

  private insertPayment(tx: DB, organizationId: string, bucket: Bucket, payment: PaymentInput, now: number): void {
    tx.insert(payments)
      .values({ ref: payment.ref, organizationId, bucketId: bucket.id, credits: bucket.granted, amount: payment.amount, currency: payment.currency, createdAt: now })
      .onConflictDoNothing()
      .run();
  }

  /** A paid invoice with the next number. Numbers have no gaps: the sequence is taken inside the write lock. */
  private insertInvoice(tx: DB, organizationId: string, input: InvoiceInput & { orderId: string | null; subscriptionId: string | null }, now: number): InvoiceRecord {
    const sequence = tx.select({ last: sql<number>`coalesce(max(${invoices.sequence}), 0)` }).from(invoices).get()!.last + 1;
    return tx
      .insert(invoices)
      .values({ id: newId("inv", now), organizationId, sequence, number: `INV-${String(sequence).padStart(6, "0")}`, status: "paid", ...input, createdAt: now, paidAt: now })
      .returning(this.invoiceColumns)
      .get();
  }

  // Invariant: an order is completed once. The conditional pending → completed update (and, for a
  // provider event, the event row) commit with the grant, so a second completion writes nothing.
  async completeOrder(input: CompleteOrderInput): Promise<CompleteOrderResult> {
    const { now } = input;
    return this.write((tx): CompleteOrderResult => {
      const unchanged = { applied: false, order: tx.select().from(orders).where(eq(orders.id, input.orderId)).get() ?? null, bucket: null, invoice: null, subscription: null };
      if (!this.claimEvent(tx, input.event, now)) return unchanged;
      const order = tx
        .update(orders)
        .set({ status: "completed", completedAt: now })
        .where(and(eq(orders.id, input.orderId), eq(orders.status, "pending")))
        .returning()
        .get();
      if (order === undefined) return unchanged;
      const bucket = input.grant === null ? null : this.insertGrant(tx, order.organizationId, input.grant, now);
      if (bucket !== null && input.payment !== null) this.insertPayment(tx, order.organizationId, bucket, input.payment, now);
      let subscription: SubscriptionRecord | null = null;
      if (input.subscription !== null) {
        subscription = tx
          .insert(subscriptions)
          .values({
            id: newId("sub", now),
            organizationId: order.organizationId,
            orderId: order.id,
            planId: order.itemId,
            planName: order.itemName,
            creditsPerPeriod: order.credits,
            interval: order.interval ?? "month",
            amount: order.amount,
            currency: order.currency,
            status: "active",
            startedAt: now,
            currentPeriodStart: now,
            currentPeriodEnd: input.subscription.periodEnd,
            createdAt: now,
          })
          .returning()
          .get();
      }
      const invoice =
        input.invoice === null ? null : this.insertInvoice(tx, order.organizationId, { ...input.invoice, orderId: order.id, subscriptionId: subscription?.id ?? null }, now);
      return { applied: true, order, bucket, invoice, subscription };
    });
  }

  // Invariant: the event row and the grant commit together, so a redelivered event grants nothing.
  async applyPaidGrant(input: { event: ProviderEvent; organizationId: string; grant: CreditGrant; payment: PaymentInput; now: number }): Promise<{ applied: boolean; bucket: Bucket | null }> {
    return this.write((tx) => {
      if (!this.claimEvent(tx, input.event, input.now)) return { applied: false, bucket: null };
      const bucket = this.insertGrant(tx, input.organizationId, input.grant, input.now);
      this.insertPayment(tx, input.organizationId, bucket, input.payment, input.now);
      return { applied: true, bucket };
    });
  }

  // Invariant: a refund takes only what its bucket still holds (never below zero), with one `refund`
  // ledger row; the payment's refunded amount only moves forward, so no refund is taken twice.
  async refundPayment(input: { event: ProviderEvent | null; ref: string; refundedAmount: number; description: string; now: number }) {
    return this.write((tx) => {
      const none = { applied: false, clawedBack: 0, organizationId: null };
      const payment = tx.select().from(payments).where(eq(payments.ref, input.ref)).get();
      if (payment === undefined || !this.claimEvent(tx, input.event, input.now)) return none;
      const refundedAmount = Math.min(input.refundedAmount, payment.amount);
      if (refundedAmount <= payment.refundedAmount) return { ...none, organizationId: payment.organizationId };
      // Credits in proportion to the money refunded (all of them for a full refund), in integers.
      const refundedCredits =
        refundedAmount === payment.amount || payment.amount === 0 ? payment.credits : Number((BigInt(payment.credits) * BigInt(refundedAmount)) / BigInt(payment.amount));
      tx.update(payments).set({ refundedAmount, refundedCredits }).where(eq(payments.ref, payment.ref)).run();
      // Credits past their expiry are not the customer's any more: write them off first, as expiry.
      this.writeOffExpired(payment.organizationId, input.now);
      const bucket = tx.select({ remaining: creditBuckets.remaining }).from(creditBuckets).where(eq(creditBuckets.id, payment.bucketId)).get()!;
      // Credits held by requests in flight are about to be spent: only the free part can be clawed back.
      const free = bucket.remaining - (this.holds.get(payment.bucketId) ?? 0);
      const take = Math.min(Math.max(refundedCredits - payment.refundedCredits, 0), free);
      if (take > 0) {
        this.adjustBucket().run({ bucketId: payment.bucketId, delta: -take });
        this.appendLedger({ organizationId: payment.organizationId, type: "refund", amount: -take, bucketId: payment.bucketId, description: input.description, createdAt: input.now });
      }
      return { applied: true, clawedBack: take, organizationId: payment.organizationId };
    });
  }

  async hasPayment(ref: string): Promise<boolean> {
    return this.db.select({ ref: payments.ref }).from(payments).where(eq(payments.ref, ref)).get() !== undefined;
  }

  async recordProviderEvent(event: ProviderEvent, now: number): Promise<boolean> {
    return this.write((tx) => this.claimEvent(tx, event, now));
  }

  private readonly invoiceColumns = {
    id: invoices.id,
    organizationId: invoices.organizationId,
    number: invoices.number,
    status: invoices.status,
    amount: invoices.amount,
    currency: invoices.currency,
    description: invoices.description,
    orderId: invoices.orderId,
    subscriptionId: invoices.subscriptionId,
    periodStart: invoices.periodStart,
    periodEnd: invoices.periodEnd,
    createdAt: invoices.createdAt,
    paidAt: invoices.paidAt,
  };

  async listInvoices(organizationId: string, query: { limit: number; after?: string }): Promise<Page<InvoiceRecord>> {
    const rows = this.db
      .select(this.invoiceColumns)
      .from(invoices)
      .where(and(eq(invoices.organizationId, organizationId), query.after ? lt(invoices.id, query.after) : undefined))
      .orderBy(desc(invoices.id))
      .limit(query.limit + 1)
      .all();
    return page(rows, query.limit);
  }

  async getInvoice(id: string): Promise<InvoiceRecord | null> {
    return this.db.select(this.invoiceColumns).from(invoices).where(eq(invoices.id, id)).get() ?? null;
  }

  async listSubscriptions(organizationId: string): Promise<SubscriptionRecord[]> {
    return this.db.select().from(subscriptions).where(eq(subscriptions.organizationId, organizationId)).orderBy(desc(subscriptions.id)).all();
  }

  async listDueSubscriptions(now: number, limit: number): Promise<SubscriptionRecord[]> {
    return this.db
      .select()
      .from(subscriptions)
      .where(and(eq(subscriptions.status, "active"), lte(subscriptions.currentPeriodEnd, now)))
      .orderBy(asc(subscriptions.currentPeriodEnd))
      .limit(limit)
      .all();
  }

  // Invariant: a period is granted and invoiced once: the conditional move from the period end the
  // caller saw commits with the grant, the invoice and its payment row.
  async renewSubscription(input: RenewSubscriptionInput): Promise<{ applied: boolean; bucket: Bucket | null; invoice: InvoiceRecord | null }> {
    return this.write((tx) => {
      const subscription = tx
        .update(subscriptions)
        .set({ currentPeriodStart: input.periodStart, currentPeriodEnd: input.periodEnd })
        .where(and(eq(subscriptions.id, input.subscriptionId), eq(subscriptions.status, "active"), eq(subscriptions.currentPeriodEnd, input.expectedPeriodEnd)))
        .returning()
        .get();
      if (subscription === undefined) return { applied: false, bucket: null, invoice: null };
      const bucket = this.insertGrant(tx, subscription.organizationId, input.grant, input.now);
      const invoice = this.insertInvoice(tx, subscription.organizationId, { ...input.invoice, orderId: null, subscriptionId: subscription.id }, input.now);
      this.insertPayment(tx, subscription.organizationId, bucket, { ref: invoice.id, amount: invoice.amount, currency: invoice.currency }, input.now);
      return { applied: true, bucket, invoice };
    });
  }

  async cancelSubscription(organizationId: string, subscriptionId: string, now: number): Promise<SubscriptionRecord | null> {
    return (
      this.db
        .update(subscriptions)
        .set({ status: "canceled", canceledAt: now })
        .where(and(eq(subscriptions.id, subscriptionId), eq(subscriptions.organizationId, organizationId), eq(subscriptions.status, "active")))
        .returning()
        .get() ?? null
    );
  }

  async getStripeCustomerId(organizationId: string): Promise<string | null> {
    return this.db.select({ id: organizations.stripeCustomerId }).from(organizations).where(eq(organizations.id, organizationId)).get()?.id ?? null;
  }

  async setStripeCustomerId(organizationId: string, customerId: string): Promise<string> {
    this.db
      .update(organizations)
      .set({ stripeCustomerId: customerId })
      .where(and(eq(organizations.id, organizationId), sql`${organizations.stripeCustomerId} IS NULL`))
      .run();
    const stored = await this.getStripeCustomerId(organizationId);
    if (stored === null) throw new Error(`organization ${organizationId} does not exist`);
    return stored;
  }

  async findOrganizationByStripeCustomer(customerId: string): Promise<Organization | null> {
    return (
      this.db
        .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
        .from(organizations)
        .where(eq(organizations.stripeCustomerId, customerId))
        .get() ?? null
    );
  }
}

// A type alias, not an interface: bun:sqlite wants bindings assignable to a string-indexed record.
type TransactionParams = {
  organizationId: string;
  beforeAt: number;
  beforeId: string;
  from: number;
  limit: number;
};

interface TransactionRow {
  id: string;
  organization_id: string;
  type: TransactionType;
  amount: number;
  balance_after: number;
  bucket_id: string | null;
  key_id: string | null;
  request_id: string | null;
  gtin: string | null;
  description: string;
  created_at: number;
}

function toTransaction(row: TransactionRow): LedgerTransaction {
  return {
    id: row.id,
    organizationId: row.organization_id,
    type: row.type,
    amount: row.amount,
    balanceAfter: row.balance_after,
    bucketId: row.bucket_id,
    keyId: row.key_id,
    requestId: row.request_id,
    gtin: row.gtin,
    description: row.description,
    createdAt: row.created_at,
  };
}
