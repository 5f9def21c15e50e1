import { and, desc, eq, gt, gte, inArray, isNotNull, lte, type SQL, sql } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import type postgres from "postgres";
import { newId } from "../lib/ids";
import { ChangeListener } from "./change-listener";
import { decodeLedgerCursor, encodeLedgerCursor } from "./cursor";
import { applyPostgresMigrations } from "./migrate";
import { grant } from "./ledger/operations";
import { type AsyncLedgerPort, type LedgerStep, runAsync } from "./ledger/port";
import { postgresLedgerPort } from "./ledger/postgres";
import type { CreditLeases } from "./ledger/postgres-leases";
import { PostgresReservations } from "./ledger/postgres-reservations";
import { retrying } from "./postgres-retry";
import { openDebitConnection, openPostgresClient } from "./postgres-client";
import { PostgresRateBuckets } from "./rate-limit/postgres";
import { emitPostgres, PostgresWebhooks } from "./webhooks/postgres";
import { balanceEventData, balanceEventTypes } from "./webhooks/records";
import { PostgresBilling } from "./billing/postgres";
import { PostgresCatalog } from "./catalog/postgres";
import { PostgresFeeds } from "./feeds/postgres";
import { PostgresIdempotency } from "./idempotency/postgres";
import { PostgresIdentity } from "./identity/postgres";
import { PostgresKeys } from "./keys/postgres";
import { PostgresUsage } from "./usage/postgres";
import { PostgresWatches } from "./watches/postgres";
import { PostgresHistory } from "./history/postgres";
import type { HistoryQuery } from "./history/records";
import * as schema from "./schema/postgres";
import type { Bucket, LedgerTransaction, Page, Store, TransactionQuery, TransactionType } from "./store";
import { PACKED_SPAN_MS, pageOfEntries, type StoredLedgerRow } from "./ledger/packed-ledger";

const { organizations, apiKeys, apiKeyMonthlyUsage, creditBuckets, creditTransactions } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

// The PostgreSQL store, for several `serve` instances on one database. What it keeps in memory
// between calls is kept true by the database's change notifications (API key credentials, the
// catalog version; see ChangeListener) or decided again by the database (a remembered balance only
// admits a request; its debit takes the credits under lock). Every rule that must hold across
// instances is a row lock or a conditional write inside one transaction, never a read followed by
// a write in the app.

export class PostgresStore implements Store {
  readonly dialect = "postgres";
  private readonly db: DB;

  private readonly history: PostgresHistory;
  readonly sharedRateBuckets: PostgresRateBuckets;

  /**
   * `debitConnection` runs the group commit's statements (one batch in flight at a time) apart from
   * the pool, so look-ups' reads never queue behind a debit statement waiting for another instance's
   * row locks (postgres.js pipelines a query onto a busy connection when the pool is used up). It
   * must be a pool of one connection: debitBatch sends its BEGIN … COMMIT as separate queries.
   */
  constructor(
    private readonly client: postgres.Sql,
    private readonly debitConnection: postgres.Sql,
    databaseUrl: string | null = null,
  ) {
    this.changes = new ChangeListener(databaseUrl, {
      keyChanged: (keyId) => this.keys.forget(keyId),
      creditsChanged: (organizationId, spendable) => this.reservations.creditsChanged(organizationId, spendable),
      leasesWanted: (organizationId) => this.reservations.leases.giveBackOf(organizationId),
      catalogMoved: (version) => this.catalog.seeCatalogVersion(version),
      forgetAll: () => {
        this.keys.forgetCredentials();
        this.reservations.forgetSpendable();
        this.catalog.forgetCatalogVersion();
      },
    });
    this.db = drizzle(client, { schema });
    this.webhooks = new PostgresWebhooks(client);
    this.watches = new PostgresWatches(client);
    this.history = new PostgresHistory(client);
    this.sharedRateBuckets = new PostgresRateBuckets(client);
    this.usage = new PostgresUsage(client);
    this.reservations = new PostgresReservations(client, this.db, {
      transaction: (work, config) => this.transaction(work, config),
      databaseNow: () => this.databaseNow(),
      debitConnection: () => this.debitConnection,
      lostConnectionPatienceMs: () => this.lostConnectionPatienceMs,
      changes: this.changes,
    });
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
      changes: this.changes,
      rememberRead: (organizationId, spendable, epoch) => this.reservations.rememberRead(organizationId, spendable, epoch),
      rememberedSpendable: (organizationId) => this.reservations.rememberedSpendable(organizationId),
    });
    this.billing = new PostgresBilling(this.db, {
      transaction: (work, config) => this.transaction(work, config),
      money: (operation) => this.money(operation),
      ledger: (tx) => this.ledger(tx),
    });
  }

  /** The credit leases this instance spends from (tests and the simulation set their policy). */
  get leases(): CreditLeases {
    return this.reservations.leases;
  }

  /** What keeps the credentials, balances and catalog version this instance remembers true (see ChangeListener). */
  readonly changes: ChangeListener;

  /** Resolves once this instance has heard every change committed before the call (tests, the simulation). */
  changesHeard(): Promise<void> {
    return this.changes.caughtUp(this.client);
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
  usageTotals: Store["usageTotals"] = async (organizationId, query) => {
    await this.leases.settle({ organizations: [organizationId] });
    return this.usage.usageTotals(organizationId, query);
  };

  /** Credits held by requests in flight (in memory or in reservation rows), their group commit, releases and sweeps, and balances. */
  private readonly reservations: PostgresReservations;
  reserveCredits: Store["reserveCredits"] = (input) => this.reservations.reserveCredits(input);
  commitReservation: Store["commitReservation"] = (reservationId, usage) => this.reservations.commitReservation(reservationId, usage);
  releaseReservation: Store["releaseReservation"] = (reservationId, now) => this.reservations.releaseReservation(reservationId, now);
  shrinkReservation: Store["shrinkReservation"] = (reservationId, keep, now) => this.reservations.shrinkReservation(reservationId, keep, now);
  // The sweeps also settle every instance's lease usage: a dead instance's is settled by the next one.
  recoverInFlightWork: Store["recoverInFlightWork"] = async (now) => {
    await this.leases.settle("all");
    await this.reservations.recoverInFlightWork(now);
  };
  releaseStaleReservations: Store["releaseStaleReservations"] = async (now) => {
    await this.leases.settle("all");
    return this.reservations.releaseStaleReservations(now);
  };
  availableCredits: Store["availableCredits"] = (organizationId, now, balance) => this.reservations.availableCredits(organizationId, now, balance);
  getBalance: Store["getBalance"] = async (organizationId, now) => {
    await this.leases.settle({ organizations: [organizationId] });
    return this.reservations.getBalance(organizationId, now);
  };

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
  cancelSubscription: Store["cancelSubscription"] = (organizationId, subscriptionId, now) =>
    this.billing.cancelSubscription(organizationId, subscriptionId, now);
  getStripeCustomerId: Store["getStripeCustomerId"] = (organizationId) => this.billing.getStripeCustomerId(organizationId);
  setStripeCustomerId: Store["setStripeCustomerId"] = (organizationId, customerId) => this.billing.setStripeCustomerId(organizationId, customerId);
  findOrganizationByStripeCustomer: Store["findOrganizationByStripeCustomer"] = (customerId) => this.billing.findOrganizationByStripeCustomer(customerId);

  static async open(databaseUrl: string): Promise<PostgresStore> {
    await applyPostgresMigrations(databaseUrl);
    return PostgresStore.connect(databaseUrl);
  }

  /** The store on a migrated database: the pool (`?max=N`), and one connection of its own for the group commit. */
  static connect(databaseUrl: string): PostgresStore {
    return new PostgresStore(openPostgresClient(databaseUrl), openDebitConnection(databaseUrl), databaseUrl);
  }

  /** The raw connection pool, for `migrate --to` and for tests that inspect state. */
  get connection(): postgres.Sql {
    return this.client;
  }

  private closed = false;

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Debits queued for the group commit are written, and leases given back, before the pool closes.
    await this.reservations.close(Date.now());
    this.leases.stopSettling();
    await this.changes.close();
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
    try {
      return await retrying(() => this.db.transaction(work, config));
    } finally {
      // Any write here may have moved a balance (a grant, a refund…): this instance reads it again
      // on its next request instead of waiting for the buckets' notification.
      this.changes.noteCreditsChange();
      this.reservations.forgetSpendable();
    }
  }

  async monthlySpending(keyIds: string[], month: string): Promise<Map<string, number>> {
    if (keyIds.length === 0) return new Map();
    const owners = await this.db.selectDistinct({ id: apiKeys.organizationId }).from(apiKeys).where(inArray(apiKeys.id, keyIds));
    await this.leases.settle({ organizations: owners.map((owner) => owner.id) });
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
    row: Omit<LedgerTransaction, "id" | "balanceAfter" | "bucketId" | "keyId" | "requestId" | "gtin"> &
      Partial<Pick<LedgerTransaction, "bucketId" | "keyId" | "requestId" | "gtin">>,
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
      const events = types.map((type) => ({
        id: newId("msg", row.createdAt),
        organizationId: row.organizationId,
        type,
        data: balanceEventData(type, row.organizationId, moved.ledgerBalance, moved.lowCreditThreshold),
        createdAt: row.createdAt,
      }));
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
    return postgresLedgerPort(tx, {
      appendLedger: (on, entry) => this.appendLedger(on, entry),
      writeOffBucket: (on, id, now) => this.writeOffBucket(on, id, now),
    });
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
    await this.appendLedger(tx, {
      organizationId: bucket.organizationId,
      type: "expiry",
      amount: -bucket.remaining,
      bucketId: id,
      description: "Expired credits written off",
      createdAt: now,
    });
    return true;
  }

  /**
   * How long a debit whose connection was lost is retried (PostgreSQL restarting, a fail-over, a
   * network cut): until its outcome is known its look-up cannot be answered either way. Past it the
   * debit is in doubt (DebitInDoubt). A property, so tests can shorten it.
   */
  lostConnectionPatienceMs = 20_000;

  // Keyset pages on (createdAt, id), newest first: the cursor and `to` merge into one upper bound,
  // which the (org, createdAt, id) and (org, type, createdAt, id) indexes range under. A packed usage
  // row (packed-ledger.ts) is dated by its latest look-up, so the packed rows of the minute past the
  // bound are read too (ledgerRowsBefore), and pageOfEntries reads rows until the page is whole.
  async listTransactions(organizationId: string, query: TransactionQuery): Promise<Page<LedgerTransaction>> {
    await this.leases.settle({ organizations: [organizationId] });
    let before: { createdAt: number; id: string } | null = null;
    if (query.after !== undefined) {
      before = decodeLedgerCursor(query.after);
      if (before === null) throw new Error("listTransactions: malformed cursor");
    }
    // created_at < to  ⇔  (created_at, id) < (to, ""), since every id sorts after "".
    if (query.to !== undefined && (before === null || query.to < before.createdAt || (query.to === before.createdAt && before.id !== ""))) {
      before = { createdAt: query.to, id: "" };
    }
    const fetchRows = (after: { createdAt: number; id: string } | null, count: number) =>
      this.ledgerRowsBefore(organizationId, { types: query.types ?? [], from: query.from, before, after }, count);
    const entries = await pageOfEntries(query.limit + 1, { before, from: query.from }, fetchRows);
    const items = entries.slice(0, query.limit);
    const last = items[items.length - 1];
    return { items, nextCursor: entries.length > query.limit && last ? encodeLedgerCursor(last) : null };
  }

  /**
   * Up to `count` credit_transactions rows of an organization, newest first, after the row cursor
   * `after`, that may hold entries before `before`: the rows before it (an index range), and the
   * packed rows dated within PACKED_SPAN_MS past it whose first look-up is before it (the partial
   * index of packed rows), merged.
   */
  private async ledgerRowsBefore(
    organizationId: string,
    bounds: {
      types: TransactionType[];
      from: number | undefined;
      before: { createdAt: number; id: string } | null;
      after: { createdAt: number; id: string } | null;
    },
    count: number,
  ): Promise<StoredLedgerRow[]> {
    const t = creditTransactions;
    const { types, from, before, after } = bounds;
    const rows = (...conditions: Array<SQL | undefined>) =>
      this.db
        .select()
        .from(t)
        .where(
          and(
            eq(t.organizationId, organizationId),
            types.length === 0 ? undefined : types.length === 1 ? eq(t.type, types[0]!) : inArray(t.type, types),
            after === null ? undefined : sql`(${t.createdAt}, ${t.id}) < (${after.createdAt}, ${after.id})`,
            from === undefined ? undefined : gte(t.createdAt, from),
            ...conditions,
          ),
        )
        .orderBy(desc(t.createdAt), desc(t.id))
        .limit(count);
    const [below, straddling] = await Promise.all([
      rows(before === null ? undefined : sql`(${t.createdAt}, ${t.id}) < (${before.createdAt}, ${before.id})`),
      before === null
        ? []
        : rows(
            isNotNull(t.lookUps),
            sql`(${t.createdAt}, ${t.id}) >= (${before.createdAt}, ${before.id})`,
            lte(t.createdAt, before.createdAt + PACKED_SPAN_MS),
            lte(t.firstCreatedAt, before.createdAt),
          ),
    ]);
    return [...straddling, ...below].slice(0, count).map(({ firstCreatedAt, ...row }) => row);
  }

  async expireBuckets(now: number): Promise<number> {
    return this.writeOffExpired(null, now);
  }

  /** The database's time in epoch milliseconds: the one clock all instances share, for the ages of claims and reservations. */
  private databaseNow() {
    return this.client`(extract(epoch from now()) * 1000)::bigint`;
  }

  priceStates(query: HistoryQuery) {
    return this.history.priceStates(query);
  }

  priceDays(query: HistoryQuery) {
    return this.history.priceDays(query);
  }
}
