import { and, desc, eq, gt, gte, inArray, isNull, lte, or, sql } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import type postgres from "postgres";
import { utcMonth } from "../lib/clock";
import { newId } from "../lib/ids";
import { decodeLedgerCursor, encodeLedgerCursor } from "./cursor";
import { applyPostgresMigrations } from "./migrate";
import { fefoOrder } from "./ledger/allocation";
import { grant } from "./ledger/operations";
import { type AsyncLedgerPort, type LedgerStep, runAsync } from "./ledger/port";
import { postgresLedgerPort } from "./ledger/postgres";
import { type DebitPlan, type HeldDebit, planHeldDebits } from "./ledger/debit-plan";
import { isConnectionLost } from "./database-errors";
import { isOverdrawRefused, retrying } from "./postgres-retry";
import { openDebitConnection, openPostgresClient } from "./postgres-client";
import { emitPostgres, PostgresWebhooks } from "./webhooks/postgres";
import { balanceEventData, balanceEventTypes } from "./webhooks/records";
import { PostgresBilling } from "./billing/postgres";
import { PostgresCatalog } from "./catalog/postgres";
import { PostgresFeeds } from "./feeds/postgres";
import { PostgresIdempotency } from "./idempotency/postgres";
import { PostgresIdentity } from "./identity/postgres";
import { CAPPED_KEY, PostgresKeys, SPENDABLE_BUCKETS } from "./keys/postgres";
import { PostgresUsage } from "./usage/postgres";
import { PostgresWatches } from "./watches/postgres";
import { PostgresHistory } from "./history/postgres";
import type { HistoryQuery } from "./history/records";
import * as schema from "./schema/postgres";
import { BILLED_REASON, CreditsSpentMeanwhile, DAY_MS, DebitInDoubt, HOUR_MS, splitAllocations, STALE_RESERVATION_MS } from "./store";
import type {
  Balance,
  BalanceAtKeyRead,
  Bucket,
  LedgerTransaction,
  Page,
  Reservation,
  Store,
  TransactionQuery,
  UsageRecord,
} from "./store";

const { organizations, apiKeys, apiKeyMonthlyUsage, creditBuckets, creditTransactions, reservations } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

// The PostgreSQL store, for several `serve` instances on one database. Unlike the SQLite store it
// keeps nothing in memory between calls: every instance sees every other one's writes on its next
// query (a key revoked through one is refused by all), and every rule that must hold across
// instances is a row lock or a conditional write inside one transaction, never a read followed by
// a write in the app.

const bucketColumns = {
  id: creditBuckets.id,
  organizationId: creditBuckets.organizationId,
  source: creditBuckets.source,
  granted: creditBuckets.granted,
  remaining: creditBuckets.remaining,
  expiresAt: creditBuckets.expiresAt,
  createdAt: creditBuckets.createdAt,
};

// Soonest-expiring first; buckets that never expire last; then oldest first (reserveCredits
// spells the same order in SQL, and locks buckets in it).
const FEFO = [sql.raw(fefoOrder("credit_buckets"))] as const;
/**
 * The same order inside postgres.js statements: a fragment of constant text (a template call with
 * no parameters, as `sql` written inline would make), so each statement's text and plan stay one.
 */
function fefo(sql: postgres.Sql | postgres.TransactionSql, table?: string): postgres.PendingQuery<postgres.Row[]> {
  const text = fefoOrder(table);
  return sql(Object.assign([text], { raw: [text] }) as unknown as TemplateStringsArray);
}

/** Debits per group-commit statement at most; more wait for the next one. */
const COMMIT_BATCH_LIMIT = 500;

/** Credits a request of an uncapped key holds in this instance's memory until its debit takes them (see reserveCredits). */
interface HeldCredits {
  organizationId: string;
  amount: number;
  keyId: string | null;
  requestId: string;
  /** While its debit is being written. */
  committing: boolean;
}

/** A commit waiting for the group commit; its ledger row's id is fixed once, so a retried debit is recognized. */
interface PendingDebit {
  reservationId: string;
  usage: UsageRecord;
  held: HeldCredits | null;
  transactionId: string;
  resolve: (committed: boolean) => void;
  reject: (error: unknown) => void;
}

/** What the debit statement did with one commit; absent: nothing (the reservation was gone, or its claim taken over). */
type DebitOutcome = { outcome: "committed" } | { outcome: "spent"; available: number };

export class PostgresStore implements Store {
  readonly dialect = "postgres";
  private readonly db: DB;

  private readonly history: PostgresHistory;

  /**
   * `debitConnection` runs the group commit's statements (one batch in flight at a time) apart from
   * the pool, so look-ups' reads never queue behind a debit statement waiting for another instance's
   * row locks (postgres.js pipelines a query onto a busy connection when the pool is used up). It
   * must be a pool of one connection: debitBatch sends its BEGIN … COMMIT as separate queries.
   */
  constructor(
    private readonly client: postgres.Sql,
    private readonly debitConnection: postgres.Sql,
  ) {
    this.db = drizzle(client, { schema });
    this.webhooks = new PostgresWebhooks(client);
    this.watches = new PostgresWatches(client);
    this.history = new PostgresHistory(client);
    this.usage = new PostgresUsage(client);
    this.catalog = new PostgresCatalog(client, this.db, { transaction: (work, config) => this.transaction(work, config), history: this.history });
    this.feeds = new PostgresFeeds(this.db, (work, config) => this.transaction(work, config));
    this.idempotency = new PostgresIdempotency(client, this.db, () => this.databaseNow());
    this.identity = new PostgresIdentity(this.db, {
      transaction: (work, config) => this.transaction(work, config),
      ledger: (tx) => this.ledger(tx),
    });
    this.keys = new PostgresKeys(this.db, {
      transaction: (work, config) => this.transaction(work, config),
      seeCatalogVersion: (version) => this.catalog.seeCatalogVersion(version),
    });
    this.billing = new PostgresBilling(this.db, {
      transaction: (work, config) => this.transaction(work, config),
      money: (operation) => this.money(operation),
      ledger: (tx) => this.ledger(tx),
    });
  }

  private readonly identity: PostgresIdentity;
  createOrganization: Store["createOrganization"] = (input) => this.identity.createOrganization(input);
  getOrganization: Store["getOrganization"] = (id) => this.identity.getOrganization(id);
  listOrganizations: Store["listOrganizations"] = () => this.identity.listOrganizations();
  ensureSystemUser: Store["ensureSystemUser"] = (now) => this.identity.ensureSystemUser(now);
  findSessionWithUser: Store["findSessionWithUser"] = (sessionId) => this.identity.findSessionWithUser(sessionId);
  signInSubject: Store["signInSubject"] = (input) => this.identity.signInSubject(input);
  getUserByEmail: Store["getUserByEmail"] = (email) => this.identity.getUserByEmail(email);
  insertSession: Store["insertSession"] = (session) => this.identity.insertSession(session);
  rotateSessionToken: Store["rotateSessionToken"] = (input) => this.identity.rotateSessionToken(input);
  revokeSession: Store["revokeSession"] = (id, now) => this.identity.revokeSession(id, now);
  deleteDeadSessions: Store["deleteDeadSessions"] = (now) => this.identity.deleteDeadSessions(now);
  upsertInvitation: Store["upsertInvitation"] = (invitation) => this.identity.upsertInvitation(invitation);

  private readonly idempotency: PostgresIdempotency;
  claimIdempotencyKey: Store["claimIdempotencyKey"] = (input) => this.idempotency.claimIdempotencyKey(input);
  completeIdempotencyKey: Store["completeIdempotencyKey"] = (input) => this.idempotency.completeIdempotencyKey(input);
  releaseIdempotencyKey: Store["releaseIdempotencyKey"] = (input) => this.idempotency.releaseIdempotencyKey(input);
  deleteExpiredIdempotencyRecords: Store["deleteExpiredIdempotencyRecords"] = (now) => this.idempotency.deleteExpiredIdempotencyRecords(now);

  private readonly feeds: PostgresFeeds;
  createFeedSource: Store["createFeedSource"] = (source) => this.feeds.createFeedSource(source);
  getFeedSource: Store["getFeedSource"] = (idOrName) => this.feeds.getFeedSource(idOrName);
  listFeedSources: Store["listFeedSources"] = () => this.feeds.listFeedSources();
  setFeedSourceTrust: Store["setFeedSourceTrust"] = (id, trust) => this.feeds.setFeedSourceTrust(id, trust);
  removeFeedSource: Store["removeFeedSource"] = (id, now) => this.feeds.removeFeedSource(id, now);
  claimDueFeedSources: Store["claimDueFeedSources"] = (input) => this.feeds.claimDueFeedSources(input);
  claimFeedSource: Store["claimFeedSource"] = (input) => this.feeds.claimFeedSource(input);
  finishFeedRun: Store["finishFeedRun"] = (input) => this.feeds.finishFeedRun(input);
  releaseFeedLease: Store["releaseFeedLease"] = (sourceId, owner) => this.feeds.releaseFeedLease(sourceId, owner);
  renewFeedLease: Store["renewFeedLease"] = (input) => this.feeds.renewFeedLease(input);
  listFeedRuns: Store["listFeedRuns"] = (sourceId, query) => this.feeds.listFeedRuns(sourceId, query);
  hasImportedFeedFile: Store["hasImportedFeedFile"] = (sourceId, file) => this.feeds.hasImportedFeedFile(sourceId, file);
  insertFeedToken: Store["insertFeedToken"] = (token) => this.feeds.insertFeedToken(token);
  findFeedTokenCredential: Store["findFeedTokenCredential"] = (id) => this.feeds.findFeedTokenCredential(id);
  listFeedTokens: Store["listFeedTokens"] = () => this.feeds.listFeedTokens();
  revokeFeedToken: Store["revokeFeedToken"] = (id, now) => this.feeds.revokeFeedToken(id, now);
  feedFreshness: Store["feedFreshness"] = (freshSince) => this.feeds.feedFreshness(freshSince);

  private readonly keys: PostgresKeys;
  insertApiKey: Store["insertApiKey"] = (key) => this.keys.insertApiKey(key);
  findKeyCredential: Store["findKeyCredential"] = (keyHash, now) => this.keys.findKeyCredential(keyHash, now);
  getApiKey: Store["getApiKey"] = (organizationId, id) => this.keys.getApiKey(organizationId, id);
  getApiKeyById: Store["getApiKeyById"] = (id) => this.keys.getApiKeyById(id);
  listApiKeys: Store["listApiKeys"] = (organizationId, query) => this.keys.listApiKeys(organizationId, query);
  revokeApiKey: Store["revokeApiKey"] = (organizationId, id, now) => this.keys.revokeApiKey(organizationId, id, now);
  rotateApiKey: Store["rotateApiKey"] = (organizationId, id, replacement) => this.keys.rotateApiKey(organizationId, id, replacement);
  updateApiKeyControls: Store["updateApiKeyControls"] = (organizationId, id, controls) => this.keys.updateApiKeyControls(organizationId, id, controls);
  touchApiKeys: Store["touchApiKeys"] = (lastUsed) => this.keys.touchApiKeys(lastUsed);

  private readonly watches: PostgresWatches;
  createWatch: Store["createWatch"] = (watch, rules) => this.watches.create(watch, rules);
  getWatch: Store["getWatch"] = (organizationId, id) => this.watches.get(organizationId, id);
  listWatches: Store["listWatches"] = (organizationId, query) => this.watches.list(organizationId, query);
  deleteWatch: Store["deleteWatch"] = (organizationId, id) => this.watches.delete(organizationId, id);
  runWatchEvaluation: Store["runWatchEvaluation"] = (input) => this.watches.run(input);

  private readonly catalog: PostgresCatalog;
  applyFeedRecords: Store["applyFeedRecords"] = (records, now, options) => this.catalog.applyFeedRecords(records, now, options);
  findProductWithOffers: Store["findProductWithOffers"] = (gtin) => this.catalog.findProductWithOffers(gtin);
  findProductsWithOffers: Store["findProductsWithOffers"] = (gtins) => this.catalog.findProductsWithOffers(gtins);
  refreshCatalogStatistics: Store["refreshCatalogStatistics"] = () => this.catalog.refreshCatalogStatistics();
  countProducts: Store["countProducts"] = () => this.catalog.countProducts();
  listPriceHistory: Store["listPriceHistory"] = (gtin, merchantId) => this.catalog.listPriceHistory(gtin, merchantId);
  prunePriceHistory: Store["prunePriceHistory"] = (before) => this.catalog.prunePriceHistory(before);

  private readonly usage: PostgresUsage;
  addUsageCounts: Store["addUsageCounts"] = (counts) => this.usage.addUsageCounts(counts);
  usageTotals: Store["usageTotals"] = (organizationId, query) => this.usage.usageTotals(organizationId, query);

  private readonly webhooks: PostgresWebhooks;
  createWebhookEndpoint: Store["createWebhookEndpoint"] = (endpoint) => this.webhooks.create(endpoint);
  getWebhookEndpoint: Store["getWebhookEndpoint"] = (organizationId, id) => this.webhooks.get(organizationId, id);
  listWebhookEndpoints: Store["listWebhookEndpoints"] = (organizationId, query) => this.webhooks.list(organizationId, query);
  deleteWebhookEndpoint: Store["deleteWebhookEndpoint"] = (organizationId, id) => this.webhooks.delete(organizationId, id);
  rotateWebhookSecret: Store["rotateWebhookSecret"] = (organizationId, id, input) => this.webhooks.rotateSecret(organizationId, id, input);
  enableWebhookEndpoint: Store["enableWebhookEndpoint"] = (organizationId, id) => this.webhooks.enable(organizationId, id);
  sendTestWebhookEvent: Store["sendTestWebhookEvent"] = (organizationId, endpointId, input) => this.webhooks.sendTest(organizationId, endpointId, input);
  listWebhookDeliveries: Store["listWebhookDeliveries"] = (endpointId, query) => this.webhooks.listDeliveries(endpointId, query);
  getLowCreditThreshold: Store["getLowCreditThreshold"] = (organizationId) => this.webhooks.lowCreditThreshold(organizationId);
  setLowCreditThreshold: Store["setLowCreditThreshold"] = (organizationId, threshold) => this.webhooks.setLowCreditThreshold(organizationId, threshold);
  claimWebhookDeliveries: Store["claimWebhookDeliveries"] = (input) => this.webhooks.claim(input);
  finishWebhookDelivery: Store["finishWebhookDelivery"] = (attempt) => this.webhooks.finish(attempt);
  dropWebhookBacklogOverflow: Store["dropWebhookBacklogOverflow"] = () => this.webhooks.dropBacklogOverflow();
  private readonly billing: PostgresBilling;
  createOrder: Store["createOrder"] = (order) => this.billing.createOrder(order);
  getOrder: Store["getOrder"] = (id) => this.billing.getOrder(id);
  findOrderByProviderRef: Store["findOrderByProviderRef"] = (providerRef) => this.billing.findOrderByProviderRef(providerRef);
  listOrders: Store["listOrders"] = (query) => this.billing.listOrders(query);
  completeOrder: Store["completeOrder"] = (input) => this.billing.completeOrder(input);
  applyPaidGrant: Store["applyPaidGrant"] = (input) => this.billing.applyPaidGrant(input);
  refundPayment: Store["refundPayment"] = (input) => this.billing.refundPayment(input);
  disputePayment: Store["disputePayment"] = (input) => this.billing.disputePayment(input);
  hasPayment: Store["hasPayment"] = (ref) => this.billing.hasPayment(ref);
  recordProviderEvent: Store["recordProviderEvent"] = (event, now) => this.billing.recordProviderEvent(event, now);
  listInvoices: Store["listInvoices"] = (organizationId, query) => this.billing.listInvoices(organizationId, query);
  getInvoice: Store["getInvoice"] = (id) => this.billing.getInvoice(id);
  listSubscriptions: Store["listSubscriptions"] = (organizationId) => this.billing.listSubscriptions(organizationId);
  listDueSubscriptions: Store["listDueSubscriptions"] = (now, limit) => this.billing.listDueSubscriptions(now, limit);
  renewSubscription: Store["renewSubscription"] = (input) => this.billing.renewSubscription(input);
  cancelSubscription: Store["cancelSubscription"] = (organizationId, subscriptionId, now) => this.billing.cancelSubscription(organizationId, subscriptionId, now);
  getStripeCustomerId: Store["getStripeCustomerId"] = (organizationId) => this.billing.getStripeCustomerId(organizationId);
  setStripeCustomerId: Store["setStripeCustomerId"] = (organizationId, customerId) => this.billing.setStripeCustomerId(organizationId, customerId);
  findOrganizationByStripeCustomer: Store["findOrganizationByStripeCustomer"] = (customerId) => this.billing.findOrganizationByStripeCustomer(customerId);

  static async open(databaseUrl: string): Promise<PostgresStore> {
    await applyPostgresMigrations(databaseUrl);
    return PostgresStore.connect(databaseUrl);
  }

  /** The store on a migrated database: the pool (`?max=N`), and one connection of its own for the group commit. */
  static connect(databaseUrl: string): PostgresStore {
    return new PostgresStore(openPostgresClient(databaseUrl), openDebitConnection(databaseUrl));
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
    if (this.debitConnection !== this.client) await this.debitConnection.end({ timeout: 5 });
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

  async monthlySpending(keyIds: string[], month: string): Promise<Map<string, number>> {
    if (keyIds.length === 0) return new Map();
    const rows = await this.db
      .select({ keyId: apiKeys.id, spent: apiKeyMonthlyUsage.spent })
      .from(apiKeys)
      .innerJoin(apiKeyMonthlyUsage, and(eq(apiKeyMonthlyUsage.keyId, sql`coalesce(${apiKeys.lineId}, ${apiKeys.id})`), eq(apiKeyMonthlyUsage.month, month)))
      .where(inArray(apiKeys.id, keyIds));
    return new Map(rows.map((row) => [row.keyId, row.spent]));
  }

  /** PostgreSQL checkpoints on its own processes. */
  startBackgroundCheckpoints(): { stop(): Promise<void> } {
    return { stop: async () => {} };
  }

  /**
   * Appends a ledger row and moves the running sum; the only way credits enter or leave the ledger.
   * A row that lowers the sum across the low-credit threshold or to zero writes its balance events
   * too. Returns the sum after the row.
   */
  private async appendLedger(
    tx: Tx,
    row: Omit<LedgerTransaction, "id" | "balanceAfter" | "bucketId" | "keyId" | "requestId" | "gtin"> & Partial<Pick<LedgerTransaction, "bucketId" | "keyId" | "requestId" | "gtin">>,
  ): Promise<number> {
    // The organization's row lock, held to the end of the transaction, puts its ledger rows in one
    // order across instances: each balanceAfter is the sum after exactly the rows committed before it.
    const [moved] = await tx
      .update(organizations)
      .set({ ledgerBalance: sql`${organizations.ledgerBalance} + ${row.amount}` })
      .where(eq(organizations.id, row.organizationId))
      .returning({ ledgerBalance: organizations.ledgerBalance, lowCreditThreshold: organizations.lowCreditThreshold });
    if (moved === undefined) throw new Error(`organization ${row.organizationId} does not exist`);
    if (row.amount < 0) {
      const types = balanceEventTypes(moved.ledgerBalance - row.amount, moved.ledgerBalance, moved.lowCreditThreshold);
      const events = types.map((type) => ({ id: newId("msg", row.createdAt), organizationId: row.organizationId, type, data: balanceEventData(type, row.organizationId, moved.ledgerBalance, moved.lowCreditThreshold), createdAt: row.createdAt }));
      await emitPostgres(tx, events);
    }
    await tx.insert(creditTransactions).values({
      id: newId("txn", row.createdAt),
      bucketId: null,
      keyId: null,
      requestId: null,
      gtin: null,
      ...row,
      balanceAfter: moved.ledgerBalance,
    });
    return moved.ledgerBalance;
  }

  /** The ledger port on `tx`, for the money operations (ledger/operations.ts). */
  private ledger(tx: Tx): AsyncLedgerPort {
    return postgresLedgerPort(tx, { appendLedger: (on, entry) => this.appendLedger(on, entry), writeOffBucket: (on, id, now) => this.writeOffBucket(on, id, now) });
  }

  /** Runs a money operation in one transaction (retried whole after a deadlock or a serialization failure). */
  private money<T>(operation: () => LedgerStep<T>): Promise<T> {
    return this.transaction((tx) => runAsync(operation(), this.ledger(tx)));
  }

  async grantCredits(input: Parameters<Store["grantCredits"]>[0]): Promise<Bucket> {
    const { organizationId, now, ...credits } = input;
    return this.money(() => grant(organizationId, credits, now));
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

  // A billed request of a key without a monthly credit limit (nearly all) writes once: its debit.
  // reserveCredits only reads the balance (and whether the key is capped after all; both come with
  // the request's key, read by findKeyCredential in the same statement) and holds the credits in this
  // instance's memory, so its other requests cannot take them too; the debit takes
  // them from the buckets, soonest-expiring first, in the group commit's statement, under the
  // buckets' row locks, and takes nothing when they are gone (another instance spent them in
  // between): the look-up is then a 402. A crash loses only memory: nothing was written before the
  // debit, and the debit (usage row, bucket updates, ledger sum, Idempotency-Key answer) is one
  // statement that commits synchronously before the request is answered; group commit shares its
  // WAL flush among the requests that commit together.
  //
  // A capped key's request holds its credits in a reservation row instead (reserveCapped), so the
  // monthly limit counts requests in flight on every instance. Such rows survive the instance that
  // wrote them: any instance commits, releases or sweeps them. Reserve and release commit without
  // waiting (synchronous_commit off): a lost reserve was never answered (and the WAL is sequential,
  // so any later synchronous commit flushes it too), and a lost release leaves a reservation row
  // that the stale sweep gives back.
  async reserveCredits(input: Parameters<Store["reserveCredits"]>[0]): Promise<Reservation> {
    const reservationId = newId("res", input.now);
    const balance = input.balance ?? (await this.balanceCheck().execute({ organizationId: input.organizationId, keyId: input.keyId, now: input.now }))[0]!;
    if (balance.capped) return this.reserveCapped(input, reservationId);
    const available = Math.max(0, balance.spendable - (this.heldHere.get(input.organizationId) ?? 0));
    if (available < input.amount) return { ok: false, available };
    this.held.set(reservationId, { organizationId: input.organizationId, amount: input.amount, keyId: input.keyId, requestId: input.requestId, committing: false });
    this.holdHere(input.organizationId, input.amount);
    return { ok: true, reservationId, available: available - input.amount };
  }

  /** Credits held in memory by this instance's requests in flight: by reservation id, and their sum by organization. */
  private readonly held = new Map<string, HeldCredits>();
  private readonly heldHere = new Map<string, number>();

  private holdHere(organizationId: string, amount: number): void {
    const total = (this.heldHere.get(organizationId) ?? 0) + amount;
    if (total === 0) this.heldHere.delete(organizationId);
    else this.heldHere.set(organizationId, total);
  }

  /** The spendable balance, and whether the key's requests take the capped path (CAPPED_KEY). */
  private readonly balanceCheck = this.lazy(() =>
    this.db
      .select({
        spendable: sql<number>`coalesce(sum(${creditBuckets.remaining}), 0)`.mapWith(Number),
        capped: sql<boolean>`EXISTS (SELECT 1 FROM api_keys WHERE id = ${sql.placeholder("keyId")} AND ${CAPPED_KEY})`,
      })
      .from(creditBuckets)
      .where(SPENDABLE_BUCKETS)
      .prepare("balance_check"),
  );

  // Invariant: a key line's spending in the month plus what its open reservations hold never exceeds
  // its monthly limit (a line is a key and its rotations, and its limit is the live key's). Every
  // reservation of a capped line first locks the line's counter row of the month (inserting it if
  // needed; a key's line never changes, so a rotation cannot split the queue), and every debit moves
  // that row in its own statement, so reservations of one line queue on it and each one reads the
  // committed spending and reservations of the others (read in a second statement, after the lock:
  // a debit that committed before is seen whole, one still running waits and is seen as neither).
  // A released reservation frees its share at once.
  private async reserveCapped(input: Parameters<Store["reserveCredits"]>[0], reservationId: string): Promise<Reservation> {
    const keyId = input.keyId!;
    const outcome = await retrying(() =>
      this.client.begin(async (tx) => {
        const [counter] = await tx<Array<{ line: string; spent: string }>>`
          INSERT INTO api_key_monthly_usage (key_id, month, spent)
          SELECT coalesce(line_id, id), ${utcMonth(input.now)}, 0 FROM api_keys WHERE id = ${keyId}
          ON CONFLICT (key_id, month) DO UPDATE SET spent = api_key_monthly_usage.spent
          RETURNING key_id AS line, spent`;
        const line = counter!.line;
        const [key] = await tx<Array<{ monthly_credit_limit: string | null; held: string }>>`
          SELECT (SELECT monthly_credit_limit FROM api_keys WHERE id = ${line} OR line_id = ${line} ORDER BY status = 'ACTIVE' DESC, created_at DESC LIMIT 1) AS monthly_credit_limit,
                 (SELECT coalesce(sum(amount), 0)::bigint FROM reservations WHERE key_id IN (SELECT id FROM api_keys WHERE id = ${line} OR line_id = ${line})) AS held`;
        const limit = key?.monthly_credit_limit == null ? null : Number(key.monthly_credit_limit);
        if (limit !== null && Number(counter!.spent) + Number(key!.held) + input.amount > limit) return { refusedBy: limit };
        const [row] = await this.reserveStatement(tx, input, reservationId);
        return { row: row! };
      }),
      isOverdrawRefused,
    );
    if ("refusedBy" in outcome) return { ok: false, available: await this.availableCredits(input.organizationId, input.now), keyLimit: outcome.refusedBy };
    if (outcome.row.reservation_id === null) return { ok: false, available: Number(outcome.row.available) };
    return { ok: true, reservationId, available: Number(outcome.row.available) - input.amount };
  }

  private reserveStatement(tx: postgres.TransactionSql, input: Parameters<Store["reserveCredits"]>[0], reservationId: string) {
    return tx<Array<{ available: string; reservation_id: string | null }>>`
        WITH locked AS (
          SELECT id, remaining, expires_at FROM credit_buckets
          WHERE organization_id = ${input.organizationId} AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${input.now})
          ORDER BY ${fefo(tx)}
          FOR UPDATE
        ),
        total AS (SELECT coalesce(sum(remaining), 0)::bigint AS available FROM locked),
        fefo AS (
          SELECT id, remaining, row_number() OVER w AS position, (sum(remaining) OVER w - remaining)::bigint AS before
          FROM locked WINDOW w AS (ORDER BY ${fefo(tx)})
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
                 ${input.keyId}, ${input.requestId}, ${tx`(extract(epoch from now()) * 1000)::bigint`}
          FROM taken HAVING count(*) > 0
          RETURNING id
        )
        SELECT total.available, (SELECT id FROM reserved) AS reservation_id, set_config('synchronous_commit', 'off', true) AS async_commit
        FROM total`;
  }

  /**
   * How long a debit whose connection was lost is retried (PostgreSQL restarting, a fail-over, a
   * network cut): until its outcome is known its look-up cannot be answered either way. Past it the
   * debit is in doubt (DebitInDoubt). A property, so tests can shorten it.
   */
  lostConnectionPatienceMs = 20_000;

  private pendingCommits: PendingDebit[] = [];
  /** The commit loop while it runs: at most one batch of this instance is in flight at a time. */
  private flushing: Promise<void> | null = null;

  /**
   * Group commit: a commit that arrives while none is in flight is written at once; the commits that
   * arrive while one is in flight wait for it and then go together, as one transaction. Each caller
   * is answered only after the transaction that holds its debit has committed (and its WAL is flushed).
   */
  commitReservation(reservationId: string, usage: UsageRecord): Promise<boolean> {
    const held = this.held.get(reservationId) ?? null;
    // A hold being debited is not released meanwhile; it is held again if its debit is not written.
    if (held !== null) {
      if (held.committing) return Promise.resolve(false);
      held.committing = true;
    }
    return new Promise<boolean>((resolve, reject) => {
      this.pendingCommits.push({ reservationId, usage, held, transactionId: newId("txn", usage.now), resolve, reject });
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
        const outcomes = await retrying(() => this.debitBatch(batch, { retried: false }), isOverdrawRefused);
        for (const item of batch) this.settleDebit(item, outcomes.get(item.reservationId));
      } catch {
        // One bad debit must not fail its neighbours: retry each alone and fail only the culprit. A
        // debit whose statement did commit although its caller saw an error is found by its ledger
        // row's id, so it is never written twice.
        const patientUntil = performance.now() + this.lostConnectionPatienceMs;
        for (const item of batch) {
          try {
            this.settleDebit(item, (await this.debitAlone(item, patientUntil)).get(item.reservationId));
          } catch (error) {
            if (item.held !== null) item.held.committing = false;
            // Every attempt lost its connection: the last one that reached PostgreSQL may have committed.
            item.reject(isConnectionLost(error) ? new DebitInDoubt(error) : error);
          }
        }
      }
    }
    // Cleared in the same turn as the loop's last look at the queue (every failure is caught above),
    // so a commit queued by a caller answered just now starts a new loop rather than being left behind.
    this.flushing = null;
  }

  /**
   * A debit retried alone finds itself written when an earlier attempt committed, so it is also
   * retried after a lost connection (whose last attempt may have committed unseen), until
   * `patientUntil` (one deadline for the whole batch, on the monotonic clock): a look-up that was
   * debited must not be answered as failed. The pauses let postgres.js connect again.
   */
  private async debitAlone(item: PendingDebit, patientUntil: number): Promise<Map<string, DebitOutcome>> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await retrying(() => this.debitBatch([item], { retried: true }), isOverdrawRefused);
      } catch (error) {
        if (!isConnectionLost(error) || performance.now() >= patientUntil) throw error;
        await Bun.sleep(Math.min(25 * 2 ** attempt, 500));
      }
    }
  }

  /** Answers a commit; a hold in memory is let go once its debit is written or refused, and is held again otherwise. */
  private settleDebit(item: PendingDebit, outcome: DebitOutcome | undefined): void {
    if (item.held !== null) {
      item.held.committing = false;
      if (outcome !== undefined) this.release(item.reservationId, item.held);
    }
    if (outcome?.outcome === "spent") item.reject(new CreditsSpentMeanwhile(outcome.available));
    else item.resolve(outcome?.outcome === "committed");
  }

  private release(reservationId: string, held: HeldCredits): void {
    this.held.delete(reservationId);
    this.holdHere(held.organizationId, -held.amount);
  }

  // Invariants: of a commit, a release and a sweep racing on one reservation row exactly one wins,
  // as deleting the row is what claims it; credits held in memory are taken from buckets locked in
  // FEFO order, and only while the organization's spendable credits cover every item before them
  // in the batch, so no bucket goes below zero whichever instances debit at once. One statement
  // writes a whole batch: the usage rows, the buckets, the running ledger sums (each organization's
  // row moved once, under its lock, which orders balanceAfter across instances) and the
  // Idempotency-Key answers, so they commit together. It commits synchronously (the WAL is flushed
  // before anyone is answered): a debit once answered survives a crash of the database server.
  private async debitBatch(items: PendingDebit[], options: { retried: boolean }): Promise<Map<string, DebitOutcome>> {
    if (!options.retried && items.every((item) => item.held !== null && item.usage.idempotency === undefined)) return this.debitHeld(items);
    const rows = items.map(({ reservationId, usage, held, transactionId }, seq) => ({
      seq,
      reservation_id: reservationId,
      transaction_id: transactionId,
      gtin: usage.gtin,
      description: usage.description,
      created_at: usage.now,
      month: utcMonth(usage.now),
      items: usage.items ?? 1,
      idempotency_scope: usage.idempotency?.scope ?? null,
      idempotency_key_hash: usage.idempotency?.keyHash ?? null,
      claimed_at: usage.idempotency?.claimedAt ?? null,
      response_status: usage.idempotency?.responseStatus ?? null,
      response_body: usage.idempotency?.responseBody ?? null,
      held_here: held !== null,
      held_organization_id: held?.organizationId ?? null,
      held_amount: held?.amount ?? null,
      held_key_id: held?.keyId ?? null,
      held_request_id: held?.requestId ?? null,
    }));
    // Buckets must still be unexpired when the credits are taken, by the latest clock of the batch.
    const now = Math.max(...items.map((item) => item.usage.now));
    // A statement's parts each open and lock their tables whether or not they touch a row, so the
    // batch gets only the parts it needs (a retry, Idempotency-Keys, reservation rows): a plain batch
    // of held look-ups, nearly every one, skips four of them.
    const sql = this.debitConnection;
    const none = sql``;
    const fenced = items.some((item) => item.usage.idempotency !== undefined);
    const withRows = items.some((item) => item.held === null);
    // The buckets are locked first, by a small statement of the same transaction (in the debit's
    // own FEFO order): the debit statement then starts after every earlier debit of those
    // organizations committed, so it never waits on their rows. A statement that waits for a row
    // lock re-checks the row's new version by starting its whole plan again (EvalPlanQual), which
    // for the debit statement cost a quarter of its CPU whenever two instances shared an organization.
    const organizations = [...new Set(items.flatMap((item) => (item.held === null ? [] : [item.held.organizationId])))].sort();
    const locks = sql`
      SELECT 1 FROM credit_buckets WHERE organization_id = ANY(${organizations}::text[]) AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${now})
      ORDER BY organization_id, ${fefo(sql)} FOR UPDATE`;
    const debit = sql<Array<{ reservation_id: string; outcome: "committed" | "spent"; available: string | null }>>`
      WITH input AS (
        SELECT * FROM jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb) AS input(
          seq int, reservation_id text, transaction_id text, gtin text, description text, created_at bigint, month text, items int,
          idempotency_scope text, idempotency_key_hash text, claimed_at bigint, response_status int, response_body text,
          held_here boolean, held_organization_id text, held_amount bigint, held_key_id text, held_request_id text)
      ),
      -- A debit written already (its statement committed, but its caller saw an error) is not written
      -- again; a first attempt has new ledger row ids, so only a retry looks.
      written AS (
        SELECT input.reservation_id FROM input
        WHERE ${options.retried ? sql`EXISTS (SELECT 1 FROM credit_transactions WHERE credit_transactions.id = input.transaction_id)` : sql`false`}
      ),
      -- A request whose Idempotency-Key claim was taken over meanwhile is not billed: its claim
      -- (locked until this commits) fences the debit.
      owned AS (
        SELECT input.* FROM input
        WHERE input.reservation_id NOT IN (SELECT reservation_id FROM written)
          ${fenced ? sql`AND (input.idempotency_scope IS NULL OR input.reservation_id IN (
            SELECT input.reservation_id FROM input JOIN idempotency_records r
              ON r.scope = input.idempotency_scope AND r.key_hash = input.idempotency_key_hash AND r.status = 'in-progress' AND r.created_at = input.claimed_at
            FOR UPDATE OF r))` : none}
      ),
      ${withRows ? sql`claimed AS (
        DELETE FROM reservations USING owned WHERE NOT owned.held_here AND reservations.id = owned.reservation_id
        RETURNING reservations.id, reservations.organization_id, reservations.amount, reservations.key_id, reservations.request_id,
                  CASE WHEN jsonb_array_length(reservations.allocations) = 1 THEN reservations.allocations->0->>'bucketId' END AS bucket_id
      ),` : none}
      -- Credits held in memory, of keys still uncapped (one capped since is not billed here: its
      -- retry takes the capped path), are taken from the buckets in batch order while they last.
      uncapped AS (
        SELECT owned.* FROM owned WHERE owned.held_here AND NOT EXISTS (
          SELECT 1 FROM api_keys WHERE api_keys.id = owned.held_key_id AND (api_keys.monthly_credit_limit IS NOT NULL OR api_keys.status <> 'ACTIVE'))
      ),
      locked AS (
        SELECT id, organization_id, remaining, expires_at FROM credit_buckets
        WHERE organization_id IN (SELECT held_organization_id FROM uncapped) AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${now})
        ORDER BY organization_id, ${fefo(sql)}
        FOR UPDATE
      ),
      supply AS (
        SELECT id, organization_id, remaining, (sum(remaining) OVER (PARTITION BY organization_id ORDER BY ${fefo(sql)}) - remaining)::bigint AS before
        FROM locked
      ),
      spendable AS (SELECT organization_id, sum(remaining)::bigint AS credits FROM locked GROUP BY organization_id),
      demand AS (
        SELECT reservation_id, held_organization_id AS organization_id, held_amount AS amount, held_key_id AS key_id, held_request_id AS request_id,
               (sum(held_amount) OVER (PARTITION BY held_organization_id ORDER BY seq) - held_amount)::bigint AS before
        FROM uncapped
      ),
      granted AS (SELECT demand.* FROM demand JOIN spendable USING (organization_id) WHERE demand.before + demand.amount <= spendable.credits),
      given AS (SELECT organization_id, sum(amount)::bigint AS amount FROM granted GROUP BY organization_id),
      taken AS (
        UPDATE credit_buckets SET remaining = credit_buckets.remaining - least(supply.remaining, given.amount - supply.before)
        FROM supply JOIN given USING (organization_id)
        WHERE credit_buckets.id = supply.id AND supply.before < given.amount
      ),
      spent AS (
        -- The ledger row names a bucket when the item's credits all came from one.
        SELECT reservation_id, organization_id, amount, key_id, request_id,
               (SELECT supply.id FROM supply WHERE supply.organization_id = granted.organization_id
                  AND supply.before <= granted.before AND granted.before + granted.amount <= supply.before + supply.remaining) AS bucket_id
        FROM granted
        ${withRows ? sql`UNION ALL
        SELECT id, organization_id, amount, key_id, request_id, bucket_id FROM claimed` : none}
      ),
      totals AS (SELECT organization_id, sum(amount)::bigint AS amount FROM spent GROUP BY organization_id),
      moved AS (
        UPDATE organizations SET ledger_balance = organizations.ledger_balance - totals.amount
        FROM totals WHERE organizations.id = totals.organization_id
        RETURNING organizations.id, organizations.ledger_balance, organizations.low_credit_threshold, totals.amount
      ),
      debits AS (
        -- balanceAfter of a row = the organization's sum after the batch + what its later rows took.
        SELECT input.*, spent.organization_id, spent.amount, spent.key_id, spent.request_id, spent.bucket_id,
               moved.ledger_balance + coalesce(sum(spent.amount) OVER (
                 PARTITION BY spent.organization_id ORDER BY input.seq DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS balance_after
        FROM input JOIN spent USING (reservation_id) JOIN moved ON moved.id = spent.organization_id
      ),
      ledger AS (
        INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
        SELECT transaction_id, organization_id, 'usage', -amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at
        FROM debits
      ),
      -- The billed look-ups (a batch's fresh GTINs each) into the hourly usage counters, in the debit's own statement, rows in one
      -- order so batches of several instances lock them alike.
      counted AS (
        INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits)
        SELECT organization_id, periods.ms, created_at - created_at % periods.ms, coalesce(key_id, ''), ${BILLED_REASON}, sum(items), sum(amount)
        FROM debits CROSS JOIN (VALUES (${HOUR_MS}::int), (${DAY_MS}::int)) AS periods(ms) GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (organization_id, period_ms, period_start, key_id, reason)
        DO UPDATE SET requests = usage_counters.requests + excluded.requests, credits = usage_counters.credits + excluded.credits
      ),
      -- Each key line's spending of the month moves with its usage rows (the monthly credit limit reads it).
      spending AS (
        INSERT INTO api_key_monthly_usage (key_id, month, spent)
        SELECT coalesce(api_keys.line_id, api_keys.id), month, sum(amount)::bigint FROM debits JOIN api_keys ON api_keys.id = debits.key_id
        GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (key_id, month) DO UPDATE SET spent = api_key_monthly_usage.spent + excluded.spent
      ),
      -- The webhook events of balances this batch took across the low-credit threshold or to zero
      -- (balanceEventTypes in SQL), with their deliveries: in the debit's own statement, so an
      -- event exists exactly when its debit does. Each organization's sum moves once per batch under
      -- its row lock, so consecutive batches (of any instance) see each crossing once.
      crossings AS (
        SELECT moved.id AS organization_id, moved.ledger_balance + moved.amount AS before, moved.ledger_balance AS after, moved.low_credit_threshold AS threshold,
               (SELECT max(created_at) FROM debits WHERE debits.organization_id = moved.id) AS created_at
        FROM moved
      ),
      ${balanceEvents(sql)}
      ${fenced ? sql`, completed AS (
        UPDATE idempotency_records SET status = 'done', response_status = debits.response_status, response_body = debits.response_body
        FROM debits
        WHERE debits.idempotency_scope IS NOT NULL AND idempotency_records.scope = debits.idempotency_scope AND idempotency_records.key_hash = debits.idempotency_key_hash
          AND idempotency_records.created_at = debits.claimed_at
      )` : none}
      SELECT reservation_id, 'committed' AS outcome, NULL::bigint AS available FROM debits
      UNION ALL
      SELECT reservation_id, 'committed', NULL FROM written
      UNION ALL
      SELECT demand.reservation_id, 'spent', greatest(0, coalesce(spendable.credits, 0) - coalesce(given.amount, 0))
      FROM demand LEFT JOIN spendable USING (organization_id) LEFT JOIN given USING (organization_id)
      WHERE demand.reservation_id NOT IN (SELECT reservation_id FROM granted)`;
    const settled = await pipelinedTransaction(sql, locks, debit);
    return new Map(settled.map((row): [string, DebitOutcome] => [row.reservation_id, row.outcome === "spent" ? { outcome: "spent", available: Number(row.available) } : { outcome: "committed" }]));
  }

  // The common batch (credits held in memory, no Idempotency-Key, first attempt) in two steps of one
  // transaction: the buckets, the organizations' sums and the keys are locked and read, this
  // instance computes the debit (planHeldDebits), and one plain statement writes it. The big
  // statement of debitBatch spent most of its time starting and finishing its plan; this one has no
  // joins or window functions left. The second step costs a round trip while the rows are locked.
  private async debitHeld(items: PendingDebit[]): Promise<Map<string, DebitOutcome>> {
    const debits: HeldDebit[] = items.map(({ reservationId, transactionId, usage, held }) => ({
      reservationId,
      transactionId,
      organizationId: held!.organizationId,
      amount: held!.amount,
      keyId: held!.keyId,
      requestId: held!.requestId,
      gtin: usage.gtin,
      description: usage.description,
      createdAt: usage.now,
      month: utcMonth(usage.now),
      items: usage.items ?? 1,
    }));
    // Buckets must still be unexpired when the credits are taken, by the latest clock of the batch.
    const now = Math.max(...debits.map((debit) => debit.createdAt));
    const organizations = [...new Set(debits.map((debit) => debit.organizationId))].sort();
    const keyIds = [...new Set(debits.flatMap((debit) => (debit.keyId === null ? [] : [debit.keyId])))];
    const sql = this.debitConnection;
    const begun = sql`BEGIN`;
    const buckets = sql<Array<{ id: string; organization_id: string; remaining: string }>>`
      SELECT id, organization_id, remaining FROM credit_buckets
      WHERE organization_id = ANY(${organizations}::text[]) AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${now})
      ORDER BY organization_id, ${fefo(sql)} FOR UPDATE`;
    // The sums are locked as an UPDATE locks them (not blocking foreign-key checks of other inserts).
    const sums = sql<Array<{ id: string; ledger_balance: string; low_credit_threshold: string | null }>>`
      SELECT id, ledger_balance, low_credit_threshold FROM organizations WHERE id = ANY(${organizations}::text[]) ORDER BY id FOR NO KEY UPDATE`;
    const transaction = sql<[{ id: string }]>`SELECT pg_current_xact_id()::text AS id`;
    const keys = sql<Array<{ id: string; line: string; capped: boolean }>>`
      SELECT id, coalesce(line_id, id) AS line, (monthly_credit_limit IS NOT NULL OR status <> 'ACTIVE') AS capped FROM api_keys WHERE id = ANY(${keyIds}::text[])`;
    let plan: DebitPlan;
    let lockedBy: string;
    try {
      const [, bucketRows, sumRows, keyRows, [locker]] = await Promise.all([begun, buckets, sums, keys, transaction]);
      lockedBy = locker.id;
      plan = planHeldDebits(debits, {
        buckets: bucketRows.map((row) => ({ id: row.id, organizationId: row.organization_id, remaining: Number(row.remaining) })),
        organizations: new Map(sumRows.map((row) => [row.id, { ledgerBalance: Number(row.ledger_balance), lowCreditThreshold: row.low_credit_threshold === null ? null : Number(row.low_credit_threshold) }])),
        keys: new Map(keyRows.map((row) => [row.id, { line: row.line, capped: row.capped }])),
      });
    } catch (error) {
      await Promise.allSettled([begun, buckets, sums, keys, transaction]);
      await sql`ROLLBACK`;
      throw error;
    }
    const none = sql``;
    const write = sql`
      WITH taken AS (
        UPDATE credit_buckets SET remaining = credit_buckets.remaining - t.amount
        FROM unnest(${plan.buckets.map((b) => b.id)}::text[], ${plan.buckets.map((b) => String(b.amount))}::bigint[]) AS t(id, amount) WHERE credit_buckets.id = t.id
      ),
      moved AS (
        UPDATE organizations SET ledger_balance = organizations.ledger_balance - t.amount
        FROM unnest(${plan.organizations.map((o) => o.id)}::text[], ${plan.organizations.map((o) => String(o.amount))}::bigint[]) AS t(id, amount) WHERE organizations.id = t.id
      ),
      ledger AS (
        INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
        SELECT id, organization_id, 'usage', amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at
        FROM unnest(${plan.ledger.map((r) => r.id)}::text[], ${plan.ledger.map((r) => r.organizationId)}::text[], ${plan.ledger.map((r) => String(r.amount))}::bigint[],
                    ${plan.ledger.map((r) => String(r.balanceAfter))}::bigint[], ${plan.ledger.map((r) => r.bucketId)}::text[], ${plan.ledger.map((r) => r.keyId)}::text[],
                    ${plan.ledger.map((r) => r.requestId)}::text[], ${plan.ledger.map((r) => r.gtin)}::text[], ${plan.ledger.map((r) => r.description)}::text[],
                    ${plan.ledger.map((r) => String(r.createdAt))}::bigint[])
          AS t(id, organization_id, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
      ),
      counted AS (
        INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits)
        SELECT organization_id, period_ms, period_start, key_id, ${BILLED_REASON}, requests, credits
        FROM unnest(${plan.counters.map((c) => c.organizationId)}::text[], ${plan.counters.map((c) => c.periodMs)}::int[], ${plan.counters.map((c) => String(c.periodStart))}::bigint[],
                    ${plan.counters.map((c) => c.keyId)}::text[], ${plan.counters.map((c) => c.requests)}::int[], ${plan.counters.map((c) => String(c.credits))}::bigint[])
          AS t(organization_id, period_ms, period_start, key_id, requests, credits)
        ON CONFLICT (organization_id, period_ms, period_start, key_id, reason)
        DO UPDATE SET requests = usage_counters.requests + excluded.requests, credits = usage_counters.credits + excluded.credits
      ),
      spending AS (
        INSERT INTO api_key_monthly_usage (key_id, month, spent)
        SELECT * FROM unnest(${plan.spending.map((s) => s.line)}::text[], ${plan.spending.map((s) => s.month)}::text[], ${plan.spending.map((s) => String(s.spent))}::bigint[])
        ON CONFLICT (key_id, month) DO UPDATE SET spent = api_key_monthly_usage.spent + excluded.spent
      )
      ${plan.crossings.length === 0 ? none : sql`, crossings AS (
        SELECT * FROM jsonb_to_recordset(${JSON.stringify(plan.crossings.map((c) => ({ organization_id: c.organizationId, before: c.before, after: c.after, threshold: c.threshold, created_at: c.createdAt })))}::text::jsonb)
          AS crossings(organization_id text, before bigint, after bigint, threshold bigint, created_at bigint)
      ), ${balanceEvents(sql)}`}
      -- postgres.js sends a query on a new connection when the old one died (the rows' locks went with
      -- its transaction): outside the transaction that computed it, the write fails whole.
      SELECT CASE WHEN pg_current_xact_id()::text = ${lockedBy} THEN 1 ELSE ('the debit''s transaction ' || ${lockedBy} || ' was lost')::int END`;
    const [written, ended] = await Promise.allSettled([write, sql`COMMIT`]);
    if (written.status === "rejected") throw written.reason;
    if (ended.status === "rejected") throw ended.reason;
    if (ended.value.command !== "COMMIT") throw new Error(`the transaction ended with ${ended.value.command}`);
    return new Map<string, DebitOutcome>([
      ...plan.committed.map((id): [string, DebitOutcome] => [id, { outcome: "committed" }]),
      ...plan.spent.map(({ reservationId, available }): [string, DebitOutcome] => [reservationId, { outcome: "spent", available }]),
    ]);
  }

  async releaseReservation(reservationId: string, now: number): Promise<boolean> {
    const held = this.held.get(reservationId);
    if (held !== undefined) {
      if (held.committing) return false;
      this.release(reservationId, held);
      return true;
    }
    const [row] = await retrying(() => this.restoreCredits(this.client, this.client`DELETE FROM reservations WHERE id = ${reservationId} RETURNING organization_id, allocations`, now));
    return row!.released === 1;
  }

  // The reservation row is locked, so a commit or a sweep racing with it waits and then finds what
  // is left (a commit debits `keep`); one that came first leaves no row, and nothing is given back.
  async shrinkReservation(reservationId: string, keep: number, now: number): Promise<boolean> {
    const held = this.held.get(reservationId);
    if (held !== undefined) {
      if (held.committing) return false;
      if (!(keep > 0 && keep < held.amount)) throw new RangeError(`cannot keep ${keep} of a reservation of ${held.amount}`);
      this.holdHere(held.organizationId, keep - held.amount);
      held.amount = keep;
      return true;
    }
    return retrying(() =>
      this.client.begin(async (tx) => {
        const [row] = await tx<Array<{ organization_id: string; amount: string; allocations: string }>>`
          SELECT organization_id, amount, allocations::text AS allocations FROM reservations WHERE id = ${reservationId} FOR UPDATE`;
        if (row === undefined) return false;
        if (!(keep > 0 && keep < Number(row.amount))) throw new RangeError(`cannot keep ${keep} of a reservation of ${row.amount}`);
        const { kept, given } = splitAllocations(JSON.parse(row.allocations), keep);
        await tx`UPDATE reservations SET amount = ${keep}, allocations = ${JSON.stringify(kept)}::text::jsonb WHERE id = ${reservationId}`;
        await this.restoreCredits(tx, tx`SELECT ${row.organization_id}::text AS organization_id, ${JSON.stringify(given)}::text::jsonb AS allocations`, now);
        return true;
      }),
    );
  }

  /**
   * Gives the allocations of `claimed` (one row: organization_id, allocations) back to their buckets.
   * Invariant: what a refund is owed from the buckets (clawback_owed) is paid from exactly the
   * credits given back, in the same statement, with one `refund` row, so no request can spend them
   * in between. `owing` locks the buckets in FEFO order (as reserveCredits does) and reads their
   * latest committed clawback, so a refund that committed meanwhile is paid too.
   */
  private restoreCredits(sql: postgres.Sql | postgres.TransactionSql, claimed: postgres.PendingQuery<postgres.Row[]>, now: number) {
    const transactionId = newId("txn", now);
    return sql<Array<{ released: number }>>`
        WITH claimed AS (${claimed}),
        given AS (
          SELECT allocation->>'bucketId' AS bucket_id, (allocation->>'amount')::bigint AS amount
          FROM claimed, jsonb_array_elements(claimed.allocations) AS allocation
        ),
        owing AS (
          SELECT credit_buckets.id, least(credit_buckets.clawback_owed, given.amount) AS paid
          FROM credit_buckets JOIN given ON given.bucket_id = credit_buckets.id
          ORDER BY ${fefo(sql, "credit_buckets")}
          FOR UPDATE OF credit_buckets
        ),
        restored AS (
          UPDATE credit_buckets SET remaining = credit_buckets.remaining + given.amount - owing.paid, clawback_owed = credit_buckets.clawback_owed - owing.paid
          FROM given JOIN owing ON owing.id = given.bucket_id WHERE credit_buckets.id = given.bucket_id
        ),
        paid AS (
          SELECT sum(paid)::bigint AS amount, CASE WHEN count(*) = 1 THEN min(id) END AS bucket_id FROM owing WHERE paid > 0 HAVING count(*) > 0
        ),
        moved AS (
          UPDATE organizations SET ledger_balance = organizations.ledger_balance - paid.amount
          FROM claimed, paid WHERE organizations.id = claimed.organization_id
          RETURNING organizations.id, organizations.ledger_balance, organizations.low_credit_threshold
        ),
        ledger AS (
          INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, description, created_at)
          SELECT ${transactionId}, moved.id, 'refund', -paid.amount, moved.ledger_balance, paid.bucket_id, 'Refund: credits a request in flight gave back', ${now}
          FROM moved, paid
        ),
        -- The refund lowers the sum like any debit (appendLedger): its balance events, with their deliveries, in the same statement.
        crossings AS (
          SELECT moved.id AS organization_id, moved.ledger_balance + paid.amount AS before, moved.ledger_balance AS after,
                 moved.low_credit_threshold AS threshold, ${now}::bigint AS created_at
          FROM moved, paid
        ),
        ${balanceEvents(sql)}
        SELECT count(*)::int AS released, set_config('synchronous_commit', 'off', true) AS async_commit FROM claimed`;
  }

  /**
   * Other instances may be serving: only reservations old enough to belong to a dead request are
   * given back. Idempotency claims are left alone; an abandoned one ages out (abandonedBefore).
   */
  async recoverInFlightWork(now: number): Promise<void> {
    await this.releaseStaleReservations(now);
  }

  /**
   * Gives back the credits of reservations left behind by an instance that died mid-request: those
   * older than STALE_RESERVATION_MS by the database's clock (reservations are dated by it too), so an
   * instance whose clock runs ahead never sweeps a request that is still running elsewhere.
   */
  async releaseStaleReservations(now: number): Promise<number> {
    const stale = await this.client<Array<{ id: string }>>`
      SELECT id FROM reservations WHERE created_at < ${this.databaseNow()} - ${STALE_RESERVATION_MS}::bigint ORDER BY created_at`;
    let released = 0;
    for (const { id } of stale) if (await this.releaseReservation(id, now)) released++;
    return released;
  }

  private readonly availableStatement = this.lazy(() =>
    this.db
      .select({ available: sql<number>`coalesce(sum(${creditBuckets.remaining}), 0)`.mapWith(Number) })
      .from(creditBuckets)
      .where(SPENDABLE_BUCKETS)
      .prepare("available_credits"),
  );

  async availableCredits(organizationId: string, now: number, balance?: BalanceAtKeyRead): Promise<number> {
    const spendable = balance?.spendable ?? (await this.availableStatement().execute({ organizationId, now }))[0]!.available;
    return Math.max(0, spendable - (this.heldHere.get(organizationId) ?? 0));
  }

  // A pure read: expired credits are written off by the expiry job (expireBuckets), never by a reader.
  async getBalance(organizationId: string, now: number): Promise<Balance> {
    // One snapshot for buckets and reservations, so a request committing meanwhile is counted once.
    return this.transaction(
      async (tx) => {
        // Spent, expired, written-off and clawed-back buckets are history: the ledger tells it, the balance
        // does not list them. A bucket whose credits are all held by requests in flight is still listed.
        const heldBuckets = sql`(SELECT allocation->>'bucketId' FROM ${reservations}, jsonb_array_elements(${reservations.allocations}) AS allocation WHERE ${reservations.organizationId} = ${organizationId})`;
        const buckets = await tx
          .select(bucketColumns)
          .from(creditBuckets)
          .where(
            and(
              eq(creditBuckets.organizationId, organizationId),
              or(isNull(creditBuckets.expiresAt), gt(creditBuckets.expiresAt, now)),
              or(gt(creditBuckets.remaining, 0), sql`${creditBuckets.id} IN ${heldBuckets}`),
            ),
          )
          .orderBy(...FEFO);
        const [held] = await tx
          .select({ reserved: sql<number>`coalesce(sum(${reservations.amount}), 0)`.mapWith(Number) })
          .from(reservations)
          .where(eq(reservations.organizationId, organizationId));
        const inBuckets = buckets.reduce((sum, b) => sum + b.remaining, 0);
        // What this instance's requests in flight hold in memory is still in the buckets.
        const heldHere = Math.min(inBuckets, this.heldHere.get(organizationId) ?? 0);
        return { available: inBuckets - heldHere, reserved: held!.reserved + heldHere, buckets };
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

  /** The database's time in epoch milliseconds: the one clock all instances share, for the ages of claims and reservations. */
  private databaseNow() {
    return this.client`(extract(epoch from now()) * 1000)::bigint`;
  }

  // --- billing ---

  priceStates(query: HistoryQuery) {
    return this.history.priceStates(query);
  }

  priceDays(query: HistoryQuery) {
    return this.history.priceDays(query);
  }

}

/**
 * BEGIN, `first`, `then`, COMMIT sent together on `connection` (a pool of one connection, so they
 * go in order on one session, one round trip) instead of sql.begin's three round trips. When a
 * statement fails, PostgreSQL refuses the rest and turns the COMMIT into a ROLLBACK; the first
 * failure is thrown, after every reply is in, so the session is idle again for the next caller.
 */
async function pipelinedTransaction<T extends readonly postgres.MaybeRow[]>(connection: postgres.Sql, first: postgres.PendingQuery<postgres.Row[]>, then: postgres.PendingQuery<T>): Promise<T> {
  const [begun, firstDone, result, ended] = await Promise.allSettled([connection`BEGIN`, first, then, connection`COMMIT`]);
  for (const reply of [begun, firstDone, result, ended]) if (reply.status === "rejected") throw reply.reason;
  if (ended.status === "fulfilled" && ended.value.command !== "COMMIT") throw new Error(`the transaction ended with ${ended.value.command}`);
  return (result as PromiseFulfilledResult<T>).value;
}

/**
 * The CTEs that write the webhook events of balances crossing the low-credit threshold or reaching
 * zero (balanceEventTypes in SQL), with their deliveries, from a CTE `crossings` (organization_id,
 * before, after, threshold, created_at): in the statement that moves the balance, so an event exists
 * exactly when its cause does.
 */
function balanceEvents(sql: postgres.Sql | postgres.TransactionSql) {
  return sql`
      balance_events AS (
        INSERT INTO webhook_events (id, organization_id, type, payload, created_at)
        SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), organization_id, kind.type, kind.payload, created_at
        FROM crossings CROSS JOIN LATERAL (VALUES
          ('credits.low', threshold IS NOT NULL AND before >= threshold AND after < threshold,
           jsonb_build_object('organizationId', organization_id, 'balance', after, 'threshold', threshold)::text),
          ('credits.depleted', before > 0 AND after <= 0, jsonb_build_object('organizationId', organization_id, 'balance', after)::text)
        ) AS kind(type, crossed, payload)
        WHERE kind.crossed
        RETURNING id, organization_id, type, created_at
      ),
      balance_deliveries AS (
        INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, next_attempt_at, created_at)
        SELECT e.id, balance_events.id, 'pending', 0, balance_events.created_at, balance_events.created_at
        FROM balance_events JOIN webhook_endpoints e
          ON e.organization_id = balance_events.organization_id AND e.status = 'enabled' AND e.event_types @> jsonb_build_array(balance_events.type)
      )`;
}
