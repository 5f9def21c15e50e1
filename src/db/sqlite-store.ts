import { checkpointOnWorker } from "./sqlite-checkpointer";
import { Database } from "bun:sqlite";
import { type BunSQLiteDatabase, drizzle } from "drizzle-orm/bun-sqlite";
import { decodeLedgerCursor, encodeLedgerCursor } from "./cursor";
import { applySQLiteMigrations } from "./migrate";
import { isLocked, whileLocked } from "./sqlite-locked";
import { SQLiteWebhooks } from "./webhooks/sqlite";
import { grant } from "./ledger/operations";
import { type LedgerPort, runSync } from "./ledger/port";
import { sqliteLedgerPort } from "./ledger/sqlite";
import { SQLiteHolds } from "./ledger/sqlite-holds";
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
import type { Bucket, KeyCredential, LedgerTransaction, OfferRecord, Page, ProductRecord, Store, TransactionQuery, TransactionType } from "./store";

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

/**
 * How long one attempt may block the event loop in SQLite's own busy handler. bun:sqlite is
 * synchronous: a long busy_timeout would freeze every request and timer while another process
 * (an operator's import) holds the write lock.
 */
const BUSY_TIMEOUT_MS = 5;

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
    this.watches = new SQLiteWatches(database, (organizationId, now) => this.holds.spendableBuckets(organizationId, now));
    this.history = new SQLiteHistory(database);
    this.usage = new SQLiteUsage(database, (work) => this.writeKeepingCaches(work));
    this.idempotency = new SQLiteIdempotency(this.db, (work) => this.write(work));
    this.holds = new SQLiteHolds(database, this.db, {
      write: (work) => this.write(work),
      writeKeepingCaches: (work) => this.writeKeepingCaches(work),
      syncCaches: (scope) => this.syncCaches(scope),
      bucketCache: this.bucketCache,
      keyLimitCache: this.keyLimitCache,
      keySpentCache: this.keySpentCache,
      idempotency: this.idempotency,
      emit: (events) => this.webhooks.emit(events),
    });
    this.catalog = new SQLiteCatalog(database, this.db, {
      write: (work) => this.write(work),
      syncCaches: () => this.syncCaches(),
      productCache: this.productCache,
      history: this.history,
    });
    this.keys = new SQLiteKeys(this.db, {
      write: (work) => this.write(work),
      writeKeepingCaches: (work) => this.writeKeepingCaches(work),
      syncCaches: (scope) => this.syncCaches(scope),
      keyCache: this.keyCache,
      keyLineOf: (keyId) => this.holds.keyLineOf(keyId),
      emit: (events) => this.webhooks.emit(events),
    });
    this.ledger = sqliteLedgerPort({
      db: this.db,
      appendLedger: (entry) => this.holds.appendLedger(entry),
      emit: (events) => this.webhooks.emit(events),
      writeOffExpired: (organizationId, now) => void this.holds.writeOffExpired(organizationId, now),
      heldIn: (bucketId) => this.holds.heldIn(bucketId),
    });
    this.feeds = new SQLiteFeeds(database, (work) => this.write(work));
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

  /** Credits held by requests in flight, their debits, releases and sweeps, and the ledger's running sum. */
  private readonly holds: SQLiteHolds;
  reserveCredits: Store["reserveCredits"] = async (input) => this.holds.reserveCredits(input);
  // Not async, and not retried while locked (retryingWhileLocked): the group commit retries its debits itself.
  commitReservation: Store["commitReservation"] = (reservationId, usage) => this.holds.commitReservation(reservationId, usage);
  releaseReservation: Store["releaseReservation"] = async (reservationId, now) => this.holds.releaseReservation(reservationId, now);
  shrinkReservation: Store["shrinkReservation"] = async (reservationId, keep, now) => this.holds.shrinkReservation(reservationId, keep, now);
  recoverInFlightWork: Store["recoverInFlightWork"] = async (now) => this.holds.recoverInFlightWork(now);
  releaseStaleReservations: Store["releaseStaleReservations"] = async (now) => this.holds.releaseStaleReservations(now);
  availableCredits: Store["availableCredits"] = async (organizationId, now) => this.holds.availableCredits(organizationId, now);
  getBalance: Store["getBalance"] = async (organizationId, now) => this.holds.getBalance(organizationId, now);
  monthlySpending: Store["monthlySpending"] = async (keyIds, month) => this.holds.monthlySpending(keyIds, month);

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
  cancelSubscription: Store["cancelSubscription"] = async (organizationId, subscriptionId, now) =>
    this.billing.cancelSubscription(organizationId, subscriptionId, now);
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

  startBackgroundCheckpoints(): { stop(): Promise<void> } {
    return checkpointOnWorker(this.database);
  }

  /** The ledger port on this connection, for the money operations (ledger/operations.ts). */
  private readonly ledger: LedgerPort;

  async grantCredits(input: Parameters<Store["grantCredits"]>[0]): Promise<Bucket> {
    const { organizationId, now, ...credits } = input;
    return this.write(() => runSync(grant(organizationId, credits, now), this.ledger));
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
    const params: TransactionParams = {
      organizationId,
      beforeAt: before.createdAt,
      beforeId: before.id,
      from: query.from ?? Number.MIN_SAFE_INTEGER,
      limit: query.limit + 1,
    };
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
    return this.write(() => this.holds.writeOffExpired(null, now));
  }

  /** Prepares a statement on first use, so the statement is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

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
