import { sql } from "drizzle-orm";
import { bigint, boolean, check, doublePrecision, index, integer, json, jsonb, pgTable, primaryKey, text, uniqueIndex } from "drizzle-orm/pg-core";
import type { LedgerEntry } from "../ledger/debit-plan";

// The PostgreSQL twin of schema/sqlite.ts: same tables, columns and indexes, so one store
// interface maps onto both. Timestamps are bigint epoch milliseconds read as JS numbers; credits
// and ledger amounts are bigint like SQLite's 64-bit integers; money amounts are integer minor units.

const epochMs = (name: string) => bigint(name, { mode: "number" });
const credits = (name: string) => bigint(name, { mode: "number" });

export const organizations = pgTable(
  "organizations",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    stripeCustomerId: text("stripe_customer_id"),
    /** Running sum of the organization's ledger (= available + reserved); the next balanceAfter. */
    ledgerBalance: credits("ledger_balance").notNull().default(0),
    /** A debit that takes the ledger balance from at least this to below it writes a `credits.low` webhook event; null: none. */
    lowCreditThreshold: credits("low_credit_threshold"),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [uniqueIndex("organizations_stripe_customer_unique").on(table.stripeCustomerId)],
);

export const users = pgTable(
  "users",
  {
    id: text("id").primaryKey(),
    email: text("email"),
    name: text("name").notNull(),
    subject: text("subject"),
    organizationId: text("organization_id").references(() => organizations.id),
    role: text("role", { enum: ["owner", "member"] })
      .notNull()
      .default("member"),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [uniqueIndex("users_subject_unique").on(table.subject), uniqueIndex("users_email_unique").on(table.email)],
);

export const invitations = pgTable("invitations", {
  email: text("email").primaryKey(),
  organizationId: text("organization_id")
    .notNull()
    .references(() => organizations.id),
  role: text("role", { enum: ["owner", "member"] })
    .notNull()
    .default("member"),
  createdAt: epochMs("created_at").notNull(),
});

export const sessions = pgTable(
  "sessions",
  {
    id: text("id").primaryKey(),
    tokenHash: text("token_hash").notNull(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    createdAt: epochMs("created_at").notNull(),
    expiresAt: epochMs("expires_at").notNull(),
    absoluteExpiresAt: epochMs("absolute_expires_at").notNull(),
    revokedAt: epochMs("revoked_at"),
  },
  (table) => [uniqueIndex("sessions_token_hash_unique").on(table.tokenHash)],
);

export const apiKeys = pgTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    name: text("name").notNull(),
    keyPrefix: text("key_prefix").notNull(),
    keyHash: text("key_hash").notNull(),
    status: text("status", { enum: ["ACTIVE", "ROTATED", "REVOKED"] }).notNull(),
    replacedBy: text("replaced_by"),
    /** The first key of its rotations (null: this key is): a monthly credit limit fences the whole line. */
    lineId: text("line_id"),
    createdBy: text("created_by")
      .notNull()
      .references(() => users.id),
    createdAt: epochMs("created_at").notNull(),
    lastUsedAt: epochMs("last_used_at"),
    /** Per-key controls; null: none. From then on the key is refused (401). */
    expiresAt: epochMs("expires_at"),
    /** Credits the key may spend per calendar month (UTC); null: only the organization's balance limits it. */
    monthlyCreditLimit: credits("monthly_credit_limit"),
    /** Requests per second on the data endpoint; null: the service's RATE_LIMIT. */
    rateLimit: integer("rate_limit"),
  },
  (table) => [
    uniqueIndex("api_keys_key_hash_unique").on(table.keyHash),
    index("api_keys_org_idx").on(table.organizationId, table.id),
    index("api_keys_line_idx").on(table.lineId),
  ],
);

/**
 * Credits each key spent per calendar month (UTC, `month` = "YYYY-MM"), moved by the debit's own
 * transaction: the monthly credit limit and `creditsSpentThisMonth` read one row, never the ledger.
 */
export const apiKeyMonthlyUsage = pgTable(
  "api_key_monthly_usage",
  {
    keyId: text("key_id")
      .notNull()
      .references(() => apiKeys.id),
    month: text("month").notNull(),
    spent: credits("spent").notNull().default(0),
  },
  (table) => [primaryKey({ columns: [table.keyId, table.month] })],
);

export const products = pgTable("products", {
  gtin: text("gtin").primaryKey(),
  title: text("title").notNull(),
  brand: text("brand"),
  imageUrl: text("image_url"),
  updatedAt: epochMs("updated_at").notNull(),
  /** The feed source whose title, brand and image the product shows; null: the operator's (import, demo data, or written before sources had precedence). */
  describedBy: text("described_by"),
});

export const merchants = pgTable("merchants", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
});

export const offers = pgTable(
  "offers",
  {
    gtin: text("gtin")
      .notNull()
      .references(() => products.gtin),
    merchantId: text("merchant_id")
      .notNull()
      .references(() => merchants.id),
    priceAmount: integer("price_amount").notNull(),
    currency: text("currency").notNull(),
    shippingAmount: integer("shipping_amount"),
    availability: text("availability", { enum: ["in_stock", "out_of_stock", "preorder", "unknown"] }).notNull(),
    condition: text("condition", { enum: ["new", "used", "refurbished"] }).notNull(),
    url: text("url"),
    observedAt: epochMs("observed_at").notNull(),
    /** The feed source that last wrote the offer (null: the operator's `import`, demo data); per-source freshness counts by it. */
    sourceId: text("source_id"),
    /**
     * When the offer's price, currency, shipping and availability were first observed as they are now,
     * and by which source: the newest entry of its price history (older ones are in offer_price_history).
     * Every write sets them; nullable only because a column added to a filled table has to be.
     */
    stateSince: epochMs("state_since"),
    stateSourceId: text("state_source_id"),
  },
  // Only offers written for a feed source are indexed by it: what the freshness metrics read, and
  // the operator's `import` (no source) leaves one index fewer to write per offer.
  (table) => [
    primaryKey({ columns: [table.gtin, table.merchantId] }),
    index("offers_source_idx").on(table.sourceId, table.observedAt).where(sql`${table.sourceId} IS NOT NULL`),
  ],
);

export const creditBuckets = pgTable(
  "credit_buckets",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    source: text("source", { enum: ["pack", "subscription", "grant", "trial"] }).notNull(),
    granted: credits("granted").notNull(),
    remaining: credits("remaining").notNull(),
    /** Credits a refund claimed while reservations held them: a release pays them off (a `refund` row) before anyone can spend them. */
    clawbackOwed: credits("clawback_owed").notNull().default(0),
    expiresAt: epochMs("expires_at"),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [
    // Not on `remaining`: every reservation and debit changes it, and an indexed column that changes
    // rules out HOT updates, so each one left dead index entries that later reservations walked.
    index("credit_buckets_org_expiry_idx").on(table.organizationId, table.expiresAt),
    // Several instances debit the same buckets: the database itself refuses an overdraw.
    check("credit_buckets_remaining_not_negative", sql`${table.remaining} >= 0`),
  ],
);

export const creditTransactions = pgTable(
  "credit_transactions",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    type: text("type", { enum: ["purchase", "subscription", "grant", "trial", "usage", "expiry", "refund", "adjustment"] }).notNull(),
    amount: credits("amount").notNull(),
    balanceAfter: credits("balance_after").notNull(),
    bucketId: text("bucket_id"),
    keyId: text("key_id"),
    requestId: text("request_id"),
    gtin: text("gtin"),
    description: text("description").notNull(),
    createdAt: epochMs("created_at").notNull(),
    /**
     * A usage row written by a lease settlement packs its look-ups (see PackedLedgerEntry): the row
     * holds their sum, `created_at` is the latest one's time and `first_created_at` the earliest's,
     * at most a minute apart (src/db/ledger/packed-ledger.ts). Null on every other row. The view ledger_entries unpacks them.
     */
    lookUps: json("look_ups").$type<PackedLedgerEntry[]>(),
    firstCreatedAt: epochMs("first_created_at"),
  },
  (table) => [
    // Keyset pagination, newest first, on (createdAt, id): one index range per page, with or without a type.
    index("credit_transactions_org_created_idx").on(table.organizationId, table.createdAt, table.id),
    index("credit_transactions_org_type_created_idx").on(table.organizationId, table.type, table.createdAt, table.id),
    uniqueIndex("credit_transactions_usage_request_unique").on(table.requestId).where(sql`type = 'usage'`),
    // The packed usage rows: a page of the transactions API reads those dated up to a minute past its bound.
    index("credit_transactions_packed_idx").on(table.organizationId, table.createdAt, table.id).where(sql`look_ups IS NOT NULL`),
  ],
);

/** Credits taken out of buckets for a request in flight; committed into a usage row or given back. */
export const reservations = pgTable(
  "reservations",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    amount: credits("amount").notNull(),
    allocations: jsonb("allocations").$type<Array<{ bucketId: string; amount: number }>>().notNull(),
    keyId: text("key_id"),
    requestId: text("request_id").notNull(),
    createdAt: epochMs("created_at").notNull(),
    /** A credit lease's (see CreditLeases): the instance that spends it, and when it lapses by the database's clock. */
    instanceId: text("instance_id"),
    expiresAt: epochMs("expires_at"),
  },
  (table) => [
    index("reservations_org_idx").on(table.organizationId),
    index("reservations_created_idx").on(table.createdAt),
    index("reservations_key_idx").on(table.keyId),
  ],
);

/** A look-up as a settled usage row of credit_transactions packs it: its own ledger entry. */
export type PackedLedgerEntry = Omit<LedgerEntry, "organizationId">;

/** A look-up debited from a credit lease, as a lease_usage row packs it: `id` is its ledger row's. */
export interface PackedLookUp {
  id: string;
  amount: number;
  allocations: Array<{ bucketId: string; amount: number }>;
  keyId: string | null;
  requestId: string;
  gtin: string | null;
  description: string;
  items: number;
  createdAt: number;
}

/**
 * Look-ups debited from a credit lease whose ledger rows are not written yet (see CreditLeases): one
 * row per lease and debit statement, its look-ups packed in `lookUps` (one row and one index entry
 * however many a statement carries), `amount` their sum and `id` its first look-up's. A settlement
 * turns them into usage rows (with their sums, counters, spending and balance events) within half a
 * second, and takes their credits out of their lease's row. Until then their lease's row still holds
 * them (`inLease`), so ledger sum = buckets + reservations; a row written by a version whose debit
 * moved the lease's row (`inLease` false) holds its own: ledger sum = buckets + reservations + those.
 */
export const leaseUsage = pgTable(
  "lease_usage",
  {
    organizationId: text("organization_id").notNull(),
    leaseId: text("lease_id").notNull(),
    id: text("id").notNull(),
    amount: credits("amount").notNull(),
    // json, not jsonb: written once and read whole, so it is kept as sent (no conversion on the debit's path).
    lookUps: json("look_ups").$type<PackedLookUp[]>().notNull(),
    inLease: boolean("in_lease").notNull().default(true),
  },
  // One index: an instance settles its leases' rows, a read its organization's.
  (table) => [primaryKey({ columns: [table.organizationId, table.leaseId, table.id] })],
);

/**
 * Stored answers of POSTs sent with an `Idempotency-Key`, for 24 h. The key itself is kept only as a
 * SHA-256 hash, and the response body is AES-GCM encrypted with a key derived from it (src/http/idempotency.ts).
 */
export const idempotencyRecords = pgTable(
  "idempotency_records",
  {
    scope: text("scope").notNull(),
    keyHash: text("key_hash").notNull(),
    requestHash: text("request_hash").notNull(),
    status: text("status", { enum: ["in-progress", "done"] }).notNull(),
    responseStatus: integer("response_status"),
    responseBody: text("response_body"),
    createdAt: epochMs("created_at").notNull(),
    expiresAt: epochMs("expires_at").notNull(),
  },
  (table) => [primaryKey({ columns: [table.scope, table.keyHash] }), index("idempotency_records_expires_idx").on(table.expiresAt)],
);

// --- billing ---

/** A checkout: one pack or one plan at the price of the catalog when it started. `id` is the checkoutId. */
export const orders = pgTable(
  "orders",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    userId: text("user_id"),
    kind: text("kind", { enum: ["pack", "subscription"] }).notNull(),
    itemId: text("item_id").notNull(),
    itemName: text("item_name").notNull(),
    /** Credits of the pack, or credits per period of the plan. */
    credits: credits("credits").notNull(),
    interval: text("interval", { enum: ["month", "year"] }),
    validityDays: integer("validity_days"),
    amount: integer("amount").notNull(),
    currency: text("currency").notNull(),
    status: text("status", { enum: ["pending", "completed"] }).notNull(),
    provider: text("provider", { enum: ["local", "stripe"] }).notNull(),
    /** The provider's id for the checkout (Stripe Checkout Session id); null for local orders. */
    providerRef: text("provider_ref"),
    successUrl: text("success_url"),
    cancelUrl: text("cancel_url"),
    createdAt: epochMs("created_at").notNull(),
    completedAt: epochMs("completed_at"),
  },
  (table) => [index("orders_org_idx").on(table.organizationId, table.id), uniqueIndex("orders_provider_ref_unique").on(table.providerRef)],
);

/** Subscriptions kept by the local provider (Stripe keeps its own). */
export const subscriptions = pgTable(
  "subscriptions",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    orderId: text("order_id")
      .notNull()
      .references(() => orders.id),
    planId: text("plan_id").notNull(),
    planName: text("plan_name").notNull(),
    creditsPerPeriod: credits("credits_per_period").notNull(),
    interval: text("interval", { enum: ["month", "year"] }).notNull(),
    amount: integer("amount").notNull(),
    currency: text("currency").notNull(),
    status: text("status", { enum: ["active", "canceled"] }).notNull(),
    /** Periods are counted from here, so month ends do not drift (Jan 31 → Feb 28 → Mar 31). */
    startedAt: epochMs("started_at").notNull(),
    currentPeriodStart: epochMs("current_period_start").notNull(),
    currentPeriodEnd: epochMs("current_period_end").notNull(),
    canceledAt: epochMs("canceled_at"),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [
    uniqueIndex("subscriptions_order_unique").on(table.orderId),
    index("subscriptions_org_idx").on(table.organizationId, table.id),
    index("subscriptions_due_idx").on(table.status, table.currentPeriodEnd),
  ],
);

/** Invoices kept by the local provider, numbered without gaps across the service. */
export const invoices = pgTable(
  "invoices",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    sequence: integer("sequence").notNull(),
    number: text("number").notNull(),
    status: text("status", { enum: ["draft", "open", "paid", "void"] }).notNull(),
    amount: integer("amount").notNull(),
    currency: text("currency").notNull(),
    description: text("description").notNull(),
    orderId: text("order_id"),
    subscriptionId: text("subscription_id"),
    periodStart: epochMs("period_start"),
    periodEnd: epochMs("period_end"),
    createdAt: epochMs("created_at").notNull(),
    paidAt: epochMs("paid_at"),
  },
  (table) => [
    uniqueIndex("invoices_sequence_unique").on(table.sequence),
    uniqueIndex("invoices_number_unique").on(table.number),
    index("invoices_org_idx").on(table.organizationId, table.id),
  ],
);

/** A payment that granted credits, so a refund can claw back what is still unspent of its bucket. */
export const payments = pgTable("payments", {
  /** The provider's payment id: a Stripe PaymentIntent or invoice id, or the local order or invoice id. */
  ref: text("ref").primaryKey(),
  organizationId: text("organization_id")
    .notNull()
    .references(() => organizations.id),
  bucketId: text("bucket_id")
    .notNull()
    .references(() => creditBuckets.id),
  credits: credits("credits").notNull(),
  amount: integer("amount").notNull(),
  currency: text("currency").notNull(),
  /** Highest cumulative refunded amount seen; it only moves forward. */
  refundedAmount: integer("refunded_amount").notNull().default(0),
  /** Credits the refunds so far asked to claw back (the unspent part of them was taken). */
  refundedCredits: credits("refunded_credits").notNull().default(0),
  createdAt: epochMs("created_at").notNull(),
});

/**
 * What the provider took back from a payment, keyed by its ref and kept even before the payment is
 * known here (providers deliver events in any order): the payment's grant settles against it whenever
 * both are present.
 */
export const paymentReversals = pgTable("payment_reversals", {
  ref: text("ref").primaryKey(),
  /** Highest cumulative refunded amount seen; it only moves forward. */
  refundedAmount: integer("refunded_amount").notNull().default(0),
  disputeId: text("dispute_id"),
  disputeAmount: integer("dispute_amount").notNull().default(0),
  /** open and lost hold the disputed amount back; won gives it back. won and lost are final. */
  disputeStatus: text("dispute_status", { enum: ["open", "won", "lost"] }),
  updatedAt: epochMs("updated_at").notNull(),
});

/** Provider events already applied: inserted in the same transaction as their effect, so each applies once. */
export const providerEvents = pgTable("provider_events", {
  id: text("id").primaryKey(),
  type: text("type").notNull(),
  receivedAt: epochMs("received_at").notNull(),
});

// --- feeds ---

/** A feed the operator declared: a URL pulled on a schedule, a directory scanned for new files, or a push endpoint. */
export const feedSources = pgTable(
  "feed_sources",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    kind: text("kind", { enum: ["url", "directory", "push"] }).notNull(),
    location: text("location"),
    format: text("format", { enum: ["ndjson", "csv"] }),
    intervalMs: epochMs("interval_ms"),
    timeoutMs: epochMs("timeout_ms").notNull(),
    retries: integer("retries").notNull(),
    etag: text("etag"),
    lastModified: text("last_modified"),
    nextRunAt: epochMs("next_run_at"),
    /** The instance running the source now and until when its claim holds, by the database's clock. */
    leaseOwner: text("lease_owner"),
    leaseUntil: epochMs("lease_until"),
    lastRunAt: epochMs("last_run_at"),
    lastSuccessAt: epochMs("last_success_at"),
    createdAt: epochMs("created_at").notNull(),
    removedAt: epochMs("removed_at"),
    /** The merchant ids whose offers (and names) the source may write; a record for any other merchant is rejected. */
    merchants: jsonb("merchants").$type<string[]>().notNull().default([]),
    /** Whether the source's title, brand and image replace those another source gave a product first. */
    authoritative: boolean("authoritative").notNull().default(false),
  },
  (table) => [uniqueIndex("feed_sources_name_unique").on(table.name), index("feed_sources_due_idx").on(table.nextRunAt)],
);

export const feedRuns = pgTable(
  "feed_runs",
  {
    id: text("id").primaryKey(),
    sourceId: text("source_id")
      .notNull()
      .references(() => feedSources.id),
    trigger: text("trigger", { enum: ["schedule", "push", "manual"] }).notNull(),
    status: text("status", { enum: ["ok", "not-modified", "failed"] }).notNull(),
    startedAt: epochMs("started_at").notNull(),
    durationMs: epochMs("duration_ms").notNull(),
    file: text("file"),
    httpStatus: integer("http_status"),
    attempts: integer("attempts").notNull(),
    recordsRead: bigint("records_read", { mode: "number" }).notNull(),
    products: bigint("products", { mode: "number" }).notNull(),
    offers: bigint("offers", { mode: "number" }).notNull(),
    rejectedCount: bigint("rejected_count", { mode: "number" }).notNull(),
    rejected: jsonb("rejected").$type<Array<{ line: number; error: string }>>().notNull(),
    error: text("error"),
  },
  (table) => [index("feed_runs_source_idx").on(table.sourceId, table.id)],
);

export const feedTokens = pgTable(
  "feed_tokens",
  {
    id: text("id").primaryKey(),
    sourceId: text("source_id").references(() => feedSources.id),
    scope: text("scope", { enum: ["push", "read"] }).notNull(),
    name: text("name").notNull(),
    secretHash: text("secret_hash").notNull(),
    createdAt: epochMs("created_at").notNull(),
    revokedAt: epochMs("revoked_at"),
    lastUsedAt: epochMs("last_used_at"),
  },
  (table) => [index("feed_tokens_source_idx").on(table.sourceId)],
);

export const feedSourceFiles = pgTable(
  "feed_source_files",
  {
    sourceId: text("source_id")
      .notNull()
      .references(() => feedSources.id),
    name: text("name").notNull(),
    size: bigint("size", { mode: "number" }).notNull(),
    modifiedAt: epochMs("modified_at").notNull(),
    runId: text("run_id").notNull(),
  },
  (table) => [primaryKey({ columns: [table.sourceId, table.name, table.size, table.modifiedAt] })],
);

/** An offer's price history but its newest entry, written by a trigger on `offers` (see schema/sqlite.ts). */
export const offerPriceHistory = pgTable(
  "offer_price_history",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    gtin: text("gtin").notNull(),
    merchantId: text("merchant_id").notNull(),
    priceAmount: integer("price_amount").notNull(),
    currency: text("currency").notNull(),
    shippingAmount: integer("shipping_amount"),
    availability: text("availability").notNull(),
    observedAt: epochMs("observed_at").notNull(),
    sourceId: text("source_id"),
    /** When the next state was first observed: the end of this one (null only for rows written before it was kept). */
    validTo: epochMs("valid_to"),
  },
  (table) => [
    index("offer_price_history_offer_idx").on(table.gtin, table.merchantId, table.observedAt),
    index("offer_price_history_observed_idx").on(table.observedAt),
    // The price history facet's range reads, in its order: by start, then merchant, then row.
    index("offer_price_history_range_idx").on(table.gtin, table.observedAt, table.merchantId, table.id),
  ],
);

/**
 * An offer's prices per UTC day, for the days on which one of its states started: the lowest and
 * highest price (in the currency of the day's last state) of the states that held that day, the
 * last one's price and availability. Written by the same trigger as offer_price_history when an
 * update replaces a state; a day on which nothing started holds the last state of the day before,
 * and an offer's first state until its first change is the offer itself (both filled in by the read).
 */
export const offerPriceDays = pgTable(
  "offer_price_days",
  {
    gtin: text("gtin").notNull(),
    merchantId: text("merchant_id").notNull(),
    /** Start of the UTC day (epoch ms). */
    day: epochMs("day").notNull(),
    currency: text("currency").notNull(),
    lowestAmount: integer("lowest_amount").notNull(),
    highestAmount: integer("highest_amount").notNull(),
    lastAmount: integer("last_amount").notNull(),
    availability: text("availability").notNull(),
  },
  (table) => [
    primaryKey({ columns: [table.gtin, table.merchantId, table.day] }),
    index("offer_price_days_day_idx").on(table.gtin, table.day, table.merchantId),
  ],
);

/**
 * Requests and credits per organization, period, key and reason: what the usage endpoint reads
 * instead of the ledger. Each count goes into its hour's row (periodMs 3,600,000) and its UTC day's
 * row (86,400,000), so a 30-day daily report reads 30 rows per key and reason, not 720. Billed look-ups are counted in their debit's transaction (so `credits` always equals
 * the usage rows of the ledger); unbilled outcomes are written behind in batches. `keyId` is '' when
 * no key is known.
 */
export const usageCounters = pgTable(
  "usage_counters",
  {
    organizationId: text("organization_id").notNull(),
    periodMs: integer("period_ms").notNull(),
    periodStart: epochMs("period_start").notNull(),
    keyId: text("key_id").notNull(),
    reason: text("reason").notNull(),
    requests: bigint("requests", { mode: "number" }).notNull().default(0),
    credits: credits("credits").notNull().default(0),
  },
  (table) => [primaryKey({ columns: [table.organizationId, table.periodMs, table.periodStart, table.keyId, table.reason] })],
);

/** See schema/sqlite.ts. */
export const webhookEndpoints = pgTable(
  "webhook_endpoints",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    url: text("url").notNull(),
    eventTypes: jsonb("event_types").$type<string[]>().notNull(),
    secret: text("secret").notNull(),
    previousSecret: text("previous_secret"),
    previousSecretExpiresAt: epochMs("previous_secret_expires_at"),
    status: text("status", { enum: ["enabled", "disabled"] })
      .notNull()
      .default("enabled"),
    failingSince: epochMs("failing_since"),
    disabledAt: epochMs("disabled_at"),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [index("webhook_endpoints_organization_idx").on(table.organizationId, table.id)],
);

export const webhookEvents = pgTable(
  "webhook_events",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id").notNull(),
    type: text("type").notNull(),
    payload: text("payload").notNull(),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [index("webhook_events_organization_idx").on(table.organizationId, table.createdAt)],
);

export const webhookDeliveries = pgTable(
  "webhook_deliveries",
  {
    endpointId: text("endpoint_id")
      .notNull()
      .references(() => webhookEndpoints.id, { onDelete: "cascade" }),
    eventId: text("event_id")
      .notNull()
      .references(() => webhookEvents.id),
    state: text("state", { enum: ["pending", "delivered", "failed"] })
      .notNull()
      .default("pending"),
    attempts: integer("attempts").notNull().default(0),
    lastStatus: integer("last_status"),
    lastResponse: text("last_response"),
    lastAttemptAt: epochMs("last_attempt_at"),
    nextAttemptAt: epochMs("next_attempt_at"),
    leaseOwner: text("lease_owner"),
    /** By the database's clock, shared by every instance. */
    leaseUntil: epochMs("lease_until"),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [
    primaryKey({ columns: [table.endpointId, table.eventId] }),
    index("webhook_deliveries_due_idx").on(table.nextAttemptAt).where(sql`state = 'pending'`),
    index("webhook_deliveries_log_idx").on(table.endpointId, table.createdAt, table.eventId),
    /** A claim's oldest due deliveries per endpoint. */
    index("webhook_deliveries_endpoint_due_idx").on(table.endpointId, table.nextAttemptAt).where(sql`state = 'pending'`),
    /** The deliveries in flight (leased), which count against the per-endpoint and per-organization limits. */
    index("webhook_deliveries_leased_idx").on(table.leaseUntil).where(sql`state = 'pending'`),
  ],
);

/**
 * PostgreSQL only: one row whose `version` every catalog import moves in its own transaction. An
 * instance reads it with each request's key and keeps the products it read in memory while it
 * stands still (see PostgresStore.findProductWithOffers); SQLite learns of other connections'
 * commits from `PRAGMA data_version` instead.
 */
export const catalogVersion = pgTable(
  "catalog_version",
  {
    id: integer("id").primaryKey(),
    version: bigint("version", { mode: "number" }).notNull(),
  },
  (table) => [check("catalog_version_one_row", sql`${table.id} = 1`)],
);

/** A customer's price watch (see schema/sqlite.ts). */
export const priceWatches = pgTable(
  "price_watches",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    gtin: text("gtin").notNull(),
    merchantId: text("merchant_id"),
    trigger: text("trigger").notNull(),
    belowAmount: bigint("below_amount", { mode: "number" }),
    belowCurrency: text("below_currency"),
    status: text("status").notNull(),
    pausedReason: text("paused_reason"),
    armed: boolean("armed").notNull(),
    lastMerchantId: text("last_merchant_id"),
    lastPrice: bigint("last_price", { mode: "number" }),
    lastCurrency: text("last_currency"),
    lastAvailability: text("last_availability"),
    lastObservedAt: epochMs("last_observed_at"),
    createdAt: epochMs("created_at").notNull(),
    lastTriggeredAt: epochMs("last_triggered_at"),
  },
  (table) => [
    index("price_watches_organization_idx").on(table.organizationId, table.id),
    index("price_watches_gtin_idx").on(table.gtin),
    index("price_watches_paused_idx").on(table.organizationId).where(sql`status = 'paused'`),
  ],
);

/** Watched products whose offers changed, not yet evaluated (see schema/sqlite.ts). */
export const watchChanges = pgTable("watch_changes", {
  id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
  gtin: text("gtin").notNull(),
});

/**
 * Rate-limit token buckets shared by every instance (PostgreSQL only: a SQLite file has one `serve`,
 * which keeps its buckets in memory). Instances lease tokens from them in slices through
 * `lease_rate_tokens` (migration 0016), so a key's rate holds across instances without a statement
 * per request. Tokens are fractional: the refill is continuous.
 */
export const rateLimitBuckets = pgTable("rate_limit_buckets", {
  bucket: text("bucket").primaryKey(),
  tokens: doublePrecision("tokens").notNull(),
  capacity: doublePrecision("capacity").notNull(),
  refillPerMs: doublePrecision("refill_per_ms").notNull(),
  /** The database's clock (epoch ms) when `tokens` was last computed. */
  updatedAt: epochMs("updated_at").notNull(),
});
