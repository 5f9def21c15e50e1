import { checkpointOnWorker } from "./sqlite-checkpointer";
import { Database } from "bun:sqlite";
import { and, eq, gt, isNull, lte, or, sql } from "drizzle-orm";
import { type BunSQLiteDatabase, drizzle } from "drizzle-orm/bun-sqlite";
import { utcMonth } from "../lib/clock";
import { newId } from "../lib/ids";
import { decodeLedgerCursor, encodeLedgerCursor } from "./cursor";
import { applySQLiteMigrations } from "./migrate";
import { SQLiteWebhooks } from "./webhooks/sqlite";
import { balanceEventData, balanceEventTypes } from "./webhooks/records";
import { fefoOrder, takeInOrder } from "./ledger/allocation";
import { grant } from "./ledger/operations";
import { type LedgerPort, runSync } from "./ledger/port";
import { sqliteLedgerPort } from "./ledger/sqlite";
import { SQLiteBilling } from "./billing/sqlite";
import { SQLiteCatalog } from "./catalog/sqlite";
import { SQLiteFeeds } from "./feeds/sqlite";
import { SQLiteIdempotency } from "./idempotency/sqlite";
import { SQLiteIdentity } from "./identity/sqlite";
import { SQLiteKeys } from "./keys/sqlite";
import { SQLiteUsage } from "./usage/sqlite";
import { SQLiteWatches } from "./watches/sqlite";
import { SQLiteHistory } from "./history/sqlite";
import type { HistoryQuery } from "./history/records";
import * as schema from "./schema/sqlite";
import { BILLED_REASON, hourStartOf, splitAllocations } from "./store";
import type {
  Balance,
  Bucket,
  KeyCredential,
  LedgerTransaction,
  OfferRecord,
  Page,
  ProductRecord,
  Reservation,
  Store,
  TransactionQuery,
  TransactionType,
  UsageRecord,
} from "./store";

const { organizations, creditBuckets, creditTransactions } = schema;
const { idempotencyRecords } = schema;

type DB = BunSQLiteDatabase<typeof schema>;

/** Opens (and creates) a SQLite database: WAL synced at each commit, a busy timeout for concurrent CLI writers, foreign keys on, rarer checkpoints. */
export function openSQLite(path: string): Database {
  const database = new Database(path, { create: true, strict: true });
  // First, so the statements below wait out a passing lock (another connection recovering the WAL a
  // killed process left, a checkpoint) instead of failing at once with "database is locked".
  database.exec("PRAGMA busy_timeout = 5000");
  database.exec("PRAGMA journal_mode = WAL");
  // FULL: every commit syncs the WAL before it returns, so an answered debit, a granted purchase or
  // a revocation survives a power loss or an OS crash, not only a crash of the process (NORMAL syncs
  // only at checkpoints and may lose the last commits). Group commit shares each sync among a batch.
  database.exec("PRAGMA synchronous = FULL");
  database.exec("PRAGMA foreign_keys = ON");
  // Checkpoint every 10 000 WAL pages (about 40 MB) rather than SQLite's 1 000: billed look-ups rewrite
  // the same few pages (the organization, its bucket, the ledger's last index pages) in every commit,
  // and a checkpoint copies each page once however often it changed, so fewer checkpoints copy far less.
  database.exec("PRAGMA wal_autocheckpoint = 10000");
  return database;
}

export function sqlitePathFromURL(databaseUrl: string): string {
  const path = databaseUrl.replace(/^sqlite:(\/\/)?/, "");
  return path === "" ? ":memory:" : path;
}

const bucketColumns = {
  id: creditBuckets.id,
  organizationId: creditBuckets.organizationId,
  source: creditBuckets.source,
  granted: creditBuckets.granted,
  remaining: creditBuckets.remaining,
  expiresAt: creditBuckets.expiresAt,
  createdAt: creditBuckets.createdAt,
};

// Soonest-expiring first; buckets that never expire last; then oldest first.
const FEFO = [sql.raw(fefoOrder("credit_buckets"))] as const;

/** How long a write waits for a write lock that another process holds, retrying between event-loop turns. */
export const LOCK_WAIT_MS = 3_000;
/**
 * How long one attempt may block the event loop in SQLite's own busy handler. bun:sqlite is
 * synchronous: a long busy_timeout would freeze every request and timer while another process
 * (an operator's import) holds the write lock.
 */
const BUSY_TIMEOUT_MS = 5;

function isLocked(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
}

/** Runs `attempt` again, with growing pauses, while the database is locked by another connection, for up to LOCK_WAIT_MS. */
async function whileLocked<T>(attempt: () => T | Promise<T>): Promise<T> {
  const deadline = performance.now() + LOCK_WAIT_MS;
  for (let pause = 2; ; pause = Math.min(pause * 2, 50)) {
    try {
      return await attempt();
    } catch (error) {
      if (!isLocked(error) || performance.now() + pause > deadline) throw error;
    }
    await Bun.sleep(pause);
  }
}

/**
 * The store with every method retried while the database is locked. A method that failed with
 * SQLITE_BUSY wrote nothing (each one writes in at most one transaction), so running it again is safe.
 * Debits are retried inside the group commit instead.
 */
function retryingWhileLocked(store: SQLiteStore): SQLiteStore {
  return new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (typeof value !== "function" || property === "commitReservation") return value;
      return (...args: unknown[]) => {
        const result = Reflect.apply(value, target, args);
        if (!(result instanceof Promise)) return result;
        return result.catch((error: unknown) => (isLocked(error) ? whileLocked(() => Reflect.apply(value, target, args)) : Promise.reject(error)));
      };
    },
  });
}

export class SQLiteStore implements Store {
  readonly dialect = "sqlite";
  private readonly db: DB;

  private readonly history: SQLiteHistory;

  constructor(private readonly database: Database) {
    this.db = drizzle(database, { schema });
    this.webhooks = new SQLiteWebhooks(database);
    this.watches = new SQLiteWatches(database, (organizationId, now) => this.spendableBuckets(organizationId, now));
    this.history = new SQLiteHistory(database);
    this.usage = new SQLiteUsage(database, (work) => this.writeKeepingCaches(work));
    this.catalog = new SQLiteCatalog(database, this.db, { write: (work) => this.write(work), syncCaches: () => this.syncCaches(), productCache: this.productCache, history: this.history });
    this.keys = new SQLiteKeys(this.db, {
      write: (work) => this.write(work),
      writeKeepingCaches: (work) => this.writeKeepingCaches(work),
      syncCaches: (scope) => this.syncCaches(scope),
      keyCache: this.keyCache,
      keyLineOf: (keyId) => this.keyLineOf(keyId),
      emit: (events) => this.webhooks.emit(events),
    });
    this.ledger = sqliteLedgerPort({
      db: this.db,
      appendLedger: (entry) => this.appendLedger(entry),
      emit: (events) => this.webhooks.emit(events),
      writeOffExpired: (organizationId, now) => void this.writeOffExpired(organizationId, now),
      heldIn: (bucketId) => this.holds.get(bucketId) ?? 0,
    });
    this.feeds = new SQLiteFeeds(database, (work) => this.write(work));
    this.idempotency = new SQLiteIdempotency(this.db, (work) => this.write(work));
    this.identity = new SQLiteIdentity(this.db, { write: (work) => this.write(work), ledger: this.ledger });
    this.billing = new SQLiteBilling(this.db, { write: (work) => this.write(work), ledger: this.ledger });
  }

  private readonly identity: SQLiteIdentity;
  createOrganization: Store["createOrganization"] = async (input) => this.identity.createOrganization(input);
  getOrganization: Store["getOrganization"] = async (id) => this.identity.getOrganization(id);
  listOrganizations: Store["listOrganizations"] = async () => this.identity.listOrganizations();
  ensureSystemUser: Store["ensureSystemUser"] = async (now) => this.identity.ensureSystemUser(now);
  findSessionWithUser: Store["findSessionWithUser"] = async (sessionId) => this.identity.findSessionWithUser(sessionId);
  signInSubject: Store["signInSubject"] = async (input) => this.identity.signInSubject(input);
  getUserByEmail: Store["getUserByEmail"] = async (email) => this.identity.getUserByEmail(email);
  insertSession: Store["insertSession"] = async (session) => this.identity.insertSession(session);
  rotateSessionToken: Store["rotateSessionToken"] = async (input) => this.identity.rotateSessionToken(input);
  revokeSession: Store["revokeSession"] = async (id, now) => this.identity.revokeSession(id, now);
  deleteDeadSessions: Store["deleteDeadSessions"] = async (now) => this.identity.deleteDeadSessions(now);
  upsertInvitation: Store["upsertInvitation"] = async (invitation) => this.identity.upsertInvitation(invitation);

  private readonly idempotency: SQLiteIdempotency;
  claimIdempotencyKey: Store["claimIdempotencyKey"] = async (input) => this.idempotency.claimIdempotencyKey(input);
  completeIdempotencyKey: Store["completeIdempotencyKey"] = async (input) => this.idempotency.completeIdempotencyKey(input);
  releaseIdempotencyKey: Store["releaseIdempotencyKey"] = async (input) => this.idempotency.releaseIdempotencyKey(input);
  deleteExpiredIdempotencyRecords: Store["deleteExpiredIdempotencyRecords"] = async (now) => this.idempotency.deleteExpiredIdempotencyRecords(now);

  private readonly feeds: SQLiteFeeds;
  createFeedSource: Store["createFeedSource"] = async (source) => this.feeds.createFeedSource(source);
  getFeedSource: Store["getFeedSource"] = async (idOrName) => this.feeds.getFeedSource(idOrName);
  listFeedSources: Store["listFeedSources"] = async () => this.feeds.listFeedSources();
  setFeedSourceTrust: Store["setFeedSourceTrust"] = async (id, trust) => this.feeds.setFeedSourceTrust(id, trust);
  removeFeedSource: Store["removeFeedSource"] = async (id, now) => this.feeds.removeFeedSource(id, now);
  claimDueFeedSources: Store["claimDueFeedSources"] = async (input) => this.feeds.claimDueFeedSources(input);
  claimFeedSource: Store["claimFeedSource"] = async (input) => this.feeds.claimFeedSource(input);
  finishFeedRun: Store["finishFeedRun"] = async (input) => this.feeds.finishFeedRun(input);
  releaseFeedLease: Store["releaseFeedLease"] = async (sourceId, owner) => this.feeds.releaseFeedLease(sourceId, owner);
  renewFeedLease: Store["renewFeedLease"] = async (input) => this.feeds.renewFeedLease(input);
  listFeedRuns: Store["listFeedRuns"] = async (sourceId, query) => this.feeds.listFeedRuns(sourceId, query);
  hasImportedFeedFile: Store["hasImportedFeedFile"] = async (sourceId, file) => this.feeds.hasImportedFeedFile(sourceId, file);
  insertFeedToken: Store["insertFeedToken"] = async (token) => this.feeds.insertFeedToken(token);
  findFeedTokenCredential: Store["findFeedTokenCredential"] = async (id) => this.feeds.findFeedTokenCredential(id);
  listFeedTokens: Store["listFeedTokens"] = async () => this.feeds.listFeedTokens();
  revokeFeedToken: Store["revokeFeedToken"] = async (id, now) => this.feeds.revokeFeedToken(id, now);
  feedFreshness: Store["feedFreshness"] = async (freshSince) => this.feeds.feedFreshness(freshSince);

  private readonly keys: SQLiteKeys;
  insertApiKey: Store["insertApiKey"] = async (key) => this.keys.insertApiKey(key);
  findKeyCredential: Store["findKeyCredential"] = async (keyHash) => this.keys.findKeyCredential(keyHash);
  getApiKey: Store["getApiKey"] = async (organizationId, id) => this.keys.getApiKey(organizationId, id);
  getApiKeyById: Store["getApiKeyById"] = async (id) => this.keys.getApiKeyById(id);
  listApiKeys: Store["listApiKeys"] = async (organizationId, query) => this.keys.listApiKeys(organizationId, query);
  revokeApiKey: Store["revokeApiKey"] = async (organizationId, id, now) => this.keys.revokeApiKey(organizationId, id, now);
  rotateApiKey: Store["rotateApiKey"] = async (organizationId, id, replacement) => this.keys.rotateApiKey(organizationId, id, replacement);
  updateApiKeyControls: Store["updateApiKeyControls"] = async (organizationId, id, controls) => this.keys.updateApiKeyControls(organizationId, id, controls);
  touchApiKeys: Store["touchApiKeys"] = async (lastUsed) => this.keys.touchApiKeys(lastUsed);

  private readonly watches: SQLiteWatches;
  createWatch: Store["createWatch"] = async (watch, rules) => this.watches.create(watch, rules);
  getWatch: Store["getWatch"] = async (organizationId, id) => this.watches.get(organizationId, id);
  listWatches: Store["listWatches"] = async (organizationId, query) => this.watches.list(organizationId, query);
  deleteWatch: Store["deleteWatch"] = async (organizationId, id) => this.watches.delete(organizationId, id);
  runWatchEvaluation: Store["runWatchEvaluation"] = async (input) => this.watches.run(input);

  private readonly catalog: SQLiteCatalog;
  applyFeedRecords: Store["applyFeedRecords"] = async (records, now, options) => this.catalog.applyFeedRecords(records, now, options);
  findProductsWithOffers: Store["findProductsWithOffers"] = async (gtins) => this.catalog.findProductsWithOffers(gtins);
  refreshCatalogStatistics: Store["refreshCatalogStatistics"] = async () => this.catalog.refreshCatalogStatistics();
  countProducts: Store["countProducts"] = async () => this.catalog.countProducts();
  listPriceHistory: Store["listPriceHistory"] = async (gtin, merchantId) => this.catalog.listPriceHistory(gtin, merchantId);
  prunePriceHistory: Store["prunePriceHistory"] = async (before) => this.catalog.prunePriceHistory(before);

  // A method, not a delegate field: the shutdown tests' preload (test/fixtures/slow-lookup.ts) wraps it on the prototype.
  async findProductWithOffers(gtin: string) {
    return this.catalog.findProductWithOffers(gtin);
  }

  private readonly usage: SQLiteUsage;
  addUsageCounts: Store["addUsageCounts"] = async (counts) => this.usage.addUsageCounts(counts);
  usageTotals: Store["usageTotals"] = async (organizationId, query) => this.usage.usageTotals(organizationId, query);

  private readonly webhooks: SQLiteWebhooks;
  createWebhookEndpoint: Store["createWebhookEndpoint"] = async (endpoint) => this.webhooks.create(endpoint);
  getWebhookEndpoint: Store["getWebhookEndpoint"] = async (organizationId, id) => this.webhooks.get(organizationId, id);
  listWebhookEndpoints: Store["listWebhookEndpoints"] = async (organizationId, query) => this.webhooks.list(organizationId, query);
  deleteWebhookEndpoint: Store["deleteWebhookEndpoint"] = async (organizationId, id) => this.webhooks.delete(organizationId, id);
  rotateWebhookSecret: Store["rotateWebhookSecret"] = async (organizationId, id, input) => this.webhooks.rotateSecret(organizationId, id, input);
  enableWebhookEndpoint: Store["enableWebhookEndpoint"] = async (organizationId, id) => this.webhooks.enable(organizationId, id);
  sendTestWebhookEvent: Store["sendTestWebhookEvent"] = async (organizationId, endpointId, input) => this.webhooks.sendTest(organizationId, endpointId, input);
  listWebhookDeliveries: Store["listWebhookDeliveries"] = async (endpointId, query) => this.webhooks.listDeliveries(endpointId, query);
  getLowCreditThreshold: Store["getLowCreditThreshold"] = async (organizationId) => this.webhooks.lowCreditThreshold(organizationId);
  setLowCreditThreshold: Store["setLowCreditThreshold"] = async (organizationId, threshold) => this.webhooks.setLowCreditThreshold(organizationId, threshold);
  claimWebhookDeliveries: Store["claimWebhookDeliveries"] = async (input) => this.webhooks.claim(input);
  finishWebhookDelivery: Store["finishWebhookDelivery"] = async (attempt) => this.webhooks.finish(attempt);
  dropWebhookBacklogOverflow: Store["dropWebhookBacklogOverflow"] = async () => this.webhooks.dropBacklogOverflow();
  private readonly billing: SQLiteBilling;
  createOrder: Store["createOrder"] = async (order) => this.billing.createOrder(order);
  getOrder: Store["getOrder"] = async (id) => this.billing.getOrder(id);
  findOrderByProviderRef: Store["findOrderByProviderRef"] = async (providerRef) => this.billing.findOrderByProviderRef(providerRef);
  listOrders: Store["listOrders"] = async (query) => this.billing.listOrders(query);
  completeOrder: Store["completeOrder"] = async (input) => this.billing.completeOrder(input);
  applyPaidGrant: Store["applyPaidGrant"] = async (input) => this.billing.applyPaidGrant(input);
  refundPayment: Store["refundPayment"] = async (input) => this.billing.refundPayment(input);
  disputePayment: Store["disputePayment"] = async (input) => this.billing.disputePayment(input);
  hasPayment: Store["hasPayment"] = async (ref) => this.billing.hasPayment(ref);
  recordProviderEvent: Store["recordProviderEvent"] = async (event, now) => this.billing.recordProviderEvent(event, now);
  listInvoices: Store["listInvoices"] = async (organizationId, query) => this.billing.listInvoices(organizationId, query);
  getInvoice: Store["getInvoice"] = async (id) => this.billing.getInvoice(id);
  listSubscriptions: Store["listSubscriptions"] = async (organizationId) => this.billing.listSubscriptions(organizationId);
  listDueSubscriptions: Store["listDueSubscriptions"] = async (now, limit) => this.billing.listDueSubscriptions(now, limit);
  renewSubscription: Store["renewSubscription"] = async (input) => this.billing.renewSubscription(input);
  cancelSubscription: Store["cancelSubscription"] = async (organizationId, subscriptionId, now) => this.billing.cancelSubscription(organizationId, subscriptionId, now);
  getStripeCustomerId: Store["getStripeCustomerId"] = async (organizationId) => this.billing.getStripeCustomerId(organizationId);
  setStripeCustomerId: Store["setStripeCustomerId"] = async (organizationId, customerId) => this.billing.setStripeCustomerId(organizationId, customerId);
  findOrganizationByStripeCustomer: Store["findOrganizationByStripeCustomer"] = async (customerId) => this.billing.findOrganizationByStripeCustomer(customerId);

  static open(databaseUrl: string): SQLiteStore {
    const database = openSQLite(sqlitePathFromURL(databaseUrl));
    applySQLiteMigrations(database);
    database.exec(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
    return retryingWhileLocked(new SQLiteStore(database));
  }

  /** The raw connection, for `backup` and for tests that inspect or corrupt state on purpose. */
  get connection(): Database {
    return this.database;
  }

  private closed = false;

  // No explicit checkpoint: SQLite checkpoints and deletes the -wal when the last connection to the
  // file closes, and a CLI run that closes beside a serving process must not stall its writers (a
  // TRUNCATE checkpoint holds the write lock until every reader is done).
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.database.close();
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
  /** Per key line: its monthly credit limit (null: none) and what it spent in one month, as committed. */
  private readonly keyLimitCache = new Map<string, number | null>();
  private readonly keySpentCache = new Map<string, { month: string; spent: number }>();
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
      this.keyLimitCache.clear();
      this.keySpentCache.clear();
      this.seenDataVersion = version;
      this.seenChanges = changes;
    }
  }

  async monthlySpending(keyIds: string[], month: string): Promise<Map<string, number>> {
    return new Map(keyIds.map((id) => [id, this.keySpentById().get(this.keyLineOf(id), month)?.spent ?? 0]));
  }

  startBackgroundCheckpoints(): { stop(): Promise<void> } {
    return checkpointOnWorker(this.database);
  }

  private readonly moveLedgerStatement = this.lazy(() =>
    this.db
      .update(organizations)
      .set({ ledgerBalance: sql`${organizations.ledgerBalance} + ${sql.placeholder("amount")}` })
      .where(eq(organizations.id, sql.placeholder("organizationId")))
      .returning({ ledgerBalance: organizations.ledgerBalance, lowCreditThreshold: organizations.lowCreditThreshold })
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

  /**
   * Appends a ledger row and moves the running sum; the only way credits enter or leave the ledger.
   * A row that lowers the sum across the low-credit threshold or to zero writes its balance events
   * too. Returns the sum after the row.
   */
  private appendLedger(row: Omit<LedgerTransaction, "id" | "balanceAfter" | "bucketId" | "keyId" | "requestId" | "gtin"> & Partial<Pick<LedgerTransaction, "bucketId" | "keyId" | "requestId" | "gtin">>): number {
    const { ledgerBalance: balanceAfter, lowCreditThreshold } = this.moveLedger(row.organizationId, row.amount);
    if (row.amount < 0) this.emitBalanceEvents(row.organizationId, balanceAfter - row.amount, balanceAfter, lowCreditThreshold, row.createdAt);
    this.insertTransaction().run({
      id: newId("txn", row.createdAt),
      bucketId: null,
      keyId: null,
      requestId: null,
      gtin: null,
      ...row,
      balanceAfter,
    });
    return balanceAfter;
  }

  private emitBalanceEvents(organizationId: string, before: number, after: number, threshold: number | null, now: number): void {
    const types = balanceEventTypes(before, after, threshold);
    if (types.length === 0) return;
    this.webhooks.emit(types.map((type) => ({ id: newId("msg", now), organizationId, type, data: balanceEventData(type, organizationId, after, threshold), createdAt: now })));
  }

  private readonly adjustBucket = this.lazy(() =>
    this.db
      .update(creditBuckets)
      .set({ remaining: sql`${creditBuckets.remaining} + ${sql.placeholder("delta")}` })
      .where(eq(creditBuckets.id, sql.placeholder("bucketId")))
      .prepare(),
  );

  /** Adds `amount` to the organization's running ledger sum and returns the new sum (the row's balanceAfter) and the low-credit threshold. */
  private moveLedger(organizationId: string, amount: number): { ledgerBalance: number; lowCreditThreshold: number | null } {
    const row = this.moveLedgerStatement().get({ organizationId, amount });
    if (row === undefined) throw new Error(`organization ${organizationId} does not exist`);
    return row;
  }

  /** The ledger port on this connection, for the money operations (ledger/operations.ts). */
  private readonly ledger: LedgerPort;

  async grantCredits(input: Parameters<Store["grantCredits"]>[0]): Promise<Bucket> {
    const { organizationId, now, ...credits } = input;
    return this.write(() => runSync(grant(organizationId, credits, now), this.ledger));
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
  /** Credits held per key line by its requests in flight (for monthly credit limits). */
  private readonly keyHolds = new Map<string, number>();

  private readonly keyLimitById = this.lazy(() =>
    this.database.prepare<{ limit: number | null }, [string]>("SELECT monthly_credit_limit AS \"limit\" FROM api_keys WHERE id = ?1 OR line_id = ?1 ORDER BY status = 'ACTIVE' DESC, created_at DESC LIMIT 1"),
  );
  private readonly keySpentById = this.lazy(() =>
    this.database.prepare<{ spent: number }, [string, string]>("SELECT spent FROM api_key_monthly_usage WHERE key_id = ?1 AND month = ?2"),
  );

  private readonly keyLines = new Map<string, string>();
  private readonly keyLineById = this.lazy(() =>
    this.database.prepare<{ line: string }, [string]>("SELECT coalesce(line_id, id) AS line FROM api_keys WHERE id = ?1"),
  );

  // Invariant: a monthly credit limit fences a key's line (the key and its rotations): the line's
  // spending is one counter, its requests in flight hold against it, and its limit is the live key's,
  // so neither a rotation nor a request of the old key still running frees room under the limit.
  /** The line of a key: fixed when the key is made, so it is cached for good. */
  private keyLineOf(keyId: string): string {
    let line = this.keyLines.get(keyId);
    if (line === undefined) {
      line = this.keyLineById().get(keyId)?.line ?? keyId;
      this.keyLines.set(keyId, line);
    }
    return line;
  }

  /** The line's monthly credit limit as stored now (the caches are exact: any change clears them). */
  private keyLimitOf(line: string): number | null {
    let limit = this.keyLimitCache.get(line);
    if (limit === undefined) {
      limit = this.keyLimitById().get(line)?.limit ?? null;
      this.keyLimitCache.set(line, limit);
    }
    return limit;
  }

  /** What the line's committed debits of `month` add up to. */
  private keySpentIn(line: string, month: string): number {
    let cached = this.keySpentCache.get(line);
    if (cached === undefined || cached.month !== month) {
      cached = { month, spent: this.keySpentById().get(line, month)?.spent ?? 0 };
      this.keySpentCache.set(line, cached);
    }
    return cached.spent;
  }

  private changeKeyHold(keyId: string | null, delta: number): void {
    if (keyId === null) return;
    const line = this.keyLineOf(keyId);
    const held = (this.keyHolds.get(line) ?? 0) + delta;
    if (held === 0) this.keyHolds.delete(line);
    else this.keyHolds.set(line, held);
  }

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

  // Invariant: the credits held never exceed a bucket's remaining credits, and a key's spending in
  // the month plus what its requests hold never exceed its monthly limit. Both are checked and the
  // holds taken in one synchronous step, so no other request runs in between.
  async reserveCredits(input: Parameters<Store["reserveCredits"]>[0]): Promise<Reservation> {
    const buckets = this.spendableBuckets(input.organizationId, input.now);
    const available = buckets.reduce((sum, bucket) => sum + bucket.free, 0);
    if (available < input.amount) return { ok: false, available };
    const keyLine = input.keyId === null ? null : this.keyLineOf(input.keyId);
    const keyLimit = keyLine === null ? null : this.keyLimitOf(keyLine);
    if (keyLimit !== null && this.keySpentIn(keyLine!, utcMonth(input.now)) + (this.keyHolds.get(keyLine!) ?? 0) + input.amount > keyLimit) {
      return { ok: false, available, keyLimit };
    }
    const allocations = takeInOrder(buckets, input.amount);
    for (const allocation of allocations) this.changeHold(allocation.bucketId, allocation.amount);
    const reservationId = newId("res", input.now);
    this.heldReservations.set(reservationId, { organizationId: input.organizationId, amount: input.amount, allocations, keyId: input.keyId, requestId: input.requestId });
    this.changeKeyHold(input.keyId, input.amount);
    return { ok: true, reservationId, available: available - input.amount };
  }

  private pendingCommits: Array<{ reservationId: string; usage: UsageRecord; done: (error: unknown) => void }> = [];

  /**
   * Group commit: the debits of every request that reaches commit in the same event-loop turn are
   * written in one transaction, and each request is answered only after that transaction commits.
   */
  commitReservation(reservationId: string, usage: UsageRecord): Promise<boolean> {
    if (!this.heldReservations.has(reservationId)) return Promise.resolve(false);
    return new Promise<boolean>((resolve, reject) => {
      if (this.pendingCommits.length === 0) setImmediate(() => void this.flushCommits());
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
    this.db.select({ ledgerBalance: organizations.ledgerBalance, lowCreditThreshold: organizations.lowCreditThreshold }).from(organizations).where(eq(organizations.id, sql.placeholder("organizationId"))).prepare(),
  );

  // The usage row of every billed look-up: bun:sqlite's own prepared statement, without drizzle's
  // per-call placeholder mapping (this runs once per billed request).
  private readonly insertUsage = this.lazy(() =>
    this.database.prepare<unknown, [string, string, number, number, string | null, string | null, string, string | null, string, number]>(
      `INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
       VALUES (?1, ?2, 'usage', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)`,
    ),
  );

  private readonly addKeySpending = this.lazy(() =>
    this.database.prepare<unknown, [string, string, number]>(
      `INSERT INTO api_key_monthly_usage (key_id, month, spent) VALUES (?1, ?2, ?3)
       ON CONFLICT (key_id, month) DO UPDATE SET spent = spent + excluded.spent`,
    ),
  );

  // Invariant: the buckets' debits, the usage rows, the running ledger sum and the keys' monthly
  // spending of a batch commit together, so each request is billed exactly once, balanceAfter
  // follows the ledger order and a key's spending is what its usage rows add up to.
  private debitBatch(items: Array<{ reservationId: string; usage: UsageRecord }>): void {
    const keySpending = new Map<string, { keyId: string; month: string; amount: number }>();
    const bucketDebits = new Map<string, number>();
    const ledgerBalances = new Map<string, number>();
    // Per organization: its sum before the batch, its low-credit threshold and the time of its last debit, for the balance events.
    const ledgerBefore = new Map<string, { before: number; threshold: number | null; now: number }>();
    for (const { reservationId, usage } of items) {
      const reservation = this.heldReservations.get(reservationId)!;
      for (const allocation of reservation.allocations) bucketDebits.set(allocation.bucketId, (bucketDebits.get(allocation.bucketId) ?? 0) + allocation.amount);
      let start = ledgerBefore.get(reservation.organizationId);
      if (start === undefined) {
        const row = this.ledgerBalanceOf().get({ organizationId: reservation.organizationId })!;
        start = { before: row.ledgerBalance, threshold: row.lowCreditThreshold, now: usage.now };
        ledgerBefore.set(reservation.organizationId, start);
      }
      start.now = Math.max(start.now, usage.now);
      const balanceAfter = (ledgerBalances.get(reservation.organizationId) ?? start.before) - reservation.amount;
      ledgerBalances.set(reservation.organizationId, balanceAfter);
      this.insertUsage().run(
        newId("txn", usage.now),
        reservation.organizationId,
        -reservation.amount,
        balanceAfter,
        reservation.allocations.length === 1 ? reservation.allocations[0]!.bucketId : null,
        reservation.keyId,
        reservation.requestId,
        usage.gtin,
        usage.description,
        usage.now,
      );
      if (usage.idempotency !== undefined) this.idempotency.completeIdempotencyRecord(usage.idempotency);
      if (reservation.keyId !== null) {
        const month = utcMonth(usage.now);
        const keyId = this.keyLineOf(reservation.keyId);
        const spending = keySpending.get(`${keyId} ${month}`);
        if (spending === undefined) keySpending.set(`${keyId} ${month}`, { keyId, month, amount: reservation.amount });
        else spending.amount += reservation.amount;
      }
    }
    for (const { keyId, month, amount } of keySpending.values()) this.addKeySpending().run(keyId, month, amount);
    for (const [bucketId, amount] of bucketDebits) this.adjustBucket().run({ bucketId, delta: -amount });
    for (const [organizationId, ledgerBalance] of ledgerBalances) {
      this.setLedgerBalance().run({ organizationId, ledgerBalance });
      const start = ledgerBefore.get(organizationId)!;
      this.emitBalanceEvents(organizationId, start.before, ledgerBalance, start.threshold, start.now);
    }
    this.countBilledUsage(items);
  }

  /** The billed look-ups of a debit batch into the hourly counters, one upsert per row touched, in the debit's transaction. */
  private countBilledUsage(items: Array<{ reservationId: string; usage: UsageRecord }>): void {
    const counts = new Map<string, { organizationId: string; hourStart: number; keyId: string; requests: number; credits: number }>();
    for (const { reservationId, usage } of items) {
      const reservation = this.heldReservations.get(reservationId)!;
      const hourStart = hourStartOf(usage.now);
      const keyId = reservation.keyId ?? "";
      const id = `${reservation.organizationId}\u0000${hourStart}\u0000${keyId}`;
      const count = counts.get(id);
      // A batch counts its billed GTINs, as single look-ups count themselves.
      const requests = usage.items ?? 1;
      if (count === undefined) counts.set(id, { organizationId: reservation.organizationId, hourStart, keyId, requests, credits: reservation.amount });
      else {
        count.requests += requests;
        count.credits += reservation.amount;
      }
    }
    for (const count of counts.values()) this.usage.addUsageCount(count.organizationId, count.hourStart, count.keyId, BILLED_REASON, count.requests, count.credits);
  }

  private async flushCommits(): Promise<void> {
    // One reservation committed twice at once is debited once: the later calls answer false.
    const seen = new Set<string>();
    const batch = this.pendingCommits.filter((item) => !seen.has(item.reservationId) && seen.add(item.reservationId));
    const kept = new Set(batch);
    const repeated = this.pendingCommits.filter((item) => !kept.has(item));
    this.pendingCommits = [];
    for (const item of repeated) item.done(false);
    const debit = async (items: typeof batch) => {
      // The sweep of a crashed request's holds cannot happen here, but a release can: debit only what is still held.
      const held = items.filter((item) => this.heldReservations.has(item.reservationId));
      for (const item of items) if (!held.includes(item)) item.done(false);
      if (held.length === 0) return;
      // A request whose Idempotency-Key claim was taken over meanwhile is not billed (the claim fences the debit).
      const owned = await whileLocked(() => {
        const owning = this.writeKeepingCaches(() => {
          const owning = held.filter((item) => this.idempotency.ownsClaim(item.usage));
          this.debitBatch(owning);
          return owning;
        });
        // In the same synchronous step as the commit: no request may see the debit in the database
        // while its hold still counts (it would count twice against the balance or the key's limit).
        for (const item of owning) {
          this.debitCachedBuckets(item.reservationId);
          this.spendCachedKey(item.reservationId, item.usage.now);
          this.dropReservation(item.reservationId);
        }
        return owning;
      });
      for (const item of held) if (!owned.includes(item)) item.done(false);
      for (const item of owned) item.done(undefined);
    };
    try {
      await debit(batch);
    } catch (error) {
      // A lock that outlasted LOCK_WAIT_MS fails the whole batch; any other error is one bad debit,
      // which must not fail its neighbours: retry each alone and fail only the culprit.
      for (const item of batch.filter((candidate) => this.heldReservations.has(candidate.reservationId))) {
        try {
          if (isLocked(error)) throw error;
          await debit([item]);
        } catch (itemError) {
          // Not debited: the caller gives the held credits back (lookUpPrice releases on any failed commit).
          item.done(itemError);
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

  /** After a committed debit, the key's cached monthly spending takes it too. */
  private spendCachedKey(reservationId: string, now: number): void {
    const reservation = this.heldReservations.get(reservationId)!;
    if (reservation.keyId === null) return;
    const line = this.keyLineOf(reservation.keyId);
    const cached = this.keySpentCache.get(line);
    if (cached === undefined) return;
    if (cached.month === utcMonth(now)) cached.spent += reservation.amount;
    else this.keySpentCache.delete(line);
  }

  private dropReservation(reservationId: string): boolean {
    const reservation = this.heldReservations.get(reservationId);
    if (reservation === undefined) return false;
    this.heldReservations.delete(reservationId);
    for (const allocation of reservation.allocations) this.changeHold(allocation.bucketId, -allocation.amount);
    this.changeKeyHold(reservation.keyId, -reservation.amount);
    return true;
  }

  async releaseReservation(reservationId: string, now: number): Promise<boolean> {
    const reservation = this.heldReservations.get(reservationId);
    if (reservation === undefined) return false;
    // Paid before the holds drop, in the same synchronous step, so no request can spend what a refund is owed.
    if (reservation.allocations.some((allocation) => this.clawbackOwedOf().get(allocation.bucketId)!.owed > 0)) {
      this.write(() => this.payClawbacks(reservation.organizationId, reservation.allocations, now));
    }
    return this.dropReservation(reservationId);
  }

  async shrinkReservation(reservationId: string, keep: number, now: number): Promise<boolean> {
    const reservation = this.heldReservations.get(reservationId);
    if (reservation === undefined) return false;
    if (!(keep > 0 && keep < reservation.amount)) throw new RangeError(`cannot keep ${keep} of a reservation of ${reservation.amount}`);
    const { kept, given } = splitAllocations(reservation.allocations, keep);
    // As in releaseReservation: refunds are paid before the holds drop, in the same synchronous step.
    if (given.some((allocation) => this.clawbackOwedOf().get(allocation.bucketId)!.owed > 0)) {
      this.write(() => this.payClawbacks(reservation.organizationId, given, now));
    }
    for (const allocation of given) this.changeHold(allocation.bucketId, -allocation.amount);
    this.changeKeyHold(reservation.keyId, keep - reservation.amount);
    reservation.allocations = kept;
    reservation.amount = keep;
    return true;
  }

  // Read at every release of a hold (each stale-data answer): bun:sqlite's own statement, without
  // drizzle's per-call mapping, which cost that answer about 15 % of its CPU.
  private readonly clawbackOwedOf = this.lazy(() =>
    this.database.prepare<{ owed: number }, [string]>("SELECT clawback_owed AS owed FROM credit_buckets WHERE id = ?1"),
  );

  private readonly payClawback = this.lazy(() =>
    this.db
      .update(creditBuckets)
      .set({ remaining: sql`${creditBuckets.remaining} - ${sql.placeholder("paid")}`, clawbackOwed: sql`${creditBuckets.clawbackOwed} - ${sql.placeholder("paid")}` })
      .where(eq(creditBuckets.id, sql.placeholder("bucketId")))
      .prepare(),
  );

  // Invariant: a refund's claim on held credits is paid from exactly what comes back to the bucket,
  // with one `refund` row in the same transaction; credits a request committed are usage, not owed.
  private payClawbacks(organizationId: string, givenBack: Array<{ bucketId: string; amount: number }>, now: number): void {
    const paid: Array<{ bucketId: string; amount: number }> = [];
    for (const { bucketId, amount } of givenBack) {
      const pay = Math.min(this.clawbackOwedOf().get(bucketId)!.owed, amount);
      if (pay === 0) continue;
      this.payClawback().run({ bucketId, paid: pay });
      paid.push({ bucketId, amount: pay });
    }
    const total = paid.reduce((sum, item) => sum + item.amount, 0);
    if (total === 0) return;
    const bucketId = paid.length === 1 ? paid[0]!.bucketId : null;
    this.appendLedger({ organizationId, type: "refund", amount: -total, bucketId, description: "Refund: credits a request in flight gave back", createdAt: now });
  }

  async recoverInFlightWork(now: number): Promise<void> {
    this.write((tx) => {
      tx.delete(idempotencyRecords).where(eq(idempotencyRecords.status, "in-progress")).run();
      // The holds of the previous process died with it: what a refund was owed from them is back in its bucket.
      const owing = tx
        .select({ id: creditBuckets.id, organizationId: creditBuckets.organizationId, remaining: creditBuckets.remaining })
        .from(creditBuckets)
        .where(gt(creditBuckets.clawbackOwed, 0))
        .all();
      for (const bucket of owing) this.payClawbacks(bucket.organizationId, [{ bucketId: bucket.id, amount: bucket.remaining }], now);
      tx.update(creditBuckets).set({ clawbackOwed: 0 }).where(gt(creditBuckets.clawbackOwed, 0)).run();
    });
  }

  /** Holds are in memory and die with the process, so nothing is ever left to sweep. */
  async releaseStaleReservations(_now: number): Promise<number> {
    return 0;
  }

  async availableCredits(organizationId: string, now: number): Promise<number> {
    return this.spendableBuckets(organizationId, now).reduce((sum, bucket) => sum + bucket.free, 0);
  }

  // A pure read: expired credits are written off by the expiry job (expireBuckets), never by a
  // reader, so the operator CLI can read beside a serving process without touching its credits.
  async getBalance(organizationId: string, now: number): Promise<Balance> {
    // Spent, expired, written-off and clawed-back buckets are history: the ledger tells it, the balance does not list them.
    const buckets = this.db
      .select(bucketColumns)
      .from(creditBuckets)
      .where(and(eq(creditBuckets.organizationId, organizationId), gt(creditBuckets.remaining, 0), or(isNull(creditBuckets.expiresAt), gt(creditBuckets.expiresAt, now))))
      .orderBy(...FEFO)
      .all()
      .map((bucket) => ({ ...bucket, remaining: bucket.remaining - (this.holds.get(bucket.id) ?? 0) }));
    let reserved = 0;
    for (const reservation of this.heldReservations.values()) if (reservation.organizationId === organizationId) reserved += reservation.amount;
    const available = buckets.reduce((sum, b) => sum + b.remaining, 0);
    return { available, reserved, buckets };
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

  // --- billing ---

  priceStates(query: HistoryQuery) {
    return this.history.priceStates(query);
  }

  priceDays(query: HistoryQuery) {
    return this.history.priceDays(query);
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