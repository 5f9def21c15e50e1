import { sql } from "drizzle-orm";
import { bigint, check, index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex } from "drizzle-orm/pg-core";

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
    role: text("role", { enum: ["owner", "member"] }).notNull().default("member"),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [uniqueIndex("users_subject_unique").on(table.subject), uniqueIndex("users_email_unique").on(table.email)],
);

export const invitations = pgTable("invitations", {
  email: text("email").primaryKey(),
  organizationId: text("organization_id").notNull().references(() => organizations.id),
  role: text("role", { enum: ["owner", "member"] }).notNull().default("member"),
  createdAt: epochMs("created_at").notNull(),
});

export const sessions = pgTable(
  "sessions",
  {
    id: text("id").primaryKey(),
    tokenHash: text("token_hash").notNull(),
    userId: text("user_id").notNull().references(() => users.id),
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
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    name: text("name").notNull(),
    keyPrefix: text("key_prefix").notNull(),
    keyHash: text("key_hash").notNull(),
    status: text("status", { enum: ["ACTIVE", "ROTATED", "REVOKED"] }).notNull(),
    replacedBy: text("replaced_by"),
    createdBy: text("created_by").notNull().references(() => users.id),
    createdAt: epochMs("created_at").notNull(),
    lastUsedAt: epochMs("last_used_at"),
  },
  (table) => [uniqueIndex("api_keys_key_hash_unique").on(table.keyHash), index("api_keys_org_idx").on(table.organizationId, table.id)],
);

export const products = pgTable("products", {
  gtin: text("gtin").primaryKey(),
  title: text("title").notNull(),
  brand: text("brand"),
  imageUrl: text("image_url"),
  updatedAt: epochMs("updated_at").notNull(),
});

export const merchants = pgTable("merchants", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
});

export const offers = pgTable(
  "offers",
  {
    gtin: text("gtin").notNull().references(() => products.gtin),
    merchantId: text("merchant_id").notNull().references(() => merchants.id),
    priceAmount: integer("price_amount").notNull(),
    currency: text("currency").notNull(),
    shippingAmount: integer("shipping_amount"),
    availability: text("availability", { enum: ["in_stock", "out_of_stock", "preorder", "unknown"] }).notNull(),
    condition: text("condition", { enum: ["new", "used", "refurbished"] }).notNull(),
    url: text("url"),
    observedAt: epochMs("observed_at").notNull(),
  },
  (table) => [primaryKey({ columns: [table.gtin, table.merchantId] })],
);

export const creditBuckets = pgTable(
  "credit_buckets",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    source: text("source", { enum: ["pack", "subscription", "grant", "trial"] }).notNull(),
    granted: credits("granted").notNull(),
    remaining: credits("remaining").notNull(),
    expiresAt: epochMs("expires_at"),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [
    index("credit_buckets_org_spendable_idx").on(table.organizationId, table.remaining),
    // Several instances debit the same buckets: the database itself refuses an overdraw.
    check("credit_buckets_remaining_not_negative", sql`${table.remaining} >= 0`),
  ],
);

export const creditTransactions = pgTable(
  "credit_transactions",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    type: text("type", { enum: ["purchase", "subscription", "grant", "trial", "usage", "expiry", "refund", "adjustment"] }).notNull(),
    amount: credits("amount").notNull(),
    balanceAfter: credits("balance_after").notNull(),
    bucketId: text("bucket_id"),
    keyId: text("key_id"),
    requestId: text("request_id"),
    gtin: text("gtin"),
    description: text("description").notNull(),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [
    // Keyset pagination, newest first, on (createdAt, id): one index range per page, with or without a type.
    index("credit_transactions_org_created_idx").on(table.organizationId, table.createdAt, table.id),
    index("credit_transactions_org_type_created_idx").on(table.organizationId, table.type, table.createdAt, table.id),
    uniqueIndex("credit_transactions_usage_request_unique").on(table.requestId).where(sql`type = 'usage'`),
  ],
);

/** Credits taken out of buckets for a request in flight; committed into a usage row or given back. */
export const reservations = pgTable(
  "reservations",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    amount: credits("amount").notNull(),
    allocations: jsonb("allocations").$type<Array<{ bucketId: string; amount: number }>>().notNull(),
    keyId: text("key_id"),
    requestId: text("request_id").notNull(),
    createdAt: epochMs("created_at").notNull(),
  },
  (table) => [index("reservations_org_idx").on(table.organizationId), index("reservations_created_idx").on(table.createdAt)],
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
    organizationId: text("organization_id").notNull().references(() => organizations.id),
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
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    orderId: text("order_id").notNull().references(() => orders.id),
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
    organizationId: text("organization_id").notNull().references(() => organizations.id),
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
  organizationId: text("organization_id").notNull().references(() => organizations.id),
  bucketId: text("bucket_id").notNull().references(() => creditBuckets.id),
  credits: credits("credits").notNull(),
  amount: integer("amount").notNull(),
  currency: text("currency").notNull(),
  /** Highest cumulative refunded amount seen; it only moves forward. */
  refundedAmount: integer("refunded_amount").notNull().default(0),
  /** Credits the refunds so far asked to claw back (the unspent part of them was taken). */
  refundedCredits: credits("refunded_credits").notNull().default(0),
  createdAt: epochMs("created_at").notNull(),
});

/** Provider events already applied: inserted in the same transaction as their effect, so each applies once. */
export const providerEvents = pgTable("provider_events", {
  id: text("id").primaryKey(),
  type: text("type").notNull(),
  receivedAt: epochMs("received_at").notNull(),
});
