import { Database } from "bun:sqlite";
import { and, asc, desc, eq, gt, lt, lte, sql } from "drizzle-orm";
import { type BunSQLiteDatabase, drizzle } from "drizzle-orm/bun-sqlite";
import { newId } from "../lib/ids";
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
  KeyCredential,
  LedgerTransaction,
  NewApiKey,
  Organization,
  Page,
  Reservation,
  SessionWithUser,
  Store,
  TransactionQuery,
  TransactionType,
  User,
} from "./store";

const { organizations, users, sessions, apiKeys, products, merchants, offers, creditBuckets, creditTransactions, reservations } = schema;
const { orders, subscriptions, invoices, payments, providerEvents } = schema;

type DB = BunSQLiteDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];



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

type KeyRow = Omit<ApiKeyRecord, "createdBy"> & { createdById: string; createdByName: string; createdByEmail: string | null };

function toKeyRecord(row: KeyRow): ApiKeyRecord {
  const { createdById, createdByName, createdByEmail, ...key } = row;
  return { ...key, createdBy: { id: createdById, name: createdByName, email: createdByEmail } };
}

function spendable(organizationId: string, now: number) {
  return and(
    eq(creditBuckets.organizationId, organizationId),
    gt(creditBuckets.remaining, 0),
    sql`(${creditBuckets.expiresAt} IS NULL OR ${creditBuckets.expiresAt} > ${now})`,
  );
}

// Soonest-expiring first; buckets that never expire last; then oldest first.
const FEFO = [sql`${creditBuckets.expiresAt} IS NULL`, asc(creditBuckets.expiresAt), asc(creditBuckets.id)] as const;

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

  private write<T>(work: (tx: Tx) => T): T {
    return this.db.transaction(work, { behavior: "immediate" });
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
    return this.credentialByHash().get({ hash: keyHash }) ?? null;
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
    this.write((tx) => {
      for (const [id, at] of lastUsed) {
        tx.update(apiKeys)
          .set({ lastUsedAt: sql`max(coalesce(${apiKeys.lastUsedAt}, 0), ${at})` })
          .where(eq(apiKeys.id, id))
          .run();
      }
    });
  }

  async applyFeedRecords(records: FeedRecord[], now: number): Promise<{ products: number; offers: number }> {
    return this.write((tx) => {
      let offerCount = 0;
      for (const record of records) {
        const { gtin, title, brand, imageUrl } = record.product;
        tx.insert(products)
          .values({ gtin, title: title ?? "", brand: brand ?? null, imageUrl: imageUrl ?? null, updatedAt: now })
          .onConflictDoUpdate({
            target: products.gtin,
            set: {
              title: title === undefined ? sql`${products.title}` : title,
              brand: brand === undefined ? sql`${products.brand}` : brand,
              imageUrl: imageUrl === undefined ? sql`${products.imageUrl}` : imageUrl,
              updatedAt: now,
            },
          })
          .run();
        const offer = record.offer;
        if (offer === undefined) continue;
        const { merchantName, ...offerColumns } = offer;
        tx.insert(merchants)
          .values({ id: offer.merchantId, name: merchantName ?? offer.merchantId })
          .onConflictDoUpdate({ target: merchants.id, set: { name: merchantName === undefined ? sql`${merchants.name}` : merchantName } })
          .run();
        tx.insert(offers)
          .values({ gtin, ...offerColumns })
          .onConflictDoUpdate({
            target: [offers.gtin, offers.merchantId],
            set: {
              priceAmount: offer.priceAmount,
              currency: offer.currency,
              shippingAmount: offer.shippingAmount,
              availability: offer.availability,
              condition: offer.condition,
              url: offer.url,
              observedAt: offer.observedAt,
            },
            setWhere: sql`excluded.observed_at >= ${offers.observedAt}`,
          })
          .run();
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
    const product = this.productByGTIN().get({ gtin });
    if (product === undefined) return null;
    return { product, offers: this.offersByGTIN().all({ gtin }) };
  }

  async countProducts(): Promise<number> {
    return this.db.select({ count: sql<number>`count(*)` }).from(products).get()!.count;
  }

  /** Adds `amount` to the organization's running ledger sum and returns the new sum (the row's balanceAfter). */
  private moveLedger(tx: Tx, organizationId: string, amount: number): number {
    const row = tx
      .update(organizations)
      .set({ ledgerBalance: sql`${organizations.ledgerBalance} + ${amount}` })
      .where(eq(organizations.id, organizationId))
      .returning({ ledgerBalance: organizations.ledgerBalance })
      .get();
    if (row === undefined) throw new Error(`organization ${organizationId} does not exist`);
    return row.ledgerBalance;
  }

  /** Inserts a bucket and its ledger row inside `tx`. */
  private insertGrant(tx: Tx, organizationId: string, grant: CreditGrant, now: number): Bucket {
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
    const balanceAfter = this.moveLedger(tx, organizationId, grant.amount);
    tx.insert(creditTransactions)
      .values({ id: newId("txn", now), organizationId, type: grant.type, amount: grant.amount, balanceAfter, bucketId: bucket.id, description: grant.description, createdAt: now })
      .run();
    return bucket;
  }

  // Invariant: a bucket and its ledger row are written together; ledger sum = available + reserved.
  async grantCredits(input: Parameters<Store["grantCredits"]>[0]): Promise<Bucket> {
    const { organizationId, now, ...grant } = input;
    return this.write((tx) => this.insertGrant(tx, organizationId, grant, now));
  }

  /** Writes off the organization's expired buckets inside `tx`; each becomes an `expiry` ledger row. */
  private writeOffExpired(tx: Tx, organizationId: string | null, now: number): number {
    const expired = tx
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
    for (const bucket of expired) {
      tx.update(creditBuckets).set({ remaining: 0 }).where(eq(creditBuckets.id, bucket.id)).run();
      const balanceAfter = this.moveLedger(tx, bucket.organizationId, -bucket.remaining);
      tx.insert(creditTransactions)
        .values({
          id: newId("txn", now),
          organizationId: bucket.organizationId,
          type: "expiry",
          amount: -bucket.remaining,
          balanceAfter,
          bucketId: bucket.id,
          description: "Expired credits written off",
          createdAt: now,
        })
        .run();
    }
    return expired.length;
  }

  private readonly spendableBuckets = this.lazy(() =>
    this.db
      .select({ id: creditBuckets.id, remaining: creditBuckets.remaining, expiresAt: creditBuckets.expiresAt })
      .from(creditBuckets)
      .where(and(eq(creditBuckets.organizationId, sql.placeholder("organizationId")), gt(creditBuckets.remaining, 0)))
      .orderBy(...FEFO)
      .prepare(),
  );

  // Invariant: buckets never go below zero; credits leave buckets only into a reservation row.
  async reserveCredits(input: Parameters<Store["reserveCredits"]>[0]): Promise<Reservation> {
    return this.write((tx) => {
      let buckets = this.spendableBuckets().all({ organizationId: input.organizationId });
      if (buckets.some((bucket) => bucket.expiresAt !== null && bucket.expiresAt <= input.now)) {
        this.writeOffExpired(tx, input.organizationId, input.now);
        buckets = buckets.filter((bucket) => bucket.expiresAt === null || bucket.expiresAt > input.now);
      }
      const available = buckets.reduce((sum, bucket) => sum + bucket.remaining, 0);
      if (available < input.amount) return { ok: false as const, available };
      const allocations: Array<{ bucketId: string; amount: number }> = [];
      let missing = input.amount;
      for (const bucket of buckets) {
        if (missing === 0) break;
        const take = Math.min(bucket.remaining, missing);
        tx.update(creditBuckets)
          .set({ remaining: sql`${creditBuckets.remaining} - ${take}` })
          .where(eq(creditBuckets.id, bucket.id))
          .run();
        allocations.push({ bucketId: bucket.id, amount: take });
        missing -= take;
      }
      const reservationId = newId("res", input.now);
      tx.insert(reservations)
        .values({ id: reservationId, organizationId: input.organizationId, amount: input.amount, allocations, keyId: input.keyId, requestId: input.requestId, createdAt: input.now })
        .run();
      return { ok: true as const, reservationId };
    });
  }

  // Invariant: the usage row and the reservation's removal commit together, so a request is billed once.
  async commitReservation(reservationId: string, usage: { gtin: string | null; description: string; now: number }): Promise<boolean> {
    return this.write((tx) => {
      const reservation = tx.delete(reservations).where(eq(reservations.id, reservationId)).returning().get();
      if (reservation === undefined) return false;
      const balanceAfter = this.moveLedger(tx, reservation.organizationId, -reservation.amount);
      tx.insert(creditTransactions)
        .values({
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
        })
        .run();
      return true;
    });
  }

  private releaseWithin(tx: Tx, reservationId: string): boolean {
    const reservation = tx.delete(reservations).where(eq(reservations.id, reservationId)).returning().get();
    if (reservation === undefined) return false;
    for (const allocation of reservation.allocations) {
      tx.update(creditBuckets)
        .set({ remaining: sql`${creditBuckets.remaining} + ${allocation.amount}` })
        .where(eq(creditBuckets.id, allocation.bucketId))
        .run();
    }
    return true;
  }

  async releaseReservation(reservationId: string): Promise<boolean> {
    return this.write((tx) => this.releaseWithin(tx, reservationId));
  }

  async releaseStaleReservations(olderThan: number): Promise<number> {
    return this.write((tx) => {
      const stale = tx.select({ id: reservations.id }).from(reservations).where(lt(reservations.createdAt, olderThan)).all();
      return stale.filter((row) => this.releaseWithin(tx, row.id)).length;
    });
  }

  private readonly availableSum = this.lazy(() =>
    this.db
      .select({ available: sql<number>`coalesce(sum(${creditBuckets.remaining}), 0)` })
      .from(creditBuckets)
      .where(
        and(
          eq(creditBuckets.organizationId, sql.placeholder("organizationId")),
          gt(creditBuckets.remaining, 0),
          sql`(${creditBuckets.expiresAt} IS NULL OR ${creditBuckets.expiresAt} > ${sql.placeholder("now")})`,
        ),
      )
      .prepare(),
  );

  async availableCredits(organizationId: string, now: number): Promise<number> {
    return this.availableSum().get({ organizationId, now })!.available;
  }

  async getBalance(organizationId: string, now: number): Promise<Balance> {
    return this.write((tx) => {
      this.writeOffExpired(tx, organizationId, now);
      // Spent, written-off and clawed-back buckets are history: the ledger tells it, the balance does not list them.
      const buckets = tx
        .select()
        .from(creditBuckets)
        .where(and(eq(creditBuckets.organizationId, organizationId), gt(creditBuckets.remaining, 0)))
        .orderBy(...FEFO)
        .all();
      const reserved = tx
        .select({ reserved: sql<number>`coalesce(sum(${reservations.amount}), 0)` })
        .from(reservations)
        .where(eq(reservations.organizationId, organizationId))
        .get()!.reserved;
      const available = tx
        .select({ available: sql<number>`coalesce(sum(${creditBuckets.remaining}), 0)` })
        .from(creditBuckets)
        .where(spendable(organizationId, now))
        .get()!.available;
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
    return this.write((tx) => this.writeOffExpired(tx, null, now));
  }

  /** Prepares a statement on first use, so the statement is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
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
  private claimEvent(tx: Tx, event: ProviderEvent | null, now: number): boolean {
    if (event === null) return true;
    const inserted = tx.insert(providerEvents).values({ id: event.id, type: event.type, receivedAt: now }).onConflictDoNothing().returning({ id: providerEvents.id }).all();
    return inserted.length === 1;
  }

  private insertPayment(tx: Tx, organizationId: string, bucket: Bucket, payment: PaymentInput, now: number): void {
    tx.insert(payments)
      .values({ ref: payment.ref, organizationId, bucketId: bucket.id, credits: bucket.granted, amount: payment.amount, currency: payment.currency, createdAt: now })
      .onConflictDoNothing()
      .run();
  }

  /** A paid invoice with the next number. Numbers have no gaps: the sequence is taken inside the write lock. */
  private insertInvoice(tx: Tx, organizationId: string, input: InvoiceInput & { orderId: string | null; subscriptionId: string | null }, now: number): InvoiceRecord {
    const sequence = tx.select({ last: sql<number>`coalesce(max(${invoices.sequence}), 0)` }).from(invoices).get()!.last + 1;
    return tx
      .insert(invoices)
      .values({ id: newId("inv", now), organizationId, sequence, number: `INV-${String(sequence).padStart(6, "0")}`, status: "paid", ...input, createdAt: now, paidAt: now })
      .returning({
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
      })
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
      this.writeOffExpired(tx, payment.organizationId, input.now);
      const bucket = tx.select({ remaining: creditBuckets.remaining }).from(creditBuckets).where(eq(creditBuckets.id, payment.bucketId)).get()!;
      const take = Math.min(Math.max(refundedCredits - payment.refundedCredits, 0), bucket.remaining);
      if (take > 0) {
        tx.update(creditBuckets)
          .set({ remaining: sql`${creditBuckets.remaining} - ${take}` })
          .where(eq(creditBuckets.id, payment.bucketId))
          .run();
        const balanceAfter = this.moveLedger(tx, payment.organizationId, -take);
        tx.insert(creditTransactions)
          .values({ id: newId("txn", input.now), organizationId: payment.organizationId, type: "refund", amount: -take, balanceAfter, bucketId: payment.bucketId, description: input.description, createdAt: input.now })
          .run();
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

/** Cuts a `limit + 1` query result into a page; the cursor is the last returned id. */
export function page<T extends { id: string }>(rows: T[], limit: number): Page<T> {
  const items = rows.slice(0, limit);
  return { items, nextCursor: rows.length > limit ? items[items.length - 1]!.id : null };
}
