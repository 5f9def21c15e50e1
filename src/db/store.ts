// The store interface: everything the service keeps, behind plain async methods. Business rules
// (who may do what, what a request costs, which outcome is billed) live above it in the modules;
// each implementation keeps only the storage rules: atomicity, FEFO order, no overdraw.
import type {
  CompleteOrderInput,
  CompleteOrderResult,
  CreditGrant,
  InvoiceRecord,
  NewOrder,
  Order,
  PaymentInput,
  ProviderEvent,
  RenewSubscriptionInput,
  SubscriptionRecord,
} from "./billing/records";
import type { ClaimedDelivery, ClaimRequest, DeliveryAttempt, NewWebhookEndpoint, WebhookDelivery, WebhookEndpoint } from "./webhooks/records";
import type {
  FeedRun,
  FeedSource,
  FeedSourceTrust,
  FeedTokenCredential,
  FeedTokenRecord,
  FinishFeedRun,
  NewFeedSource,
  NewFeedToken,
  PriceHistoryEntry,
  SourceFreshness,
} from "./feeds/records";
import type { FeedWriter } from "./feeds/writers";
import type { CreateWatchResult, NewWatch, PriceWatch, WatchBatchInput, WatchBatchResult } from "./watches/records";
import type { PriceHistoryReads } from "./history/records";

export type KeyStatus = "ACTIVE" | "ROTATED" | "REVOKED";
export type BucketSource = "pack" | "subscription" | "grant" | "trial";
export type TransactionType = "purchase" | "subscription" | "grant" | "trial" | "usage" | "expiry" | "refund" | "adjustment";
export type Availability = "in_stock" | "out_of_stock" | "preorder" | "unknown";
export type Condition = "new" | "used" | "refurbished";
export type Role = "owner" | "member";

export interface Organization {
  id: string;
  name: string;
  createdAt: number;
}

export interface User {
  id: string;
  email: string | null;
  name: string;
  subject: string | null;
  organizationId: string | null;
  role: Role;
  createdAt: number;
}

export interface ApiKeyRecord {
  id: string;
  organizationId: string;
  name: string;
  keyPrefix: string;
  status: KeyStatus;
  replacedBy: string | null;
  createdBy: { id: string; name: string; email: string | null };
  createdAt: number;
  lastUsedAt: number | null;
  expiresAt: number | null;
  monthlyCreditLimit: number | null;
  rateLimit: number | null;
}

/**
 * A key's own fences; null means none: no expiry, only the organization's balance, the
 * service's RATE_LIMIT.
 */
export interface KeyControls {
  expiresAt: number | null;
  /** Credits the key may spend per calendar month (UTC). */
  monthlyCreditLimit: number | null;
  /** Requests per second on the data endpoint. */
  rateLimit: number | null;
}

/** The few columns the bearer guard and the data endpoint need, read on every data request. */
export interface KeyCredential extends KeyControls {
  id: string;
  /** The id of the first key of its rotation line (its own id for a key no rotation made): its replacements share it, and with it one rate-limit bucket. */
  lineId: string;
  organizationId: string;
  keyPrefix: string;
  keyHash: string;
  status: KeyStatus;
  /** Read with the key by a store that can do so in the same statement (PostgreSQL), or remembered since, for reserveCredits. */
  balance?: BalanceAtKeyRead;
}

/**
 * The organization's spendable credits at the key read's `now` (not less what this process holds),
 * and whether the key's requests take the capped path (a monthly credit limit, or no longer ACTIVE).
 * `remembered`: not read with this key but kept in memory (an earlier read, a debit's reading under
 * lock, or another instance's notice); too few of them is read again before a request is refused.
 */
export interface BalanceAtKeyRead {
  spendable: number;
  capped: boolean;
  remembered?: true;
}

export interface NewApiKey extends Partial<KeyControls> {
  id: string;
  organizationId: string;
  name: string;
  keyPrefix: string;
  keyHash: string;
  createdBy: string;
  createdAt: number;
}

/**
 * What a rotation makes anew; the name and the controls are copied from the rotated key's row in
 * the rotation's own write, so a control change can never fall between reading and copying them.
 */
export type KeyReplacement = Omit<NewApiKey, "name" | keyof KeyControls>;

export interface ProductRecord {
  gtin: string;
  title: string;
  brand: string | null;
  imageUrl: string | null;
}

export interface OfferRecord {
  merchantId: string;
  merchantName: string;
  priceAmount: number;
  currency: string;
  shippingAmount: number | null;
  availability: Availability;
  condition: Condition;
  url: string | null;
  observedAt: number;
}

/** One valid feed record, already normalized; `offer` is absent for product-only records. */
export interface FeedRecord {
  product: { gtin: string; title?: string; brand?: string; imageUrl?: string };
  offer?: Omit<OfferRecord, "merchantName"> & { merchantName?: string };
}

export interface Bucket {
  id: string;
  organizationId: string;
  source: BucketSource;
  granted: number;
  remaining: number;
  expiresAt: number | null;
  createdAt: number;
}

export interface Balance {
  available: number;
  reserved: number;
  buckets: Bucket[];
}

export interface LedgerTransaction {
  id: string;
  organizationId: string;
  type: TransactionType;
  amount: number;
  balanceAfter: number;
  bucketId: string | null;
  keyId: string | null;
  requestId: string | null;
  gtin: string | null;
  description: string;
  createdAt: number;
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

export interface TransactionQuery {
  limit: number;
  /** `nextCursor` of the previous page (see src/db/cursor.ts); the next page starts strictly after it. */
  after?: string;
  types?: TransactionType[];
  /** Inclusive lower bound on createdAt. */
  from?: number;
  /** Exclusive upper bound on createdAt. */
  to?: number;
}

export interface SessionRecord {
  id: string;
  tokenHash: string;
  userId: string;
  createdAt: number;
  expiresAt: number;
  absoluteExpiresAt: number;
  revokedAt: number | null;
}

export interface SessionWithUser {
  session: SessionRecord;
  user: User;
}

/** What a committed reservation writes; `idempotency` completes an Idempotency-Key record in the same transaction. */
export interface UsageRecord {
  gtin: string | null;
  description: string;
  now: number;
  idempotency?: IdempotencyAnswer;
  /** The billed look-ups this debit stands for, in the usage counters: a batch's fresh GTINs (default 1). */
  items?: number;
}

/**
 * `available`: the organization's available balance, after this reservation's hold when it is ok.
 * A refusal by the key's monthly credit limit (the balance sufficed) names that limit in `keyLimit`.
 */
export type Reservation = { ok: true; reservationId: string; available: number } | { ok: false; available: number; keyLimit?: number };

/** A dispute of a payment as the provider reports it. */
export interface DisputeReport {
  id: string;
  amount: number;
  status: "open" | "won" | "lost";
}

/**
 * What a refund or dispute report did: `applied` when it was news (not a replay, nor an older state);
 * credits clawed back or reinstated now (both 0 while the payment is not known yet).
 */
export interface PaymentReversalResult {
  applied: boolean;
  clawedBack: number;
  reinstated: number;
  organizationId: string | null;
}

/** Tokens an instance asks of a shared rate-limit bucket: at least `need`, up to `ask` when the bucket holds them. */
export interface RateTokenLease {
  bucket: string;
  capacity: number;
  refillPerMs: number;
  need: number;
  ask: number;
}

/** What a shared bucket granted (0 for all the lease's buckets when one lacked its need) and what it holds after. */
export interface RateTokenGrant {
  bucket: string;
  granted: number;
  tokensLeft: number;
}

/** Token buckets kept in the database, leased to instances in slices. */
export interface SharedRateBuckets {
  /** One lease for several buckets (a request's key and organization), refilled up to `now`: each grants, or none does. */
  lease(leases: readonly RateTokenLease[], now: number): Promise<RateTokenGrant[]>;
  /** Gives back leased tokens an instance did not use. */
  giveBack(returns: ReadonlyArray<{ bucket: string; amount: number }>): Promise<void>;
}

export interface Store extends PriceHistoryReads {
  readonly dialect: "sqlite" | "postgres";
  /** Rate-limit token buckets every instance on the database shares (PostgreSQL); absent where one process serves the database. */
  readonly sharedRateBuckets?: SharedRateBuckets;
  close(): Promise<void>;
  isReachable(): Promise<boolean>;
  /** For `serve`: the store's own upkeep off the request path (SQLite: WAL checkpoints on a worker thread); returns its stop. */
  startBackgroundCheckpoints(): { stop(): Promise<void> };

  createOrganization(input: { name: string; now: number }): Promise<Organization>;
  getOrganization(id: string): Promise<Organization | null>;
  listOrganizations(): Promise<Organization[]>;
  /** The built-in `usr_system` user that owns keys made by the operator CLI. */
  ensureSystemUser(now: number): Promise<User>;

  /** A session and its user, by session id (the part of the token before the dot). */
  findSessionWithUser(sessionId: string): Promise<SessionWithUser | null>;

  insertApiKey(key: NewApiKey): Promise<ApiKeyRecord>;
  /** The key of a hash; `now` dates the balance a store may read with it (KeyCredential.balance). */
  findKeyCredential(keyHash: string, now?: number): Promise<KeyCredential | null>;
  getApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null>;
  getApiKeyById(id: string): Promise<ApiKeyRecord | null>;
  listApiKeys(organizationId: string, query: { limit: number; after?: string }): Promise<Page<ApiKeyRecord>>;
  /** ACTIVE → REVOKED if still ACTIVE; null when the key is missing or not ACTIVE. */
  /** `now` dates the `key.revoked` event (the wall clock when absent). */
  revokeApiKey(organizationId: string, id: string, now?: number): Promise<ApiKeyRecord | null>;
  /**
   * Atomically ACTIVE → ROTATED (replacedBy = replacement.id) and insert the replacement, which takes
   * over the key's name and controls as that write finds them, and its monthly spending; null when
   * the key is missing or not ACTIVE.
   */
  rotateApiKey(organizationId: string, id: string, replacement: KeyReplacement): Promise<ApiKeyRecord | null>;
  /**
   * Sets the given controls of an ACTIVE key (absent ones are kept); null when the key is missing
   * or not ACTIVE.
   */
  updateApiKeyControls(organizationId: string, id: string, controls: Partial<KeyControls>): Promise<ApiKeyRecord | null>;
  /** Credits each of these keys spent in `month` ("YYYY-MM", UTC): committed debits only. */
  monthlySpending(keyIds: string[], month: string): Promise<Map<string, number>>;
  /** Written-behind lastUsedAt: only moves forward. */
  touchApiKeys(lastUsed: Map<string, number>): Promise<void>;

  /**
   * Upserts valid feed records in one transaction; offers keep the newer observedAt. The writer
   * (the operator by default) stamps the offers written with its source (per-source freshness) and
   * decides whether the records' titles, brands and images replace the stored ones (feeds/writers.ts);
   * which merchants it may write is checked before. Price history rows are written by triggers on
   * the offers table.
   */
  applyFeedRecords(records: FeedRecord[], now: number, options?: { writer?: FeedWriter }): Promise<{ products: number; offers: number }>;
  findProductWithOffers(gtin: string): Promise<{ product: ProductRecord; offers: OfferRecord[] } | null>;
  /** findProductWithOffers for several GTINs at once (a batch look-up), in their order. */
  findProductsWithOffers(gtins: readonly string[]): Promise<Array<{ product: ProductRecord; offers: OfferRecord[] } | null>>;
  countProducts(): Promise<number>;
  /** After a large import: fresh planner statistics for the catalogue tables, so the next look-ups use their indexes. */
  refreshCatalogStatistics(): Promise<void>;

  /** Grants credits as a new bucket and its ledger row, in one transaction. */
  grantCredits(input: {
    organizationId: string;
    source: BucketSource;
    type: TransactionType;
    amount: number;
    expiresAt: number | null;
    description: string;
    now: number;
  }): Promise<Bucket>;
  /**
   * Holds `amount` credits of the organization's spendable buckets, soonest-expiring first, for a
   * request in flight; refuses without holding anything when the available balance is short, or when
   * the key's monthly credit limit (read by the store itself, so a change applies at once) cannot
   * take it: what the key spent in `now`'s month plus what its requests in flight hold plus `amount`
   * must stay within the limit. The debit adds to the key's monthly spending in its own transaction.
   * Held credits are not available to other requests of this process (SQLite: in memory, for the one
   * serving process). PostgreSQL holds a capped key's credits in reservation rows, which every
   * instance sees; for every other key it only checks the balance, holds the credits in memory, and
   * the debit takes them from the buckets (see PostgresStore.reserveCredits). `balance`, read with
   * the request's key, spares a store that has it a second read.
   */
  reserveCredits(input: {
    organizationId: string;
    amount: number;
    keyId: string | null;
    requestId: string;
    now: number;
    balance?: BalanceAtKeyRead;
  }): Promise<Reservation>;
  /**
   * Debits the held credits with one usage ledger row, in one transaction; false when already
   * committed or released. Throws CreditsSpentMeanwhile when the credits were not held in the
   * database (see reserveCredits) and are gone.
   */
  commitReservation(reservationId: string, usage: UsageRecord): Promise<boolean>;
  /**
   * Gives a reservation's credits back to their buckets; false when it was already committed or
   * released. What a refund is owed from those buckets (see refundPayment) is paid first, with a
   * `refund` ledger row dated `now`, in the same transaction.
   */
  releaseReservation(reservationId: string, now: number): Promise<boolean>;
  /**
   * The first half of a partial commit: gives back all but `keep` credits of a reservation (0 <
   * `keep` < its amount), as releaseReservation would (refunds owed paid first), so that committing
   * it then debits `keep`. The credits kept are the soonest-expiring ones it holds. False when the
   * reservation is no longer held (committed, released or swept): nothing was given back.
   */
  shrinkReservation(reservationId: string, keep: number, now: number): Promise<boolean>;
  /**
   * Called once when `serve` starts: gives back what a crashed predecessor left in flight. SQLite
   * (one serving process per file, enforced by `serve`'s lock): every in-progress Idempotency-Key
   * claim at once, and what refunds were owed from the holds that died with it. PostgreSQL (other
   * instances may be serving): stale reservations only; claims age out on their own.
   */
  recoverInFlightWork(now: number): Promise<void>;
  /**
   * Releases reservations older than STALE_RESERVATION_MS by the store's own clock (PostgreSQL's,
   * shared by every instance), left by a crashed instance; nothing to do where holds live in memory.
   * `now` dates the rows a release writes.
   */
  releaseStaleReservations(now: number): Promise<number>;
  /**
   * Credits a new request could reserve: spendable, less what requests in flight hold. `balance`,
   * read with the request's key and nothing awaited since, spares a store that has it a second read.
   */
  availableCredits(organizationId: string, now: number, balance?: BalanceAtKeyRead): Promise<number>;
  /**
   * A pure read (the operator CLI runs it beside `serve`): spendable credits of unexpired buckets and
   * the credits held by requests in flight. Expired credits not yet written off by expireBuckets
   * are in neither, so the ledger sum equals available + reserved once the expiry job has run.
   */
  getBalance(organizationId: string, now: number): Promise<Balance>;
  listTransactions(organizationId: string, query: TransactionQuery): Promise<Page<LedgerTransaction>>;
  /**
   * Adds written-behind request counts (unbilled outcomes) to the hourly usage counters. Billed
   * look-ups are counted by commitReservation itself, in the debit's transaction.
   */
  addUsageCounts(counts: UsageCount[]): Promise<void>;
  /**
   * The usage counters of the periods of `periodMs` (an hour or a UTC day: both are kept) starting
   * in `from` ≤ start < `to`, per period, reason and, with `byKey`, key. Reads the counters only, never the ledger.
   */
  usageTotals(organizationId: string, query: { from: number; to: number; periodMs: number; byKey: boolean }): Promise<UsageTotal[]>;
  /** Writes off every expired bucket with an `expiry` ledger row; returns how many were written off. */
  expireBuckets(now: number): Promise<number>;

  // --- sessions, sign-in and invitations ---
  /**
   * One sign-in of an identity, in one transaction: the user of `subject`; or, on its first sign-in, a
   * new user that takes up (and consumes) the invitation for `email`, or else owns a new organization
   * granted `trialCredits` (a `trial` bucket and its ledger row). `email-taken` when another subject
   * already has that email.
   */
  signInSubject(input: {
    subject: string;
    email: string;
    name: string;
    newOrganizationName: string;
    trialCredits: number;
    now: number;
  }): Promise<SignInOutcome>;
  getUserByEmail(email: string): Promise<User | null>;
  insertSession(session: SessionRecord): Promise<void>;
  /**
   * Replaces the token hash and expiry of a live session, only while `currentTokenHash` is still its
   * hash (so of two concurrent refreshes with one token, one wins); null otherwise.
   */
  rotateSessionToken(input: { id: string; currentTokenHash: string; newTokenHash: string; expiresAt: number; now: number }): Promise<SessionRecord | null>;
  /** Marks a session revoked; false when it was already revoked or does not exist. */
  revokeSession(id: string, now: number): Promise<boolean>;
  /** Deletes the sessions no token can use again (revoked, or expired at `now`); returns how many. */
  deleteDeadSessions(now: number): Promise<number>;
  /** Creates or replaces the invitation of an email address. */
  upsertInvitation(invitation: Invitation): Promise<Invitation>;

  // --- idempotency records ---
  /**
   * Claims (scope, keyHash) for a new request: inserts an in-progress record when there is none, or
   * replaces one that expired or was abandoned in progress (createdAt < abandonedBefore). Otherwise
   * returns the record that is there, untouched.
   */
  claimIdempotencyKey(input: {
    scope: string;
    keyHash: string;
    requestHash: string;
    now: number;
    ttlMs: number;
    abandonAfterMs: number;
  }): Promise<IdempotencyClaim>;
  /** Stores the answer of a claimed request and marks it done, if the claim `claimedAt` is still this request's. */
  completeIdempotencyKey(input: IdempotencyAnswer): Promise<void>;
  /** Drops an in-progress claim (the request failed), so the same key can be retried; never another request's later claim. */
  releaseIdempotencyKey(input: { scope: string; keyHash: string; claimedAt: number }): Promise<void>;
  deleteExpiredIdempotencyRecords(now: number): Promise<number>;
  // --- billing ---
  createOrder(order: NewOrder): Promise<Order>;
  getOrder(id: string): Promise<Order | null>;
  findOrderByProviderRef(providerRef: string): Promise<Order | null>;
  /** Newest first, all organizations unless one is given. */
  listOrders(query: { organizationId?: string; limit: number; after?: string }): Promise<Page<Order>>;
  /**
   * Completes an order at most once: pending → completed, and in the same transaction the event
   * row, the grant (bucket + ledger row), the payment, the local subscription and the local invoice.
   */
  completeOrder(input: CompleteOrderInput): Promise<CompleteOrderResult>;
  /** Grants credits paid outside an order (a Stripe subscription invoice) exactly once per event. */
  applyPaidGrant(input: {
    event: ProviderEvent;
    organizationId: string;
    grant: CreditGrant;
    payment: PaymentInput;
    now: number;
  }): Promise<{ applied: boolean; bucket: Bucket | null }>;
  /**
   * Records the cumulative refunded amount of a payment and settles the payment's credits against
   * it: the unspent credits of what was refunded are clawed back with a `refund` ledger row. The
   * amount only moves forward, so a replay or an older event takes nothing more. The payment may not
   * be known yet (providers deliver in any order): the refund is kept under its ref, and the grant
   * that records the payment later settles against it in its own transaction. Credits held by
   * requests in flight are not taken: those that requests commit were spent; those they release are
   * owed to the refund (the bucket's clawback), paid by the release itself.
   */
  refundPayment(input: { event: ProviderEvent | null; ref: string; refundedAmount: number; description: string; now: number }): Promise<PaymentReversalResult>;
  /**
   * Records the dispute of a payment and settles its credits like refundPayment: an open or lost
   * dispute withholds its amount (claw-back), a won one gives back the credits it took. Won and lost
   * are final, so an older "open" report arriving late changes nothing.
   */
  disputePayment(input: { event: ProviderEvent | null; ref: string; dispute: DisputeReport; now: number }): Promise<PaymentReversalResult>;
  hasPayment(ref: string): Promise<boolean>;
  /** Records an event that has no effect here, so that it is acknowledged once; false if seen before. */
  recordProviderEvent(event: ProviderEvent, now: number): Promise<boolean>;

  listInvoices(organizationId: string, query: { limit: number; after?: string }): Promise<Page<InvoiceRecord>>;
  getInvoice(id: string): Promise<InvoiceRecord | null>;

  listSubscriptions(organizationId: string): Promise<SubscriptionRecord[]>;
  /** Active subscriptions whose period has ended, oldest period end first. */
  listDueSubscriptions(now: number, limit: number): Promise<SubscriptionRecord[]>;
  /** Moves an active subscription to its next period with its grant and invoice; false if another run did it. */
  renewSubscription(input: RenewSubscriptionInput): Promise<{ applied: boolean; bucket: Bucket | null; invoice: InvoiceRecord | null }>;
  /** active → canceled; the current period's credits stay until they expire. Null when not active or not the organization's. */
  cancelSubscription(organizationId: string, subscriptionId: string, now: number): Promise<SubscriptionRecord | null>;

  // --- feeds ---
  /** Null when the name is taken (by a source not removed). */
  createFeedSource(source: NewFeedSource): Promise<FeedSource | null>;
  /** A source by id or by name, removed ones included. */
  getFeedSource(idOrName: string): Promise<FeedSource | null>;
  /** Sources not removed, oldest first. */
  listFeedSources(): Promise<FeedSource[]>;
  /** Marks a source removed (its runs and offers stay; its tokens stop working); null when missing or already removed. */
  removeFeedSource(id: string, now: number): Promise<FeedSource | null>;
  /** Changes a source's merchants or precedence; null when missing or removed. */
  setFeedSourceTrust(id: string, trust: FeedSourceTrust): Promise<FeedSource | null>;
  /**
   * Claims the scheduled sources that are due by the store's clock (PostgreSQL's, shared by every
   * instance) and not leased: each claimed source gets `owner`'s lease, for its worst case
   * ((retries + 1) × timeout) plus `leaseMarginMs`, and its next run one interval later, in one
   * statement, so of several instances exactly one runs each period of a source.
   */
  claimDueFeedSources(input: { owner: string; now: number; leaseMarginMs: number; limit: number }): Promise<FeedSource[]>;
  /** Leases one source for a run the operator asked for; null when another run holds it (or it is removed). */
  claimFeedSource(input: { id: string; owner: string; now: number; leaseMs: number }): Promise<FeedSource | null>;
  /** Stores a run's report, updates the source (last run, last success, validators) and releases `leaseOwner`'s lease, in one transaction. */
  finishFeedRun(input: FinishFeedRun): Promise<void>;
  /** Ends `owner`'s lease on a source without a run (a directory scan that found nothing new). */
  releaseFeedLease(sourceId: string, owner: string): Promise<void>;
  /** Extends `owner`'s lease to `leaseMs` from now (the database's clock on PostgreSQL); false when `owner` no longer holds it. */
  renewFeedLease(input: { id: string; owner: string; now: number; leaseMs: number }): Promise<boolean>;
  listFeedRuns(sourceId: string, query: { limit: number; after?: string }): Promise<Page<FeedRun>>;
  hasImportedFeedFile(sourceId: string, file: { name: string; size: number; modifiedAt: number }): Promise<boolean>;
  insertFeedToken(token: NewFeedToken): Promise<FeedTokenRecord>;
  findFeedTokenCredential(id: string): Promise<FeedTokenCredential | null>;
  listFeedTokens(): Promise<FeedTokenRecord[]>;
  /** Sets revokedAt once; null when the token does not exist or was already revoked. */
  revokeFeedToken(id: string, now: number): Promise<FeedTokenRecord | null>;
  /** Offers per source and how many are observed at or after `freshSince`. */
  feedFreshness(freshSince: number): Promise<SourceFreshness[]>;
  /** Price history of one product (one offer with `merchantId`), oldest first. */
  listPriceHistory(gtin: string, merchantId?: string): Promise<PriceHistoryEntry[]>;
  /** Deletes the price history observed before `before`; returns how many rows. */
  prunePriceHistory(before: number): Promise<number>;

  // --- webhooks ---
  // Events are written by the store methods that cause them, in their transaction (the outbox), with
  // a delivery for each enabled endpoint of the organization subscribed to the type.
  createWebhookEndpoint(endpoint: NewWebhookEndpoint): Promise<WebhookEndpoint>;
  getWebhookEndpoint(organizationId: string, id: string): Promise<WebhookEndpoint | null>;
  /** Newest first. */
  listWebhookEndpoints(organizationId: string, query: { limit: number; after?: string }): Promise<Page<WebhookEndpoint>>;
  /** Deletes the endpoint and its deliveries; false when it is not the organization's. */
  deleteWebhookEndpoint(organizationId: string, id: string): Promise<boolean>;
  /** Replaces the secret; the previous one keeps signing until `previousSecretExpiresAt`. Null when not the organization's. */
  rotateWebhookSecret(organizationId: string, id: string, input: { secret: string; previousSecretExpiresAt: number }): Promise<WebhookEndpoint | null>;
  /** disabled → enabled, with a fresh failing streak; deliveries still pending resume. Null when not the organization's. */
  enableWebhookEndpoint(organizationId: string, id: string): Promise<WebhookEndpoint | null>;
  /** Writes a `webhook.test` event with a delivery to this endpoint only; false when not the organization's. */
  sendTestWebhookEvent(organizationId: string, endpointId: string, input: { eventId: string; now: number }): Promise<boolean>;
  /** An endpoint's deliveries, newest event first; the cursor is opaque. */
  listWebhookDeliveries(endpointId: string, query: { limit: number; after?: string }): Promise<Page<WebhookDelivery>>;
  getLowCreditThreshold(organizationId: string): Promise<number | null>;
  setLowCreditThreshold(organizationId: string, threshold: number | null): Promise<void>;
  /**
   * Claims pending deliveries due at `now` of enabled endpoints that no live lease holds, giving each
   * `owner`'s lease for `leaseMs` (judged by the database's clock on PostgreSQL): each delivery is
   * being sent by at most one instance at a time. Claims take turns (one at a time per database) and
   * choose fairly (chooseFairly): the leases already live count against the per-endpoint and
   * per-organization limits, whichever instance holds them.
   */
  claimWebhookDeliveries(input: ClaimRequest): Promise<ClaimedDelivery[]>;
  /**
   * Records an attempt, if `owner` still holds the delivery's lease, and releases it; a success clears
   * the endpoint's failing streak, a failure starts it or, after `disableAfterMs` of it, disables the endpoint.
   */
  finishWebhookDelivery(attempt: DeliveryAttempt): Promise<boolean>;
  /** Fails the oldest pending deliveries of every endpoint holding more than MAX_PENDING_PER_ENDPOINT (BACKLOG_DROPPED); returns how many. */
  dropWebhookBacklogOverflow(): Promise<number>;

  // --- price watches (src/db/watches) ---
  /** Creates a watch that starts from the state it sees now; refused, with nothing written, when the organization already has `limit` watches. */
  createWatch(watch: NewWatch, rules: { limit: number; freshnessWindowMs: number }): Promise<CreateWatchResult>;
  /** Null when the watch is not the organization's. */
  getWatch(organizationId: string, id: string): Promise<PriceWatch | null>;
  /** Newest first. */
  listWatches(organizationId: string, query: { limit: number; after?: string }): Promise<Page<PriceWatch>>;
  /** False when the watch is not the organization's. */
  deleteWatch(organizationId: string, id: string): Promise<boolean>;
  /**
   * One run of the watch evaluator, in one transaction: resumes the paused watches of organizations
   * that can pay for an event again, consumes up to `limit` queued changes (watched products whose
   * offers changed), evaluates the products' watches, debits each event's credits (a usage ledger
   * row, FEFO, planned by planDebits like a look-up's debit), writes the `price.changed` events
   * to the outbox, pauses the watches of organizations that could not pay, and stores each watch's
   * new state. A crash before its commit leaves the changes queued; nothing is sent or billed twice.
   */
  runWatchEvaluation(input: WatchBatchInput): Promise<WatchBatchResult>;

  getStripeCustomerId(organizationId: string): Promise<string | null>;
  /** Sets the organization's Stripe customer if it has none; returns the one that is stored. */
  setStripeCustomerId(organizationId: string, customerId: string): Promise<string>;
  findOrganizationByStripeCustomer(customerId: string): Promise<Organization | null>;
}

// The ledger's periods, reasons, errors and ages, where the ledger core and the stores both read them.
export * from "./ledger/model";
import type { UsageCount, UsageTotal } from "./ledger/model";

/** The built-in user that owns keys made by the operator CLI (docs/api.md, "API keys"). */
export const SYSTEM_USER_ID = "usr_system";

// --- sessions, sign-in and invitations ---

export interface Invitation {
  email: string;
  organizationId: string;
  role: Role;
  createdAt: number;
}

export type SignInOutcome = { outcome: "existing" | "joined" | "created"; user: User } | { outcome: "email-taken" };

// --- idempotency records ---

export interface IdempotencyRecord {
  scope: string;
  keyHash: string;
  requestHash: string;
  status: "in-progress" | "done";
  responseStatus: number | null;
  responseBody: string | null;
  createdAt: number;
  expiresAt: number;
}

/**
 * `claimedAt` is the claim's own time, which fences it: completing or releasing a claim, and the debit
 * that completes it, take effect only while the record still carries that time, so a request whose
 * claim was taken over (abandoned, then claimed again) can neither answer for the new one nor bill.
 * Ages are judged by the store's clock: PostgreSQL's for every instance alike, so clock skew between
 * instances cannot make a running request look abandoned; SQLite's single serve process's own.
 */
export type IdempotencyClaim = { claimed: true; claimedAt: number } | { claimed: false; record: IdempotencyRecord };

/** The stored answer of a claimed request. */
export interface IdempotencyAnswer {
  scope: string;
  keyHash: string;
  claimedAt: number;
  responseStatus: number;
  responseBody: string;
}
