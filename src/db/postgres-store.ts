import { and, asc, desc, eq, gt, gte, inArray, isNotNull, isNull, lt, lte, or, sql } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import type postgres from "postgres";
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
import { applyPostgresMigrations } from "./migrate";
import { openPostgresClient } from "./postgres-client";
import * as schema from "./schema/postgres";
import { STALE_RESERVATION_MS, SYSTEM_USER_ID } from "./store";
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
  UsageRecord,
  User,
} from "./store";

const { organizations, users, sessions, apiKeys, products, merchants, offers, creditBuckets, creditTransactions, reservations } = schema;
const { invitations, idempotencyRecords } = schema;
const { orders, subscriptions, invoices, payments, providerEvents } = schema;

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


// Soonest-expiring first; buckets that never expire last; then oldest first (reserveCredits
// spells the same order in SQL, and locks buckets in it).
const FEFO = [sql`${creditBuckets.expiresAt} ASC NULLS LAST`, asc(creditBuckets.id)] as const;

/** Rows per multi-row INSERT: well under PostgreSQL's 65 535 parameters per statement. */
const INSERT_CHUNK = 1000;
/** A transaction that lost a deadlock or a serialization check is run again, this many times at most. */
const TRANSACTION_ATTEMPTS = 3;
/** First key of the invoice-numbering advisory lock ("invs"); the second is the schema. */
const INVOICE_LOCK_NAMESPACE = 0x696e7673;
/** Debits per group-commit statement at most; more wait for the next one. */
const COMMIT_BATCH_LIMIT = 500;

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
    // Debits queued for the group commit are written before the pool closes.
    await this.flushing;
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

  /** Inserts a bucket and its ledger row inside `tx`. */
  private async insertGrant(tx: Tx, organizationId: string, grant: CreditGrant, now: number): Promise<Bucket> {
    const bucket: Bucket = {
      id: newId("bkt", now),
      organizationId,
      source: grant.source,
      granted: grant.amount,
      remaining: grant.amount,
      expiresAt: grant.expiresAt,
      createdAt: now,
    };
    await tx.insert(creditBuckets).values(bucket);
    await this.appendLedger(tx, { organizationId, type: grant.type, amount: grant.amount, bucketId: bucket.id, description: grant.description, createdAt: now });
    return bucket;
  }

  // Invariant: a bucket and its ledger row are written together; ledger sum = available + reserved.
  async grantCredits(input: Parameters<Store["grantCredits"]>[0]): Promise<Bucket> {
    const { organizationId, now, ...grant } = input;
    return this.transaction((tx) => this.insertGrant(tx, organizationId, grant, now));
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
    for (const { id } of expired) if (await this.transaction((tx) => this.writeOffBucket(tx, id, now))) written++;
    return written;
  }

  /** Locks an expired bucket, reads it again and writes off what it still holds, inside `tx`; false when nothing was left. */
  private async writeOffBucket(tx: Tx, id: string, now: number): Promise<boolean> {
    const [bucket] = await tx
      .select({ organizationId: creditBuckets.organizationId, remaining: creditBuckets.remaining })
      .from(creditBuckets)
      .where(and(eq(creditBuckets.id, id), gt(creditBuckets.remaining, 0), lte(creditBuckets.expiresAt, now)))
      .for("update");
    if (bucket === undefined) return false;
    await tx.update(creditBuckets).set({ remaining: 0 }).where(eq(creditBuckets.id, id));
    await this.appendLedger(tx, { organizationId: bucket.organizationId, type: "expiry", amount: -bucket.remaining, bucketId: id, description: "Expired credits written off", createdAt: now });
    return true;
  }

  // The three steps of every billed request (reserve, then commit or release) are one statement
  // each, so an organization's rows stay locked only while PostgreSQL runs it; its requests queue on
  // those locks, whichever instance they reach. A crash never bills twice or loses a debit: the
  // commit (debit, usage row, ledger sum, Idempotency-Key answer) waits for the WAL flush before the
  // request is answered, and group commit shares that flush among the requests that commit
  // together. Reserve and release commit without waiting (synchronous_commit off): a lost reserve
  // was never answered (and the WAL is sequential, so any later synchronous commit flushes it too),
  // and a lost release leaves a reservation row that the stale sweep gives back.

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

  private pendingCommits: Array<{ reservationId: string; usage: UsageRecord; resolve: (committed: boolean) => void; reject: (error: unknown) => void }> = [];
  /** The commit loop while it runs: at most one batch of this instance is in flight at a time. */
  private flushing: Promise<void> | null = null;

  /**
   * Group commit: a commit that arrives while none is in flight is written at once; the commits that
   * arrive while one is in flight wait for it and then go together, as one transaction. Each caller
   * is answered only after the transaction that holds its debit has committed (and its WAL is flushed).
   */
  commitReservation(reservationId: string, usage: UsageRecord): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.pendingCommits.push({ reservationId, usage, resolve, reject });
      this.flushing ??= this.flushCommits();
    });
  }

  private async flushCommits(): Promise<void> {
    while (this.pendingCommits.length > 0) {
      const queued = this.pendingCommits.splice(0, COMMIT_BATCH_LIMIT);
      // One reservation committed twice at once is debited once: the later calls answer false.
      const firsts = new Map(queued.map((item) => [item.reservationId, item] as const).reverse());
      const batch = queued.filter((item) => firsts.get(item.reservationId) === item);
      for (const item of queued) if (firsts.get(item.reservationId) !== item) item.resolve(false);
      try {
        const committed = await retrying(() => this.debitBatch(batch));
        for (const item of batch) item.resolve(committed.has(item.reservationId));
      } catch {
        // One bad debit must not fail its neighbours: retry each alone and fail only the culprit.
        for (const item of batch) {
          try {
            item.resolve((await retrying(() => this.debitBatch([item]))).has(item.reservationId));
          } catch (error) {
            item.reject(error);
          }
        }
      }
    }
    // Cleared in the same turn as the loop's last look at the queue (every failure is caught above),
    // so a commit queued by a caller answered just now starts a new loop rather than being left behind.
    this.flushing = null;
  }

  // Invariant: deleting the reservation row is what claims it, so of a commit, a release and a
  // sweep racing on one reservation exactly one wins. One statement writes a whole batch: the usage
  // rows, the running ledger sums (each organization's row moved once, under its lock, which orders
  // balanceAfter across instances) and the Idempotency-Key answers, so they commit together. It
  // commits synchronously (the WAL is flushed before anyone is answered): a debit once answered
  // survives a crash of the database server.
  private async debitBatch(items: Array<{ reservationId: string; usage: UsageRecord }>): Promise<Set<string>> {
    const rows = items.map(({ reservationId, usage }, seq) => ({
      seq,
      reservation_id: reservationId,
      transaction_id: newId("txn", usage.now),
      gtin: usage.gtin,
      description: usage.description,
      created_at: usage.now,
      idempotency_scope: usage.idempotency?.scope ?? null,
      idempotency_key_hash: usage.idempotency?.keyHash ?? null,
      response_status: usage.idempotency?.responseStatus ?? null,
      response_body: usage.idempotency?.responseBody ?? null,
    }));
    const committed = await this.client<Array<{ reservation_id: string }>>`
      WITH input AS (
        SELECT * FROM jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb) AS input(
          seq int, reservation_id text, transaction_id text, gtin text, description text, created_at bigint,
          idempotency_scope text, idempotency_key_hash text, response_status int, response_body text)
      ),
      claimed AS (
        DELETE FROM reservations USING input WHERE reservations.id = input.reservation_id
        RETURNING reservations.id, reservations.organization_id, reservations.amount, reservations.allocations, reservations.key_id, reservations.request_id
      ),
      totals AS (SELECT organization_id, sum(amount)::bigint AS amount FROM claimed GROUP BY organization_id),
      moved AS (
        UPDATE organizations SET ledger_balance = organizations.ledger_balance - totals.amount
        FROM totals WHERE organizations.id = totals.organization_id
        RETURNING organizations.id, organizations.ledger_balance
      ),
      debits AS (
        -- balanceAfter of a row = the organization's sum after the batch + what its later rows took.
        SELECT input.*, claimed.organization_id, claimed.amount, claimed.allocations, claimed.key_id, claimed.request_id,
               moved.ledger_balance + coalesce(sum(claimed.amount) OVER (
                 PARTITION BY claimed.organization_id ORDER BY input.seq DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS balance_after
        FROM input JOIN claimed ON claimed.id = input.reservation_id JOIN moved ON moved.id = claimed.organization_id
      ),
      ledger AS (
        INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
        SELECT transaction_id, organization_id, 'usage', -amount, balance_after,
               CASE WHEN jsonb_array_length(allocations) = 1 THEN allocations->0->>'bucketId' END,
               key_id, request_id, gtin, description, created_at
        FROM debits
      ),
      completed AS (
        UPDATE idempotency_records SET status = 'done', response_status = debits.response_status, response_body = debits.response_body
        FROM debits
        WHERE debits.idempotency_scope IS NOT NULL AND idempotency_records.scope = debits.idempotency_scope AND idempotency_records.key_hash = debits.idempotency_key_hash
      )
      SELECT reservation_id FROM debits`;
    return new Set(committed.map((row) => row.reservation_id));
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

  /**
   * Other instances may be serving: only reservations old enough to belong to a dead request are
   * given back. Idempotency claims are left alone; an abandoned one ages out (abandonedBefore).
   */
  async recoverInFlightWork(now: number): Promise<void> {
    await this.releaseStaleReservations(now - STALE_RESERVATION_MS);
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
        // Spent, written-off and clawed-back buckets are history: the ledger tells it, the balance does
        // not list them. A bucket whose credits are all held by requests in flight is still listed.
        const heldBuckets = sql`(SELECT allocation->>'bucketId' FROM ${reservations}, jsonb_array_elements(${reservations.allocations}) AS allocation WHERE ${reservations.organizationId} = ${organizationId})`;
        const buckets = await tx
          .select()
          .from(creditBuckets)
          .where(and(eq(creditBuckets.organizationId, organizationId), or(gt(creditBuckets.remaining, 0), sql`${creditBuckets.id} IN ${heldBuckets}`)))
          .orderBy(...FEFO);
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

  // Keyset pages on (createdAt, id), newest first: the upper bound merges the cursor and `to` into
  // one row-value comparison, which the (org, createdAt, id) and (org, type, createdAt, id) indexes range over.
  async listTransactions(organizationId: string, query: TransactionQuery): Promise<Page<LedgerTransaction>> {
    let before: { createdAt: number; id: string } | null = null;
    if (query.after !== undefined) {
      before = decodeLedgerCursor(query.after);
      if (before === null) throw new Error("listTransactions: malformed cursor");
    }
    // created_at < to  ⇔  (created_at, id) < (to, ""), since every id sorts after "".
    if (query.to !== undefined && (before === null || query.to < before.createdAt || (query.to === before.createdAt && before.id !== ""))) {
      before = { createdAt: query.to, id: "" };
    }
    const types = query.types ?? [];
    const rows = await this.db
      .select()
      .from(creditTransactions)
      .where(
        and(
          eq(creditTransactions.organizationId, organizationId),
          types.length === 0 ? undefined : types.length === 1 ? eq(creditTransactions.type, types[0]!) : inArray(creditTransactions.type, types),
          before === null ? undefined : sql`(${creditTransactions.createdAt}, ${creditTransactions.id}) < (${before.createdAt}, ${before.id})`,
          query.from === undefined ? undefined : gte(creditTransactions.createdAt, query.from),
        ),
      )
      .orderBy(desc(creditTransactions.createdAt), desc(creditTransactions.id))
      .limit(query.limit + 1);
    const items = rows.slice(0, query.limit);
    const last = items[items.length - 1];
    return { items, nextCursor: rows.length > query.limit && last ? encodeLedgerCursor(last) : null };
  }

  async expireBuckets(now: number): Promise<number> {
    return this.writeOffExpired(null, now);
  }

  /** Builds a statement on first use, so it is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  // --- sessions, sign-in and invitations (issue 3) ---

  // Invariant: one transaction decides; two first sign-ins of one identity racing on two instances
  // collide on the unique subject (or email) index, and the loser runs again and finds the winner's user.
  async signInSubject(input: Parameters<Store["signInSubject"]>[0]): Promise<SignInOutcome> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.transaction(async (tx): Promise<SignInOutcome> => {
          const [existing] = await tx.select().from(users).where(eq(users.subject, input.subject));
          if (existing !== undefined) return { outcome: "existing", user: existing };
          const [taken] = await tx.select({ id: users.id }).from(users).where(eq(users.email, input.email));
          if (taken !== undefined) return { outcome: "email-taken" };

          // Deleting the invitation is what claims it: of two sign-ins racing for it, one gets the row.
          const [invitation] = await tx.delete(invitations).where(eq(invitations.email, input.email)).returning();
          let organizationId: string;
          if (invitation !== undefined) {
            organizationId = invitation.organizationId;
          } else {
            organizationId = newId("org", input.now);
            await tx.insert(organizations).values({ id: organizationId, name: input.newOrganizationName, createdAt: input.now });
            if (input.trialCredits > 0) {
              await this.insertGrant(tx, organizationId, { source: "trial", type: "trial", amount: input.trialCredits, expiresAt: null, description: "Trial credits" }, input.now);
            }
          }
          const user: User = {
            id: newId("usr", input.now),
            email: input.email,
            name: input.name,
            subject: input.subject,
            organizationId,
            role: invitation?.role ?? "owner",
            createdAt: input.now,
          };
          await tx.insert(users).values(user);
          return { outcome: invitation !== undefined ? "joined" : "created", user };
        });
      } catch (error) {
        if (attempt >= TRANSACTION_ATTEMPTS || !isUniqueViolation(error)) throw error;
      }
    }
  }

  async getUserByEmail(email: string): Promise<User | null> {
    const [user] = await this.db.select().from(users).where(eq(users.email, email));
    return user ?? null;
  }

  async insertSession(session: SessionRecord): Promise<void> {
    await this.db.insert(sessions).values(session);
  }

  // Invariant: the conditional update on the current token hash lets one of two concurrent refreshes win.
  async rotateSessionToken(input: Parameters<Store["rotateSessionToken"]>[0]): Promise<SessionRecord | null> {
    const [row] = await this.db
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
      .returning();
    return row ?? null;
  }

  async revokeSession(id: string, now: number): Promise<boolean> {
    const changed = await this.db
      .update(sessions)
      .set({ revokedAt: now })
      .where(and(eq(sessions.id, id), isNull(sessions.revokedAt)))
      .returning({ id: sessions.id });
    return changed.length === 1;
  }

  async deleteDeadSessions(now: number): Promise<number> {
    const deleted = await this.db.delete(sessions).where(or(isNotNull(sessions.revokedAt), lte(sessions.expiresAt, now))).returning({ id: sessions.id });
    return deleted.length;
  }

  async upsertInvitation(invitation: Invitation): Promise<Invitation> {
    await this.db
      .insert(invitations)
      .values(invitation)
      .onConflictDoUpdate({ target: invitations.email, set: { organizationId: invitation.organizationId, role: invitation.role, createdAt: invitation.createdAt } });
    return invitation;
  }

  // --- idempotency records (issue 3) ---

  // Invariant: one statement claims: the insert, or the takeover of an expired or abandoned record
  // (a conditional update of the conflicting row, which PostgreSQL re-checks under its row lock), so
  // of two instances claiming one key at once exactly one gets it.
  async claimIdempotencyKey(input: Parameters<Store["claimIdempotencyKey"]>[0]): Promise<IdempotencyClaim> {
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
    for (let attempt = 1; ; attempt++) {
      const claimed = await this.db
        .insert(idempotencyRecords)
        .values(claim)
        .onConflictDoUpdate({
          target: [idempotencyRecords.scope, idempotencyRecords.keyHash],
          set: {
            requestHash: sql`excluded.request_hash`,
            status: sql`excluded.status`,
            responseStatus: sql`NULL`,
            responseBody: sql`NULL`,
            createdAt: sql`excluded.created_at`,
            expiresAt: sql`excluded.expires_at`,
          },
          setWhere: or(
            lte(idempotencyRecords.expiresAt, input.now),
            and(eq(idempotencyRecords.status, "in-progress"), lt(idempotencyRecords.createdAt, input.abandonedBefore)),
          ),
        })
        .returning({ scope: idempotencyRecords.scope });
      if (claimed.length === 1) return { claimed: true };
      const [record] = await this.db
        .select()
        .from(idempotencyRecords)
        .where(and(eq(idempotencyRecords.scope, input.scope), eq(idempotencyRecords.keyHash, input.keyHash)));
      if (record !== undefined) return { claimed: false, record };
      // The record was released between the two statements: claim again.
      if (attempt >= TRANSACTION_ATTEMPTS) throw new Error("claimIdempotencyKey: the record keeps changing");
    }
  }

  async completeIdempotencyKey(input: Parameters<Store["completeIdempotencyKey"]>[0]): Promise<void> {
    await this.db
      .update(idempotencyRecords)
      .set({ status: "done", responseStatus: input.responseStatus, responseBody: input.responseBody })
      .where(and(eq(idempotencyRecords.scope, input.scope), eq(idempotencyRecords.keyHash, input.keyHash)));
  }

  async releaseIdempotencyKey(scope: string, keyHash: string): Promise<void> {
    await this.db
      .delete(idempotencyRecords)
      .where(and(eq(idempotencyRecords.scope, scope), eq(idempotencyRecords.keyHash, keyHash), eq(idempotencyRecords.status, "in-progress")));
  }

  async deleteExpiredIdempotencyRecords(now: number): Promise<number> {
    const deleted = await this.db.delete(idempotencyRecords).where(lte(idempotencyRecords.expiresAt, now)).returning({ scope: idempotencyRecords.scope });
    return deleted.length;
  }

  // --- billing ---

  async createOrder(order: NewOrder): Promise<Order> {
    const [created] = await this.db.insert(orders).values({ ...order, status: "pending" }).returning();
    return created!;
  }

  async getOrder(id: string): Promise<Order | null> {
    const [order] = await this.db.select().from(orders).where(eq(orders.id, id));
    return order ?? null;
  }

  async findOrderByProviderRef(providerRef: string): Promise<Order | null> {
    const [order] = await this.db.select().from(orders).where(eq(orders.providerRef, providerRef));
    return order ?? null;
  }

  async listOrders(query: { organizationId?: string; limit: number; after?: string }): Promise<Page<Order>> {
    const rows = await this.db
      .select()
      .from(orders)
      .where(and(query.organizationId ? eq(orders.organizationId, query.organizationId) : undefined, query.after ? lt(orders.id, query.after) : undefined))
      .orderBy(desc(orders.id))
      .limit(query.limit + 1);
    return page(rows, query.limit);
  }

  /**
   * Inserts the event row inside `tx`; false when it was already there (the event was applied
   * before). An instance inserting the same id meanwhile makes this wait for its outcome.
   */
  private async claimEvent(tx: Tx, event: ProviderEvent | null, now: number): Promise<boolean> {
    if (event === null) return true;
    const inserted = await tx.insert(providerEvents).values({ id: event.id, type: event.type, receivedAt: now }).onConflictDoNothing().returning({ id: providerEvents.id });
    return inserted.length === 1;
  }

  private async insertPayment(tx: Tx, organizationId: string, bucket: Bucket, payment: PaymentInput, now: number): Promise<void> {
    await tx
      .insert(payments)
      .values({ ref: payment.ref, organizationId, bucketId: bucket.id, credits: bucket.granted, amount: payment.amount, currency: payment.currency, createdAt: now })
      .onConflictDoNothing();
  }

  /**
   * A paid invoice with the next number. Numbers have no gaps: the sequence is taken under a
   * transaction-scoped advisory lock (per schema), held until commit, so instances take turns and
   * each reads the previous holder's committed invoice; the unique index backs it.
   */
  private async insertInvoice(tx: Tx, organizationId: string, input: InvoiceInput & { orderId: string | null; subscriptionId: string | null }, now: number): Promise<InvoiceRecord> {
    await tx.execute(sql`SELECT pg_advisory_xact_lock(${INVOICE_LOCK_NAMESPACE}, hashtext(current_schema()))`);
    const [last] = await tx.select({ last: sql<number>`coalesce(max(${invoices.sequence}), 0)`.mapWith(Number) }).from(invoices);
    const sequence = last!.last + 1;
    const [invoice] = await tx
      .insert(invoices)
      .values({ id: newId("inv", now), organizationId, sequence, number: `INV-${String(sequence).padStart(6, "0")}`, status: "paid", ...input, createdAt: now, paidAt: now })
      .returning(this.invoiceColumns);
    return invoice!;
  }

  // Invariant: an order is completed once. The conditional pending → completed update (and, for a
  // provider event, the event row) commit with the grant, so a second completion, on any instance,
  // waits for the first and then writes nothing.
  async completeOrder(input: CompleteOrderInput): Promise<CompleteOrderResult> {
    const { now } = input;
    return this.transaction(async (tx): Promise<CompleteOrderResult> => {
      const unchanged = async () => {
        const [current] = await tx.select().from(orders).where(eq(orders.id, input.orderId));
        return { applied: false, order: current ?? null, bucket: null, invoice: null, subscription: null };
      };
      if (!(await this.claimEvent(tx, input.event, now))) return unchanged();
      const [order] = await tx
        .update(orders)
        .set({ status: "completed", completedAt: now })
        .where(and(eq(orders.id, input.orderId), eq(orders.status, "pending")))
        .returning();
      if (order === undefined) return unchanged();
      const bucket = input.grant === null ? null : await this.insertGrant(tx, order.organizationId, input.grant, now);
      if (bucket !== null && input.payment !== null) await this.insertPayment(tx, order.organizationId, bucket, input.payment, now);
      let subscription: SubscriptionRecord | null = null;
      if (input.subscription !== null) {
        const [created] = await tx
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
          .returning();
        subscription = created!;
      }
      const invoice =
        input.invoice === null ? null : await this.insertInvoice(tx, order.organizationId, { ...input.invoice, orderId: order.id, subscriptionId: subscription?.id ?? null }, now);
      return { applied: true, order, bucket, invoice, subscription };
    });
  }

  // Invariant: the event row and the grant commit together, so a redelivered event grants nothing.
  async applyPaidGrant(input: { event: ProviderEvent; organizationId: string; grant: CreditGrant; payment: PaymentInput; now: number }): Promise<{ applied: boolean; bucket: Bucket | null }> {
    return this.transaction(async (tx) => {
      if (!(await this.claimEvent(tx, input.event, input.now))) return { applied: false, bucket: null };
      const bucket = await this.insertGrant(tx, input.organizationId, input.grant, input.now);
      await this.insertPayment(tx, input.organizationId, bucket, input.payment, input.now);
      return { applied: true, bucket };
    });
  }

  // Invariant: a refund takes only what its bucket still holds (never below zero), with one `refund`
  // ledger row; the payment's refunded amount only moves forward, so no refund is taken twice. The
  // payment row is locked first, so concurrent refunds of one payment take turns; the bucket is
  // locked before it is read. Credits reserved by requests in flight are already out of the bucket.
  async refundPayment(input: { event: ProviderEvent | null; ref: string; refundedAmount: number; description: string; now: number }) {
    return this.transaction(async (tx) => {
      const none = { applied: false, clawedBack: 0, organizationId: null };
      const [payment] = await tx.select().from(payments).where(eq(payments.ref, input.ref)).for("update");
      if (payment === undefined || !(await this.claimEvent(tx, input.event, input.now))) return none;
      const refundedAmount = Math.min(input.refundedAmount, payment.amount);
      if (refundedAmount <= payment.refundedAmount) return { ...none, organizationId: payment.organizationId };
      // Credits in proportion to the money refunded (all of them for a full refund), in integers.
      const refundedCredits =
        refundedAmount === payment.amount || payment.amount === 0 ? payment.credits : Number((BigInt(payment.credits) * BigInt(refundedAmount)) / BigInt(payment.amount));
      await tx.update(payments).set({ refundedAmount, refundedCredits }).where(eq(payments.ref, payment.ref));
      // Credits past their expiry are not the customer's any more: write them off first, as expiry.
      const expired = await tx
        .select({ id: creditBuckets.id })
        .from(creditBuckets)
        .where(and(eq(creditBuckets.organizationId, payment.organizationId), gt(creditBuckets.remaining, 0), lte(creditBuckets.expiresAt, input.now)))
        .orderBy(asc(creditBuckets.id));
      for (const { id } of expired) await this.writeOffBucket(tx, id, input.now);
      const [bucket] = await tx.select({ remaining: creditBuckets.remaining }).from(creditBuckets).where(eq(creditBuckets.id, payment.bucketId)).for("update");
      const take = Math.min(Math.max(refundedCredits - payment.refundedCredits, 0), bucket!.remaining);
      if (take > 0) {
        await tx
          .update(creditBuckets)
          .set({ remaining: sql`${creditBuckets.remaining} - ${take}` })
          .where(eq(creditBuckets.id, payment.bucketId));
        await this.appendLedger(tx, { organizationId: payment.organizationId, type: "refund", amount: -take, bucketId: payment.bucketId, description: input.description, createdAt: input.now });
      }
      return { applied: true, clawedBack: take, organizationId: payment.organizationId };
    });
  }

  async hasPayment(ref: string): Promise<boolean> {
    const [row] = await this.db.select({ ref: payments.ref }).from(payments).where(eq(payments.ref, ref));
    return row !== undefined;
  }

  async recordProviderEvent(event: ProviderEvent, now: number): Promise<boolean> {
    return this.transaction((tx) => this.claimEvent(tx, event, now));
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
    const rows = await this.db
      .select(this.invoiceColumns)
      .from(invoices)
      .where(and(eq(invoices.organizationId, organizationId), query.after ? lt(invoices.id, query.after) : undefined))
      .orderBy(desc(invoices.id))
      .limit(query.limit + 1);
    return page(rows, query.limit);
  }

  async getInvoice(id: string): Promise<InvoiceRecord | null> {
    const [invoice] = await this.db.select(this.invoiceColumns).from(invoices).where(eq(invoices.id, id));
    return invoice ?? null;
  }

  async listSubscriptions(organizationId: string): Promise<SubscriptionRecord[]> {
    return this.db.select().from(subscriptions).where(eq(subscriptions.organizationId, organizationId)).orderBy(desc(subscriptions.id));
  }

  async listDueSubscriptions(now: number, limit: number): Promise<SubscriptionRecord[]> {
    return this.db
      .select()
      .from(subscriptions)
      .where(and(eq(subscriptions.status, "active"), lte(subscriptions.currentPeriodEnd, now)))
      .orderBy(asc(subscriptions.currentPeriodEnd))
      .limit(limit);
  }

  // Invariant: a period is granted and invoiced once: the conditional move from the period end the
  // caller saw commits with the grant, the invoice and its payment row; a second instance renewing
  // the same period waits on the row and then finds the period end moved.
  async renewSubscription(input: RenewSubscriptionInput): Promise<{ applied: boolean; bucket: Bucket | null; invoice: InvoiceRecord | null }> {
    return this.transaction(async (tx) => {
      const [subscription] = await tx
        .update(subscriptions)
        .set({ currentPeriodStart: input.periodStart, currentPeriodEnd: input.periodEnd })
        .where(and(eq(subscriptions.id, input.subscriptionId), eq(subscriptions.status, "active"), eq(subscriptions.currentPeriodEnd, input.expectedPeriodEnd)))
        .returning();
      if (subscription === undefined) return { applied: false, bucket: null, invoice: null };
      const bucket = await this.insertGrant(tx, subscription.organizationId, input.grant, input.now);
      const invoice = await this.insertInvoice(tx, subscription.organizationId, { ...input.invoice, orderId: null, subscriptionId: subscription.id }, input.now);
      await this.insertPayment(tx, subscription.organizationId, bucket, { ref: invoice.id, amount: invoice.amount, currency: invoice.currency }, input.now);
      return { applied: true, bucket, invoice };
    });
  }

  async cancelSubscription(organizationId: string, subscriptionId: string, now: number): Promise<SubscriptionRecord | null> {
    const [subscription] = await this.db
      .update(subscriptions)
      .set({ status: "canceled", canceledAt: now })
      .where(and(eq(subscriptions.id, subscriptionId), eq(subscriptions.organizationId, organizationId), eq(subscriptions.status, "active")))
      .returning();
    return subscription ?? null;
  }

  async getStripeCustomerId(organizationId: string): Promise<string | null> {
    const [row] = await this.db.select({ id: organizations.stripeCustomerId }).from(organizations).where(eq(organizations.id, organizationId));
    return row?.id ?? null;
  }

  async setStripeCustomerId(organizationId: string, customerId: string): Promise<string> {
    await this.db
      .update(organizations)
      .set({ stripeCustomerId: customerId })
      .where(and(eq(organizations.id, organizationId), isNull(organizations.stripeCustomerId)));
    const stored = await this.getStripeCustomerId(organizationId);
    if (stored === null) throw new Error(`organization ${organizationId} does not exist`);
    return stored;
  }

  async findOrganizationByStripeCustomer(customerId: string): Promise<Organization | null> {
    const [row] = await this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .where(eq(organizations.stripeCustomerId, customerId));
    return row ?? null;
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

/** A unique constraint refused the insert (23505): another transaction inserted the same key first. */
function isUniqueViolation(error: unknown): boolean {
  const code = (error as { cause?: { code?: string }; code?: string } | null)?.cause?.code ?? (error as { code?: string } | null)?.code;
  return code === "23505";
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
