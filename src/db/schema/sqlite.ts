import { sql } from "drizzle-orm";
import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

// Timestamps are integer epoch milliseconds; money and credits are integers.

export const organizations = sqliteTable(
  "organizations",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    stripeCustomerId: text("stripe_customer_id"),
    /** Running sum of the organization's ledger (= available + reserved); the next balanceAfter. */
    ledgerBalance: integer("ledger_balance").notNull().default(0),
    /** A debit that takes the ledger balance from at least this to below it writes a `credits.low` webhook event; null: none. */
    lowCreditThreshold: integer("low_credit_threshold"),
    createdAt: integer("created_at").notNull(),
  },
  (table) => [uniqueIndex("organizations_stripe_customer_unique").on(table.stripeCustomerId)],
);

export const users = sqliteTable(
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
    createdAt: integer("created_at").notNull(),
  },
  (table) => [uniqueIndex("users_subject_unique").on(table.subject), uniqueIndex("users_email_unique").on(table.email)],
);

export const invitations = sqliteTable("invitations", {
  email: text("email").primaryKey(),
  organizationId: text("organization_id")
    .notNull()
    .references(() => organizations.id),
  role: text("role", { enum: ["owner", "member"] })
    .notNull()
    .default("member"),
  createdAt: integer("created_at").notNull(),
});

export const sessions = sqliteTable(
  "sessions",
  {
    id: text("id").primaryKey(),
    tokenHash: text("token_hash").notNull(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
    absoluteExpiresAt: integer("absolute_expires_at").notNull(),
    revokedAt: integer("revoked_at"),
  },
  (table) => [uniqueIndex("sessions_token_hash_unique").on(table.tokenHash)],
);

export const apiKeys = sqliteTable(
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
    createdAt: integer("created_at").notNull(),
    lastUsedAt: integer("last_used_at"),
    /** Per-key controls; null: none. From then on the key is refused (401). */
    expiresAt: integer("expires_at"),
    /** Credits the key may spend per calendar month (UTC); null: only the organization's balance limits it. */
    monthlyCreditLimit: integer("monthly_credit_limit"),
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
export const apiKeyMonthlyUsage = sqliteTable(
  "api_key_monthly_usage",
  {
    keyId: text("key_id")
      .notNull()
      .references(() => apiKeys.id),
    month: text("month").notNull(),
    spent: integer("spent").notNull().default(0),
  },
  (table) => [primaryKey({ columns: [table.keyId, table.month] })],
);

export const products = sqliteTable("products", {
  gtin: text("gtin").primaryKey(),
  title: text("title").notNull(),
  brand: text("brand"),
  imageUrl: text("image_url"),
  updatedAt: integer("updated_at").notNull(),
  /** The feed source whose title, brand and image the product shows; null: the operator's (import, demo data, or written before sources had precedence). */
  describedBy: text("described_by"),
});

export const merchants = sqliteTable("merchants", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
});

export const offers = sqliteTable(
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
    observedAt: integer("observed_at").notNull(),
    /** The feed source that last wrote the offer (null: the operator's `import`, demo data); per-source freshness counts by it. */
    sourceId: text("source_id"),
    /**
     * When the offer's price, currency, shipping and availability were first observed as they are now,
     * and by which source: the newest entry of its price history (older ones are in offer_price_history).
     * Every write sets them; nullable only because a column added to a filled table has to be.
     */
    stateSince: integer("state_since"),
    stateSourceId: text("state_source_id"),
  },
  // Only offers written for a feed source are indexed by it: what the freshness metrics read, and
  // the operator's `import` (no source) leaves one index fewer to write per offer.
  (table) => [
    primaryKey({ columns: [table.gtin, table.merchantId] }),
    index("offers_source_idx").on(table.sourceId, table.observedAt).where(sql`${table.sourceId} IS NOT NULL`),
  ],
);

export const creditBuckets = sqliteTable(
  "credit_buckets",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    source: text("source", { enum: ["pack", "subscription", "grant", "trial"] }).notNull(),
    granted: integer("granted").notNull(),
    remaining: integer("remaining").notNull(),
    /** Credits a refund claimed while requests in flight held them: a release pays them off (a `refund` row) before anyone can spend them. */
    clawbackOwed: integer("clawback_owed").notNull().default(0),
    expiresAt: integer("expires_at"),
    createdAt: integer("created_at").notNull(),
  },
  // Whatever process writes the file, the database itself refuses a bucket below zero: triggers in
  // migration 0001 (SQLite cannot add a CHECK to an existing table, which payments reference).
  // Not on `remaining`, which every debit changes (the index entry would move each time).
  (table) => [index("credit_buckets_org_expiry_idx").on(table.organizationId, table.expiresAt)],
);

export const creditTransactions = sqliteTable(
  "credit_transactions",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    type: text("type", { enum: ["purchase", "subscription", "grant", "trial", "usage", "expiry", "refund", "adjustment"] }).notNull(),
    amount: integer("amount").notNull(),
    balanceAfter: integer("balance_after").notNull(),
    bucketId: text("bucket_id"),
    keyId: text("key_id"),
    requestId: text("request_id"),
    gtin: text("gtin"),
    description: text("description").notNull(),
    createdAt: integer("created_at").notNull(),
    /** Packed usage rows exist on PostgreSQL only (its lease settlements write them); the columns keep the schemas alike. */
    lookUps: text("look_ups"),
    firstCreatedAt: integer("first_created_at"),
  },
  (table) => [
    // Keyset pagination, newest first, on (createdAt, id): one index range per page, with or without a type.
    index("credit_transactions_org_created_idx").on(table.organizationId, table.createdAt, table.id),
    index("credit_transactions_org_type_created_idx").on(table.organizationId, table.type, table.createdAt, table.id),
    uniqueIndex("credit_transactions_usage_request_unique").on(table.requestId).where(sql`type = 'usage'`),
  ],
);

/** Credits taken out of buckets for a request in flight; committed into a usage row or given back. */
export const reservations = sqliteTable(
  "reservations",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    amount: integer("amount").notNull(),
    allocations: text("allocations", { mode: "json" }).$type<Array<{ bucketId: string; amount: number }>>().notNull(),
    keyId: text("key_id"),
    requestId: text("request_id").notNull(),
    createdAt: integer("created_at").notNull(),
    /** Credit leases exist on PostgreSQL only (one SQLite instance has nobody to share with); the columns keep the schemas alike. */
    instanceId: text("instance_id"),
    expiresAt: integer("expires_at"),
  },
  (table) => [index("reservations_org_idx").on(table.organizationId), index("reservations_created_idx").on(table.createdAt)],
);

/**
 * Stored answers of POSTs sent with an `Idempotency-Key`, for 24 h. The key itself is kept only as a
 * SHA-256 hash, and the response body is AES-GCM encrypted with a key derived from it (src/http/idempotency.ts).
 */
export const idempotencyRecords = sqliteTable(
  "idempotency_records",
  {
    scope: text("scope").notNull(),
    keyHash: text("key_hash").notNull(),
    requestHash: text("request_hash").notNull(),
    status: text("status", { enum: ["in-progress", "done"] }).notNull(),
    responseStatus: integer("response_status"),
    responseBody: text("response_body"),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
  },
  (table) => [primaryKey({ columns: [table.scope, table.keyHash] }), index("idempotency_records_expires_idx").on(table.expiresAt)],
);
// --- billing ---

/** A checkout: one pack or one plan at the price of the catalog when it started. `id` is the checkoutId. */
export const orders = sqliteTable(
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
    credits: integer("credits").notNull(),
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
    createdAt: integer("created_at").notNull(),
    completedAt: integer("completed_at"),
  },
  (table) => [index("orders_org_idx").on(table.organizationId, table.id), uniqueIndex("orders_provider_ref_unique").on(table.providerRef)],
);

/** Subscriptions kept by the local provider (Stripe keeps its own). */
export const subscriptions = sqliteTable(
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
    creditsPerPeriod: integer("credits_per_period").notNull(),
    interval: text("interval", { enum: ["month", "year"] }).notNull(),
    amount: integer("amount").notNull(),
    currency: text("currency").notNull(),
    status: text("status", { enum: ["active", "canceled"] }).notNull(),
    /** Periods are counted from here, so month ends do not drift (Jan 31 → Feb 28 → Mar 31). */
    startedAt: integer("started_at").notNull(),
    currentPeriodStart: integer("current_period_start").notNull(),
    currentPeriodEnd: integer("current_period_end").notNull(),
    canceledAt: integer("canceled_at"),
    createdAt: integer("created_at").notNull(),
  },
  (table) => [
    uniqueIndex("subscriptions_order_unique").on(table.orderId),
    index("subscriptions_org_idx").on(table.organizationId, table.id),
    index("subscriptions_due_idx").on(table.status, table.currentPeriodEnd),
  ],
);

/** Invoices kept by the local provider, numbered without gaps across the service. */
export const invoices = sqliteTable(
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
    periodStart: integer("period_start"),
    periodEnd: integer("period_end"),
    createdAt: integer("created_at").notNull(),
    paidAt: integer("paid_at"),
  },
  (table) => [
    uniqueIndex("invoices_sequence_unique").on(table.sequence),
    uniqueIndex("invoices_number_unique").on(table.number),
    index("invoices_org_idx").on(table.organizationId, table.id),
  ],
);

/** A payment that granted credits, so a refund can claw back what is still unspent of its bucket. */
export const payments = sqliteTable("payments", {
  /** The provider's payment id: a Stripe PaymentIntent or invoice id, or the local order or invoice id. */
  ref: text("ref").primaryKey(),
  organizationId: text("organization_id")
    .notNull()
    .references(() => organizations.id),
  bucketId: text("bucket_id")
    .notNull()
    .references(() => creditBuckets.id),
  credits: integer("credits").notNull(),
  amount: integer("amount").notNull(),
  currency: text("currency").notNull(),
  /** Highest cumulative refunded amount seen; it only moves forward. */
  refundedAmount: integer("refunded_amount").notNull().default(0),
  /** Credits the refunds so far asked to claw back (the unspent part of them was taken). */
  refundedCredits: integer("refunded_credits").notNull().default(0),
  createdAt: integer("created_at").notNull(),
});

/**
 * What the provider took back from a payment, keyed by its ref and kept even before the payment is
 * known here (providers deliver events in any order): the payment's grant settles against it whenever
 * both are present.
 */
export const paymentReversals = sqliteTable("payment_reversals", {
  ref: text("ref").primaryKey(),
  /** Highest cumulative refunded amount seen; it only moves forward. */
  refundedAmount: integer("refunded_amount").notNull().default(0),
  disputeId: text("dispute_id"),
  disputeAmount: integer("dispute_amount").notNull().default(0),
  /** open and lost hold the disputed amount back; won gives it back. won and lost are final. */
  disputeStatus: text("dispute_status", { enum: ["open", "won", "lost"] }),
  updatedAt: integer("updated_at").notNull(),
});

/** Provider events already applied: inserted in the same transaction as their effect, so each applies once. */
export const providerEvents = sqliteTable("provider_events", {
  id: text("id").primaryKey(),
  type: text("type").notNull(),
  receivedAt: integer("received_at").notNull(),
});

// --- feeds ---

/** A feed the operator declared: a URL pulled on a schedule, a directory scanned for new files, or a push endpoint. */
export const feedSources = sqliteTable(
  "feed_sources",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    kind: text("kind", { enum: ["url", "directory", "push"] }).notNull(),
    /** The URL or the directory; null for push sources. */
    location: text("location"),
    /** ndjson or csv; null: from the content type or the file name. */
    format: text("format", { enum: ["ndjson", "csv"] }),
    /** Pull period of url and directory sources; null for push sources. */
    intervalMs: integer("interval_ms"),
    timeoutMs: integer("timeout_ms").notNull(),
    retries: integer("retries").notNull(),
    /** Validators of the last 200 answer, sent back as If-None-Match / If-Modified-Since. */
    etag: text("etag"),
    lastModified: text("last_modified"),
    nextRunAt: integer("next_run_at"),
    /** The instance running the source now and until when its claim holds (dated by the store's clock). */
    leaseOwner: text("lease_owner"),
    leaseUntil: integer("lease_until"),
    lastRunAt: integer("last_run_at"),
    lastSuccessAt: integer("last_success_at"),
    createdAt: integer("created_at").notNull(),
    removedAt: integer("removed_at"),
    /** The merchant ids whose offers (and names) the source may write; a record for any other merchant is rejected. */
    merchants: text("merchants", { mode: "json" }).$type<string[]>().notNull().default([]),
    /** Whether the source's title, brand and image replace those another source gave a product first. */
    authoritative: integer("authoritative", { mode: "boolean" }).notNull().default(false),
  },
  (table) => [uniqueIndex("feed_sources_name_unique").on(table.name), index("feed_sources_due_idx").on(table.nextRunAt)],
);

/** One run of a source (a pull, a file, a push): what it read, wrote and rejected. */
export const feedRuns = sqliteTable(
  "feed_runs",
  {
    id: text("id").primaryKey(),
    sourceId: text("source_id")
      .notNull()
      .references(() => feedSources.id),
    trigger: text("trigger", { enum: ["schedule", "push", "manual"] }).notNull(),
    status: text("status", { enum: ["ok", "not-modified", "failed"] }).notNull(),
    startedAt: integer("started_at").notNull(),
    durationMs: integer("duration_ms").notNull(),
    /** The file of a directory source, or the URL pulled. */
    file: text("file"),
    httpStatus: integer("http_status"),
    attempts: integer("attempts").notNull(),
    recordsRead: integer("records_read").notNull(),
    products: integer("products").notNull(),
    offers: integer("offers").notNull(),
    rejectedCount: integer("rejected_count").notNull(),
    /** The first rejected lines, `[{ line, error }]` (at most MAX_REPORTED_REJECTS). */
    rejected: text("rejected", { mode: "json" }).$type<Array<{ line: number; error: string }>>().notNull(),
    error: text("error"),
  },
  (table) => [index("feed_runs_source_idx").on(table.sourceId, table.id)],
);

/** Secrets that authenticate a push to one source. Only the SHA-256 of the secret is stored. */
export const feedTokens = sqliteTable(
  "feed_tokens",
  {
    id: text("id").primaryKey(),
    sourceId: text("source_id").references(() => feedSources.id),
    /** push: POST records to its source; read: the operator endpoints (list sources and runs). */
    scope: text("scope", { enum: ["push", "read"] }).notNull(),
    name: text("name").notNull(),
    secretHash: text("secret_hash").notNull(),
    createdAt: integer("created_at").notNull(),
    revokedAt: integer("revoked_at"),
    lastUsedAt: integer("last_used_at"),
  },
  (table) => [index("feed_tokens_source_idx").on(table.sourceId)],
);

/** Files of a directory source already imported: a file is imported once per (name, size, mtime). */
export const feedSourceFiles = sqliteTable(
  "feed_source_files",
  {
    sourceId: text("source_id")
      .notNull()
      .references(() => feedSources.id),
    name: text("name").notNull(),
    size: integer("size").notNull(),
    modifiedAt: integer("modified_at").notNull(),
    runId: text("run_id").notNull(),
  },
  (table) => [primaryKey({ columns: [table.sourceId, table.name, table.size, table.modifiedAt] })],
);

/**
 * An offer's price history but its newest entry (which is the offer's own state and `state_since`):
 * each earlier state of its price, currency, shipping and availability, from when it was first
 * observed. Written by a trigger on `offers` when an update changes one of them, whatever process
 * writes the offer; a new offer or an identical repeat writes nothing here. Pruned by age with
 * `history prune`.
 */
export const offerPriceHistory = sqliteTable(
  "offer_price_history",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    gtin: text("gtin").notNull(),
    merchantId: text("merchant_id").notNull(),
    priceAmount: integer("price_amount").notNull(),
    currency: text("currency").notNull(),
    shippingAmount: integer("shipping_amount"),
    availability: text("availability").notNull(),
    observedAt: integer("observed_at").notNull(),
    sourceId: text("source_id"),
    /** When the next state was first observed: the end of this one (null only for rows written before it was kept). */
    validTo: integer("valid_to"),
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
export const offerPriceDays = sqliteTable(
  "offer_price_days",
  {
    gtin: text("gtin").notNull(),
    merchantId: text("merchant_id").notNull(),
    /** Start of the UTC day (epoch ms). */
    day: integer("day").notNull(),
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
export const usageCounters = sqliteTable(
  "usage_counters",
  {
    organizationId: text("organization_id").notNull(),
    periodMs: integer("period_ms").notNull(),
    periodStart: integer("period_start").notNull(),
    keyId: text("key_id").notNull(),
    reason: text("reason").notNull(),
    requests: integer("requests").notNull().default(0),
    credits: integer("credits").notNull().default(0),
  },
  (table) => [primaryKey({ columns: [table.organizationId, table.periodMs, table.periodStart, table.keyId, table.reason] })],
);

/**
 * Webhook endpoints of an organization. `secret` is the Standard Webhooks signing secret
 * (`whsec_` + base64), kept as is because signing needs it (a hash cannot sign); it is shown once and
 * never logged. After a rotation the previous secret also signs until `previousSecretExpiresAt`.
 */
export const webhookEndpoints = sqliteTable(
  "webhook_endpoints",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    url: text("url").notNull(),
    /** JSON array of event types. */
    eventTypes: text("event_types", { mode: "json" }).$type<string[]>().notNull(),
    secret: text("secret").notNull(),
    previousSecret: text("previous_secret"),
    previousSecretExpiresAt: integer("previous_secret_expires_at"),
    status: text("status", { enum: ["enabled", "disabled"] })
      .notNull()
      .default("enabled"),
    /** First failed attempt since the last success; a day of failures disables the endpoint. */
    failingSince: integer("failing_since"),
    disabledAt: integer("disabled_at"),
    createdAt: integer("created_at").notNull(),
  },
  (table) => [index("webhook_endpoints_organization_idx").on(table.organizationId, table.id)],
);

/** The outbox: each event is written in the transaction of what caused it. `payload` is the JSON of its `data`. */
export const webhookEvents = sqliteTable(
  "webhook_events",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id").notNull(),
    type: text("type").notNull(),
    payload: text("payload").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (table) => [index("webhook_events_organization_idx").on(table.organizationId, table.createdAt)],
);

/** One event to one endpoint, written with the event (one per endpoint subscribed then). */
export const webhookDeliveries = sqliteTable(
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
    /** The first bytes of the last response body, or what went wrong (time-out, refused address). */
    lastResponse: text("last_response"),
    lastAttemptAt: integer("last_attempt_at"),
    nextAttemptAt: integer("next_attempt_at"),
    leaseOwner: text("lease_owner"),
    leaseUntil: integer("lease_until"),
    createdAt: integer("created_at").notNull(),
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
 * A customer's price watch: a product (GTIN-14), optionally one merchant's offer, and what makes it
 * fire. `last*` is the state the watch last saw (the offer's, or the product's best fresh offer's
 * without a merchant): the evaluator compares the current state with it. `armed` is the `below`
 * trigger's: it fires only while armed, and re-arms when the price is back at or above the threshold.
 */
export const priceWatches = sqliteTable(
  "price_watches",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    gtin: text("gtin").notNull(),
    merchantId: text("merchant_id"),
    trigger: text("trigger", { enum: ["any-change", "price-drop", "below"] }).notNull(),
    belowAmount: integer("below_amount"),
    belowCurrency: text("below_currency"),
    status: text("status", { enum: ["active", "paused"] }).notNull(),
    pausedReason: text("paused_reason"),
    armed: integer("armed", { mode: "boolean" }).notNull(),
    lastMerchantId: text("last_merchant_id"),
    lastPrice: integer("last_price"),
    lastCurrency: text("last_currency"),
    lastAvailability: text("last_availability"),
    lastObservedAt: integer("last_observed_at"),
    createdAt: integer("created_at").notNull(),
    lastTriggeredAt: integer("last_triggered_at"),
  },
  (table) => [
    index("price_watches_organization_idx").on(table.organizationId, table.id),
    index("price_watches_gtin_idx").on(table.gtin),
    index("price_watches_paused_idx").on(table.organizationId).where(sql`status = 'paused'`),
  ],
);

/**
 * Products with watches whose offers changed, not yet evaluated: written by triggers on `offers`
 * (a new offer, or a change of price, currency, shipping or availability) only for watched GTINs, and
 * deleted by the watch evaluator in the transaction that evaluates them.
 */
export const watchChanges = sqliteTable("watch_changes", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  gtin: text("gtin").notNull(),
});
