import { and, asc, desc, eq, gt, gte, inArray, isNull, lt, lte, or, sql } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import type postgres from "postgres";
import { newId } from "../lib/ids";
import { applyPostgresMigrations } from "./migrate";
import { openPostgresClient } from "./postgres-client";
import * as schema from "./schema/postgres";
import { SYSTEM_USER_ID } from "./store";
import type {
  ApiKeyRecord,
  Balance,
  Bucket,
  FeedRecord,
  KeyCredential,
  LedgerTransaction,
  NewApiKey,
  OfferRecord,
  Organization,
  Page,
  ProductRecord,
  Reservation,
  SessionWithUser,
  Store,
  TransactionQuery,
  User,
} from "./store";
import { page } from "./sqlite-store";

const { organizations, users, sessions, apiKeys, products, merchants, offers, creditBuckets, creditTransactions, reservations } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

// The PostgreSQL store, for several `serve` instances on one database. Unlike the SQLite store it
// keeps nothing in memory between calls: every instance sees every other one's writes on its next
// query (a key revoked through one is refused by all), and every rule that must hold across
// instances is a row lock or a conditional write inside one transaction, never a read followed by
// a write in the app.

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

// Soonest-expiring first; buckets that never expire last; then oldest first (reserveCredits
// spells the same order in SQL, and locks buckets in it).
const FEFO = [sql`${creditBuckets.expiresAt} ASC NULLS LAST`, asc(creditBuckets.id)] as const;

/** Rows per multi-row INSERT: well under PostgreSQL's 65 535 parameters per statement. */
const INSERT_CHUNK = 1000;
/** A transaction that lost a deadlock or a serialization check is run again, this many times at most. */
const TRANSACTION_ATTEMPTS = 3;

export class PostgresStore implements Store {
  readonly dialect = "postgres";
  private readonly db: DB;

  constructor(private readonly client: postgres.Sql) {
    this.db = drizzle(client, { schema });
  }

  static async open(databaseUrl: string): Promise<PostgresStore> {
    await applyPostgresMigrations(databaseUrl);
    return new PostgresStore(openPostgresClient(databaseUrl));
  }

  /** The raw connection pool, for `migrate --to` and for tests that inspect state. */
  get connection(): postgres.Sql {
    return this.client;
  }

  private closed = false;

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.client.end({ timeout: 5 });
  }

  async isReachable(): Promise<boolean> {
    try {
      await this.client`SELECT 1`;
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Runs `work` in one transaction, again from the start when PostgreSQL aborted it for a deadlock
   * or a serialization failure (both mean "another transaction won; retry"), so callers never see them.
   */
  private async transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T> {
    return retrying(() => this.db.transaction(work, config));
  }

  async createOrganization(input: { name: string; now: number }): Promise<Organization> {
    const organization = { id: newId("org", input.now), name: input.name, createdAt: input.now };
    await this.db.insert(organizations).values(organization);
    return organization;
  }

  async getOrganization(id: string): Promise<Organization | null> {
    const [row] = await this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .where(eq(organizations.id, id));
    return row ?? null;
  }

  async listOrganizations(): Promise<Organization[]> {
    return this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .orderBy(desc(organizations.id));
  }

  async ensureSystemUser(now: number): Promise<User> {
    await this.db
      .insert(users)
      .values({ id: SYSTEM_USER_ID, email: null, name: "system", subject: null, organizationId: null, role: "member", createdAt: now })
      .onConflictDoNothing();
    const [user] = await this.db.select().from(users).where(eq(users.id, SYSTEM_USER_ID));
    return user!;
  }

  async findSessionWithUser(sessionId: string): Promise<SessionWithUser | null> {
    const [row] = await this.db.select().from(sessions).innerJoin(users, eq(users.id, sessions.userId)).where(eq(sessions.id, sessionId));
    return row ? { session: row.sessions, user: row.users } : null;
  }

  private keyQuery() {
    return this.db.select(keyRecordColumns).from(apiKeys).innerJoin(users, eq(users.id, apiKeys.createdBy));
  }

  async insertApiKey(key: NewApiKey): Promise<ApiKeyRecord> {
    await this.db.insert(apiKeys).values({ ...key, status: "ACTIVE" });
    return (await this.getApiKeyById(key.id))!;
  }

  private readonly credentialByHash = this.lazy(() =>
    this.db
      .select({ id: apiKeys.id, organizationId: apiKeys.organizationId, keyPrefix: apiKeys.keyPrefix, keyHash: apiKeys.keyHash, status: apiKeys.status })
      .from(apiKeys)
      .where(eq(apiKeys.keyHash, sql.placeholder("hash")))
      .prepare("key_credential_by_hash"),
  );

  /** Read on every data request, never cached: a key revoked or rotated by any instance is refused at once. */
  async findKeyCredential(keyHash: string): Promise<KeyCredential | null> {
    const [credential] = await this.credentialByHash().execute({ hash: keyHash });
    return credential ?? null;
  }

  async getApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null> {
    const [row] = await this.keyQuery().where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId)));
    return row ? toKeyRecord(row) : null;
  }

  async getApiKeyById(id: string): Promise<ApiKeyRecord | null> {
    const [row] = await this.keyQuery().where(eq(apiKeys.id, id));
    return row ? toKeyRecord(row) : null;
  }

  async listApiKeys(organizationId: string, query: { limit: number; after?: string }): Promise<Page<ApiKeyRecord>> {
    const rows = await this.keyQuery()
      .where(and(eq(apiKeys.organizationId, organizationId), query.after ? lt(apiKeys.id, query.after) : undefined))
      .orderBy(desc(apiKeys.id))
      .limit(query.limit + 1);
    return page(rows.map(toKeyRecord), query.limit);
  }

  async revokeApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null> {
    const changed = await this.db
      .update(apiKeys)
      .set({ status: "REVOKED" })
      .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
      .returning({ id: apiKeys.id });
    return changed.length === 1 ? this.getApiKey(organizationId, id) : null;
  }

  // Invariant: of two instances rotating one key at once, only the one whose conditional update
  // still finds it ACTIVE inserts a replacement.
  async rotateApiKey(organizationId: string, id: string, replacement: NewApiKey): Promise<ApiKeyRecord | null> {
    const rotated = await this.transaction(async (tx) => {
      const changed = await tx
        .update(apiKeys)
        .set({ status: "ROTATED", replacedBy: replacement.id })
        .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
        .returning({ id: apiKeys.id });
      if (changed.length !== 1) return false;
      await tx.insert(apiKeys).values({ ...replacement, status: "ACTIVE" });
      return true;
    });
    return rotated ? this.getApiKeyById(replacement.id) : null;
  }

  /**
   * Each instance writes its own view of lastUsedAt; keeping the greatest value makes them converge
   * whatever order the flushes land in. One autocommit update per key: nothing to deadlock on.
   */
  async touchApiKeys(lastUsed: Map<string, number>): Promise<void> {
    for (const [id, at] of lastUsed) {
      await this.db
        .update(apiKeys)
        .set({ lastUsedAt: sql`greatest(coalesce(${apiKeys.lastUsedAt}, 0), ${at})` })
        .where(eq(apiKeys.id, id));
    }
  }

  /**
   * Multi-row upserts instead of one statement per record. PostgreSQL refuses to update one row twice
   * in a statement, so the batch is first merged per key with the same result as applying the records
   * in order: a product keeps the last given value of each field, an offer the newest observation.
   * Rows go in key order so that concurrent imports lock them in the same order.
   */
  async applyFeedRecords(records: FeedRecord[], now: number): Promise<{ products: number; offers: number }> {
    const merged = mergeFeedRecords(records);
    await this.transaction(async (tx) => {
      const productRow = (p: FeedRecord["product"]) => ({ gtin: p.gtin, title: p.title ?? "", brand: p.brand ?? null, imageUrl: p.imageUrl ?? null, updatedAt: now });
      const keepOrReplace = {
        brand: sql`coalesce(excluded.brand, ${products.brand})`,
        imageUrl: sql`coalesce(excluded.image_url, ${products.imageUrl})`,
        updatedAt: sql`excluded.updated_at`,
      };
      for (const chunk of chunks(merged.products.filter((p) => p.title !== undefined))) {
        await tx
          .insert(products)
          .values(chunk.map(productRow))
          .onConflictDoUpdate({ target: products.gtin, set: { title: sql`excluded.title`, ...keepOrReplace } });
      }
      for (const chunk of chunks(merged.products.filter((p) => p.title === undefined))) {
        await tx.insert(products).values(chunk.map(productRow)).onConflictDoUpdate({ target: products.gtin, set: keepOrReplace });
      }
      for (const chunk of chunks(merged.merchants.filter((m) => m.name !== undefined))) {
        await tx
          .insert(merchants)
          .values(chunk.map((m) => ({ id: m.id, name: m.name! })))
          .onConflictDoUpdate({ target: merchants.id, set: { name: sql`excluded.name` } });
      }
      for (const chunk of chunks(merged.merchants.filter((m) => m.name === undefined))) {
        await tx.insert(merchants).values(chunk.map((m) => ({ id: m.id, name: m.id }))).onConflictDoNothing();
      }
      for (const chunk of chunks(merged.offers)) {
        await tx
          .insert(offers)
          .values(chunk)
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
          });
      }
    });
    return { products: records.length, offers: records.filter((record) => record.offer !== undefined).length };
  }

  // One round trip: the product and its offers through a left join (a product may have none).
  private readonly productWithOffers = this.lazy(() =>
    this.db
      .select({
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
      })
      .from(products)
      .leftJoin(offers, eq(offers.gtin, products.gtin))
      .leftJoin(merchants, eq(merchants.id, offers.merchantId))
      .where(eq(products.gtin, sql.placeholder("gtin")))
      .orderBy(asc(offers.merchantId))
      .prepare("product_with_offers"),
  );

  async findProductWithOffers(gtin: string): Promise<{ product: ProductRecord; offers: OfferRecord[] } | null> {
    const rows = await this.productWithOffers().execute({ gtin });
    const first = rows[0];
    if (first === undefined) return null;
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

  async countProducts(): Promise<number> {
    const [row] = await this.db.select({ count: sql<number>`count(*)`.mapWith(Number) }).from(products);
    return row!.count;
  }

  /** Appends a ledger row and moves the running sum; the only way credits enter or leave the ledger. */
  private async appendLedger(
    tx: Tx,
    row: Omit<LedgerTransaction, "id" | "balanceAfter" | "bucketId" | "keyId" | "requestId" | "gtin"> & Partial<Pick<LedgerTransaction, "bucketId" | "keyId" | "requestId" | "gtin">>,
  ): Promise<void> {
    // The organization's row lock, held to the end of the transaction, puts its ledger rows in one
    // order across instances: each balanceAfter is the sum after exactly the rows committed before it.
    const [moved] = await tx
      .update(organizations)
      .set({ ledgerBalance: sql`${organizations.ledgerBalance} + ${row.amount}` })
      .where(eq(organizations.id, row.organizationId))
      .returning({ ledgerBalance: organizations.ledgerBalance });
    if (moved === undefined) throw new Error(`organization ${row.organizationId} does not exist`);
    await tx.insert(creditTransactions).values({
      id: newId("txn", row.createdAt),
      bucketId: null,
      keyId: null,
      requestId: null,
      gtin: null,
      ...row,
      balanceAfter: moved.ledgerBalance,
    });
  }

  // Invariant: a bucket and its ledger row are written together; ledger sum = available + reserved.
  async grantCredits(input: Parameters<Store["grantCredits"]>[0]): Promise<Bucket> {
    const bucket: Bucket = {
      id: newId("bkt", input.now),
      organizationId: input.organizationId,
      source: input.source,
      granted: input.amount,
      remaining: input.amount,
      expiresAt: input.expiresAt,
      createdAt: input.now,
    };
    await this.transaction(async (tx) => {
      await tx.insert(creditBuckets).values(bucket);
      await this.appendLedger(tx, { organizationId: input.organizationId, type: input.type, amount: input.amount, bucketId: bucket.id, description: input.description, createdAt: input.now });
    });
    return bucket;
  }

  /**
   * Writes off the expired buckets (of one organization, or all) with an `expiry` ledger row each,
   * one bucket per transaction. The bucket is locked and read again inside it, so instances
   * sweeping at the same time write each bucket off once. Credits reserved by a request in flight
   * are out of their bucket already; if the request releases them, a later sweep writes them off.
   */
  private async writeOffExpired(organizationId: string | null, now: number): Promise<number> {
    const expired = await this.db
      .select({ id: creditBuckets.id })
      .from(creditBuckets)
      .where(
        and(
          organizationId === null ? undefined : eq(creditBuckets.organizationId, organizationId),
          gt(creditBuckets.remaining, 0),
          lte(creditBuckets.expiresAt, now),
        ),
      );
    let written = 0;
    for (const { id } of expired) {
      const wroteOff = await this.transaction(async (tx) => {
        const [bucket] = await tx
          .select({ organizationId: creditBuckets.organizationId, remaining: creditBuckets.remaining })
          .from(creditBuckets)
          .where(and(eq(creditBuckets.id, id), gt(creditBuckets.remaining, 0)))
          .for("update");
        if (bucket === undefined) return false;
        await tx.update(creditBuckets).set({ remaining: 0 }).where(eq(creditBuckets.id, id));
        await this.appendLedger(tx, { organizationId: bucket.organizationId, type: "expiry", amount: -bucket.remaining, bucketId: id, description: "Expired credits written off", createdAt: now });
        return true;
      });
      if (wroteOff) written++;
    }
    return written;
  }

  // The three statements of every billed request (reserve, then commit or release) are each one
  // statement, so an organization's rows stay locked only while PostgreSQL runs it; its requests
  // queue on those locks, whichever instance they reach. They commit without waiting for the WAL
  // flush (synchronous_commit off, like the SQLite store's synchronous=NORMAL): a crash of the
  // database server may forget the last fraction of a second of them, and what it keeps is still
  // consistent (a debit, its usage row and the ledger sum stand or fall together); at worst a few
  // look-ups go unbilled and the stale sweep gives back reservations it forgot the end of.

  // Reservations are rows, so credits in flight survive the instance that took them and any
  // instance can commit, release or sweep them. Invariant: the spendable buckets are locked in FEFO
  // order before they are read for the allocation, and the debit and the reservation row commit
  // with the lock, so concurrent requests on any instance never take the same credit twice.
  async reserveCredits(input: Parameters<Store["reserveCredits"]>[0]): Promise<Reservation> {
    const reservationId = newId("res", input.now);
    const [row] = await retrying(
      () => this.client<Array<{ available: string; reservation_id: string | null }>>`
        WITH locked AS (
          SELECT id, remaining, expires_at FROM credit_buckets
          WHERE organization_id = ${input.organizationId} AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${input.now})
          ORDER BY expires_at ASC NULLS LAST, id
          FOR UPDATE
        ),
        total AS (SELECT coalesce(sum(remaining), 0)::bigint AS available FROM locked),
        fefo AS (
          SELECT id, remaining, row_number() OVER w AS position, (sum(remaining) OVER w - remaining)::bigint AS before
          FROM locked WINDOW w AS (ORDER BY expires_at ASC NULLS LAST, id)
        ),
        taken AS (
          SELECT id, position, least(remaining, ${input.amount}::bigint - before) AS amount
          FROM fefo, total WHERE total.available >= ${input.amount} AND before < ${input.amount}
        ),
        debited AS (
          UPDATE credit_buckets SET remaining = credit_buckets.remaining - taken.amount FROM taken WHERE credit_buckets.id = taken.id
        ),
        reserved AS (
          INSERT INTO reservations (id, organization_id, amount, allocations, key_id, request_id, created_at)
          SELECT ${reservationId}, ${input.organizationId}, ${input.amount},
                 jsonb_agg(jsonb_build_object('bucketId', id, 'amount', amount) ORDER BY position),
                 ${input.keyId}, ${input.requestId}, ${input.now}
          FROM taken HAVING count(*) > 0
          RETURNING id
        )
        SELECT total.available, (SELECT id FROM reserved) AS reservation_id, set_config('synchronous_commit', 'off', true) AS async_commit
        FROM total`,
    );
    if (row!.reservation_id === null) return { ok: false, available: Number(row!.available) };
    return { ok: true, reservationId };
  }

  // Invariant: deleting the reservation row is what claims it, so of a commit, a release and a
  // sweep racing on one reservation exactly one wins. The usage row and the running ledger sum are
  // written by the same statement; the organization's row lock orders balanceAfter across instances.
  async commitReservation(reservationId: string, usage: { gtin: string | null; description: string; now: number }): Promise<boolean> {
    const committed = await retrying(
      () => this.client`
        WITH claimed AS (
          DELETE FROM reservations WHERE id = ${reservationId}
          RETURNING organization_id, amount, allocations, key_id, request_id
        ),
        moved AS (
          UPDATE organizations SET ledger_balance = organizations.ledger_balance - claimed.amount
          FROM claimed WHERE organizations.id = claimed.organization_id
          RETURNING organizations.ledger_balance
        )
        INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
        SELECT ${newId("txn", usage.now)}, claimed.organization_id, 'usage', -claimed.amount, moved.ledger_balance,
               CASE WHEN jsonb_array_length(claimed.allocations) = 1 THEN claimed.allocations->0->>'bucketId' END,
               claimed.key_id, claimed.request_id, ${usage.gtin}, ${usage.description}, ${usage.now}
        FROM claimed, moved, (SELECT set_config('synchronous_commit', 'off', true) AS async_commit) AS commit_mode
        RETURNING id`,
    );
    return committed.length === 1;
  }

  async releaseReservation(reservationId: string): Promise<boolean> {
    const [row] = await retrying(
      () => this.client<Array<{ released: number }>>`
        WITH claimed AS (DELETE FROM reservations WHERE id = ${reservationId} RETURNING allocations),
        given AS (
          SELECT allocation->>'bucketId' AS bucket_id, (allocation->>'amount')::bigint AS amount
          FROM claimed, jsonb_array_elements(claimed.allocations) AS allocation
        ),
        restored AS (
          UPDATE credit_buckets SET remaining = credit_buckets.remaining + given.amount FROM given WHERE credit_buckets.id = given.bucket_id
        )
        SELECT count(*)::int AS released, set_config('synchronous_commit', 'off', true) AS async_commit FROM claimed`,
    );
    return row!.released === 1;
  }

  /** Gives back the credits of reservations left behind by an instance that died mid-request. */
  async releaseStaleReservations(olderThan: number): Promise<number> {
    const stale = await this.db.select({ id: reservations.id }).from(reservations).where(lt(reservations.createdAt, olderThan)).orderBy(asc(reservations.createdAt));
    let released = 0;
    for (const { id } of stale) if (await this.releaseReservation(id)) released++;
    return released;
  }

  private readonly availableStatement = this.lazy(() =>
    this.db
      .select({ available: sql<number>`coalesce(sum(${creditBuckets.remaining}), 0)`.mapWith(Number) })
      .from(creditBuckets)
      .where(
        and(
          eq(creditBuckets.organizationId, sql.placeholder("organizationId")),
          gt(creditBuckets.remaining, 0),
          or(isNull(creditBuckets.expiresAt), gt(creditBuckets.expiresAt, sql.placeholder("now"))),
        ),
      )
      .prepare("available_credits"),
  );

  async availableCredits(organizationId: string, now: number): Promise<number> {
    const [row] = await this.availableStatement().execute({ organizationId, now });
    return row!.available;
  }

  async getBalance(organizationId: string, now: number): Promise<Balance> {
    await this.writeOffExpired(organizationId, now);
    // One snapshot for buckets and reservations, so a request committing meanwhile is counted once.
    return this.transaction(
      async (tx) => {
        const buckets = await tx.select().from(creditBuckets).where(eq(creditBuckets.organizationId, organizationId)).orderBy(...FEFO);
        const [held] = await tx
          .select({ reserved: sql<number>`coalesce(sum(${reservations.amount}), 0)`.mapWith(Number) })
          .from(reservations)
          .where(eq(reservations.organizationId, organizationId));
        const available = buckets.reduce((sum, b) => sum + (b.expiresAt === null || b.expiresAt > now ? b.remaining : 0), 0);
        return { available, reserved: held!.reserved, buckets };
      },
      { isolationLevel: "repeatable read", accessMode: "read only" },
    );
  }

  async listTransactions(organizationId: string, query: TransactionQuery): Promise<Page<LedgerTransaction>> {
    const rows = await this.db
      .select()
      .from(creditTransactions)
      .where(
        and(
          eq(creditTransactions.organizationId, organizationId),
          query.after ? lt(creditTransactions.id, query.after) : undefined,
          query.types?.length ? inArray(creditTransactions.type, query.types) : undefined,
          query.from === undefined ? undefined : gte(creditTransactions.createdAt, query.from),
          query.to === undefined ? undefined : lt(creditTransactions.createdAt, query.to),
        ),
      )
      .orderBy(desc(creditTransactions.id))
      .limit(query.limit + 1);
    return page(rows, query.limit);
  }

  async expireBuckets(now: number): Promise<number> {
    return this.writeOffExpired(null, now);
  }

  /** Builds a statement on first use, so it is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }
}

/**
 * Runs a transaction (or a single-statement one) again from the start when PostgreSQL aborted it
 * for a deadlock or a serialization failure: both mean "another transaction won; retry".
 */
async function retrying<T>(run: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      if (attempt >= TRANSACTION_ATTEMPTS || !isRetryable(error)) throw error;
    }
  }
}

/** Deadlock (40P01) and serialization failure (40001). */
function isRetryable(error: unknown): boolean {
  const code = (error as { cause?: { code?: string }; code?: string } | null)?.cause?.code ?? (error as { code?: string } | null)?.code;
  return code === "40P01" || code === "40001";
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
  offers: MergedOffer[];
} {
  const productsByGTIN = new Map<string, FeedRecord["product"]>();
  const merchantsById = new Map<string, { id: string; name?: string }>();
  const offersByKey = new Map<string, MergedOffer>();
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
    const previous = offersByKey.get(key);
    // Equal observations: the later record wins, as the upsert's `>=` would make it.
    if (previous !== undefined && previous.observedAt > offer.observedAt) continue;
    const { merchantName: _name, ...fields } = offer;
    offersByKey.set(key, { gtin: product.gtin, ...fields });
  }
  const byKey = <T>(key: (row: T) => string) => (a: T, b: T) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0);
  return {
    products: [...productsByGTIN.values()].sort(byKey((p) => p.gtin)),
    merchants: [...merchantsById.values()].sort(byKey((m) => m.id)),
    offers: [...offersByKey.values()].sort(byKey((o) => `${o.gtin}\u0000${o.merchantId}`)),
  };
}
