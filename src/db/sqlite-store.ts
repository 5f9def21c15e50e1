import { Database } from "bun:sqlite";
import { and, asc, desc, eq, gt, gte, inArray, isNull, lt, lte, sql } from "drizzle-orm";
import { type BunSQLiteDatabase, drizzle } from "drizzle-orm/bun-sqlite";
import { newId } from "../lib/ids";
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
  Organization,
  Page,
  Reservation,
  SessionRecord,
  SessionWithUser,
  SignInOutcome,
  Store,
  TransactionQuery,
  User,
} from "./store";

const { organizations, users, sessions, apiKeys, products, merchants, offers, creditBuckets, creditTransactions, reservations } = schema;
const { invitations, idempotencyRecords } = schema;

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

  // Invariant: a bucket and its ledger row are written together; ledger sum = available + reserved.
  async grantCredits(input: Parameters<Store["grantCredits"]>[0]): Promise<Bucket> {
    return this.write((tx) => {
      const bucket: Bucket = {
        id: newId("bkt", input.now),
        organizationId: input.organizationId,
        source: input.source,
        granted: input.amount,
        remaining: input.amount,
        expiresAt: input.expiresAt,
        createdAt: input.now,
      };
      tx.insert(creditBuckets).values(bucket).run();
      const balanceAfter = this.moveLedger(tx, input.organizationId, input.amount);
      tx.insert(creditTransactions)
        .values({
          id: newId("txn", input.now),
          organizationId: input.organizationId,
          type: input.type,
          amount: input.amount,
          balanceAfter,
          bucketId: bucket.id,
          description: input.description,
          createdAt: input.now,
        })
        .run();
      return bucket;
    });
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
      const buckets = tx.select().from(creditBuckets).where(eq(creditBuckets.organizationId, organizationId)).orderBy(...FEFO).all();
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

  async listTransactions(organizationId: string, query: TransactionQuery): Promise<Page<LedgerTransaction>> {
    const rows = this.db
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
      .limit(query.limit + 1)
      .all();
    return page(rows, query.limit);
  }

  async expireBuckets(now: number): Promise<number> {
    return this.write((tx) => this.writeOffExpired(tx, null, now));
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
  private insertTrialGrant(tx: Tx, organizationId: string, amount: number, now: number): void {
    const bucketId = newId("bkt", now);
    tx.insert(creditBuckets).values({ id: bucketId, organizationId, source: "trial", granted: amount, remaining: amount, expiresAt: null, createdAt: now }).run();
    const balanceAfter = this.moveLedger(tx, organizationId, amount);
    tx.insert(creditTransactions)
      .values({ id: newId("txn", now), organizationId, type: "trial", amount, balanceAfter, bucketId, description: "Trial credits", createdAt: now })
      .run();
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
}

/** Cuts a `limit + 1` query result into a page; the cursor is the last returned id. */
export function page<T extends { id: string }>(rows: T[], limit: number): Page<T> {
  const items = rows.slice(0, limit);
  return { items, nextCursor: rows.length > limit ? items[items.length - 1]!.id : null };
}
