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
} from "./billing-records";

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
}

/** The few columns the bearer guard needs, read on every data request. */
export interface KeyCredential {
  id: string;
  organizationId: string;
  keyPrefix: string;
  keyHash: string;
  status: KeyStatus;
}

export interface NewApiKey {
  id: string;
  organizationId: string;
  name: string;
  keyPrefix: string;
  keyHash: string;
  createdBy: string;
  createdAt: number;
}

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
  idempotency?: { scope: string; keyHash: string; responseStatus: number; responseBody: string };
}

export type Reservation = { ok: true; reservationId: string } | { ok: false; available: number };

export interface Store {
  readonly dialect: "sqlite" | "postgres";
  close(): Promise<void>;
  isReachable(): Promise<boolean>;

  createOrganization(input: { name: string; now: number }): Promise<Organization>;
  getOrganization(id: string): Promise<Organization | null>;
  listOrganizations(): Promise<Organization[]>;
  /** The built-in `usr_system` user that owns keys made by the operator CLI. */
  ensureSystemUser(now: number): Promise<User>;

  /** A session and its user, by session id (the part of the token before the dot). */
  findSessionWithUser(sessionId: string): Promise<SessionWithUser | null>;

  insertApiKey(key: NewApiKey): Promise<ApiKeyRecord>;
  findKeyCredential(keyHash: string): Promise<KeyCredential | null>;
  getApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null>;
  getApiKeyById(id: string): Promise<ApiKeyRecord | null>;
  listApiKeys(organizationId: string, query: { limit: number; after?: string }): Promise<Page<ApiKeyRecord>>;
  /** ACTIVE → REVOKED if still ACTIVE; null when the key is missing or not ACTIVE. */
  revokeApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null>;
  /** Atomically ACTIVE → ROTATED (replacedBy = replacement.id) and insert the replacement; null when not ACTIVE. */
  rotateApiKey(organizationId: string, id: string, replacement: NewApiKey): Promise<ApiKeyRecord | null>;
  /** Written-behind lastUsedAt: only moves forward. */
  touchApiKeys(lastUsed: Map<string, number>): Promise<void>;

  /** Upserts valid feed records in one transaction; offers keep the newer observedAt. */
  applyFeedRecords(records: FeedRecord[], now: number): Promise<{ products: number; offers: number }>;
  findProductWithOffers(gtin: string): Promise<{ product: ProductRecord; offers: OfferRecord[] } | null>;
  countProducts(): Promise<number>;

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
   * request in flight; refuses without holding anything when the available balance is short.
   * Held credits are not available to other requests (SQLite: in this process's memory; PostgreSQL:
   * reservation rows, so every instance sees them).
   */
  reserveCredits(input: { organizationId: string; amount: number; keyId: string | null; requestId: string; now: number }): Promise<Reservation>;
  /** Debits the held credits with one usage ledger row, in one transaction; false when already committed or released. */
  commitReservation(reservationId: string, usage: UsageRecord): Promise<boolean>;
  /** Gives a reservation's credits back to their buckets; false when it was already committed or released. */
  releaseReservation(reservationId: string): Promise<boolean>;
  /**
   * Called once when `serve` starts: gives back what a crashed predecessor left in flight. SQLite
   * (one serving process per file): every in-progress Idempotency-Key claim, at once. PostgreSQL
   * (other instances may be serving): stale reservations only; claims age out on their own.
   */
  recoverInFlightWork(now: number): Promise<void>;
  /** Releases reservations older than `olderThan`, left by a crashed instance (nothing to do where holds live in memory). */
  releaseStaleReservations(olderThan: number): Promise<number>;
  availableCredits(organizationId: string, now: number): Promise<number>;
  getBalance(organizationId: string, now: number): Promise<Balance>;
  listTransactions(organizationId: string, query: TransactionQuery): Promise<Page<LedgerTransaction>>;
  /** Writes off every expired bucket with an `expiry` ledger row; returns how many were written off. */
  expireBuckets(now: number): Promise<number>;

  // --- sessions, sign-in and invitations (issue 3) ---
  /**
   * One sign-in of an identity, in one transaction: the user of `subject`; or, on its first sign-in, a
   * new user that takes up (and consumes) the invitation for `email`, or else owns a new organization
   * granted `trialCredits` (a `trial` bucket and its ledger row). `email-taken` when another subject
   * already has that email.
   */
  signInSubject(input: { subject: string; email: string; name: string; newOrganizationName: string; trialCredits: number; now: number }): Promise<SignInOutcome>;
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

  // --- idempotency records (issue 3) ---
  /**
   * Claims (scope, keyHash) for a new request: inserts an in-progress record when there is none, or
   * replaces one that expired or was abandoned in progress (createdAt < abandonedBefore). Otherwise
   * returns the record that is there, untouched.
   */
  claimIdempotencyKey(input: { scope: string; keyHash: string; requestHash: string; now: number; expiresAt: number; abandonedBefore: number }): Promise<IdempotencyClaim>;
  /** Stores the answer of a claimed request and marks it done. */
  completeIdempotencyKey(input: { scope: string; keyHash: string; responseStatus: number; responseBody: string }): Promise<void>;
  /** Drops an in-progress claim (the request failed), so the same key can be retried. */
  releaseIdempotencyKey(scope: string, keyHash: string): Promise<void>;
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
  applyPaidGrant(input: { event: ProviderEvent; organizationId: string; grant: CreditGrant; payment: PaymentInput; now: number }): Promise<{ applied: boolean; bucket: Bucket | null }>;
  /**
   * Claws back the unspent credits of a refunded payment with a `refund` ledger row. The refunded
   * amount is cumulative and only moves forward, so a replay or an older event takes nothing more.
   */
  refundPayment(input: { event: ProviderEvent | null; ref: string; refundedAmount: number; description: string; now: number }): Promise<{ applied: boolean; clawedBack: number; organizationId: string | null }>;
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

  getStripeCustomerId(organizationId: string): Promise<string | null>;
  /** Sets the organization's Stripe customer if it has none; returns the one that is stored. */
  setStripeCustomerId(organizationId: string, customerId: string): Promise<string>;
  findOrganizationByStripeCustomer(customerId: string): Promise<Organization | null>;
}

/** A reservation older than this belongs to a request that died (crash, kill): give its credits back. */
export const STALE_RESERVATION_MS = 60_000;

/** The built-in user that owns keys made by the operator CLI (CONTRACT.md "API keys"). */
export const SYSTEM_USER_ID = "usr_system";

// --- sessions, sign-in and invitations (issue 3) ---

export interface Invitation {
  email: string;
  organizationId: string;
  role: Role;
  createdAt: number;
}

export type SignInOutcome =
  | { outcome: "existing" | "joined" | "created"; user: User }
  | { outcome: "email-taken" };

// --- idempotency records (issue 3) ---

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

export type IdempotencyClaim = { claimed: true } | { claimed: false; record: IdempotencyRecord };
