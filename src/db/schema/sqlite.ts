import { sql } from "drizzle-orm";
import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

// Timestamps are integer epoch milliseconds; money and credits are integers.

export const organizations = sqliteTable("organizations", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  stripeCustomerId: text("stripe_customer_id"),
  /** Running sum of the organization's ledger (= available + reserved); the next balanceAfter. */
  ledgerBalance: integer("ledger_balance").notNull().default(0),
  createdAt: integer("created_at").notNull(),
});

export const users = sqliteTable(
  "users",
  {
    id: text("id").primaryKey(),
    email: text("email"),
    name: text("name").notNull(),
    subject: text("subject"),
    organizationId: text("organization_id").references(() => organizations.id),
    role: text("role", { enum: ["owner", "member"] }).notNull().default("member"),
    createdAt: integer("created_at").notNull(),
  },
  (table) => [uniqueIndex("users_subject_unique").on(table.subject), uniqueIndex("users_email_unique").on(table.email)],
);

export const invitations = sqliteTable("invitations", {
  email: text("email").primaryKey(),
  organizationId: text("organization_id").notNull().references(() => organizations.id),
  role: text("role", { enum: ["owner", "member"] }).notNull().default("member"),
  createdAt: integer("created_at").notNull(),
});

export const sessions = sqliteTable(
  "sessions",
  {
    id: text("id").primaryKey(),
    tokenHash: text("token_hash").notNull(),
    userId: text("user_id").notNull().references(() => users.id),
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
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    name: text("name").notNull(),
    keyPrefix: text("key_prefix").notNull(),
    keyHash: text("key_hash").notNull(),
    status: text("status", { enum: ["ACTIVE", "ROTATED", "REVOKED"] }).notNull(),
    replacedBy: text("replaced_by"),
    createdBy: text("created_by").notNull().references(() => users.id),
    createdAt: integer("created_at").notNull(),
    lastUsedAt: integer("last_used_at"),
  },
  (table) => [uniqueIndex("api_keys_key_hash_unique").on(table.keyHash), index("api_keys_org_idx").on(table.organizationId, table.id)],
);

export const products = sqliteTable("products", {
  gtin: text("gtin").primaryKey(),
  title: text("title").notNull(),
  brand: text("brand"),
  imageUrl: text("image_url"),
  updatedAt: integer("updated_at").notNull(),
});

export const merchants = sqliteTable("merchants", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
});

export const offers = sqliteTable(
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
    observedAt: integer("observed_at").notNull(),
  },
  (table) => [primaryKey({ columns: [table.gtin, table.merchantId] })],
);

export const creditBuckets = sqliteTable(
  "credit_buckets",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    source: text("source", { enum: ["pack", "subscription", "grant", "trial"] }).notNull(),
    granted: integer("granted").notNull(),
    remaining: integer("remaining").notNull(),
    expiresAt: integer("expires_at"),
    createdAt: integer("created_at").notNull(),
  },
  (table) => [index("credit_buckets_org_spendable_idx").on(table.organizationId, table.remaining)],
);

export const creditTransactions = sqliteTable(
  "credit_transactions",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    type: text("type", { enum: ["purchase", "subscription", "grant", "trial", "usage", "expiry", "refund", "adjustment"] }).notNull(),
    amount: integer("amount").notNull(),
    balanceAfter: integer("balance_after").notNull(),
    bucketId: text("bucket_id"),
    keyId: text("key_id"),
    requestId: text("request_id"),
    gtin: text("gtin"),
    description: text("description").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (table) => [
    index("credit_transactions_org_id_idx").on(table.organizationId, table.id),
    index("credit_transactions_org_type_id_idx").on(table.organizationId, table.type, table.id),
    uniqueIndex("credit_transactions_usage_request_unique").on(table.requestId).where(sql`type = 'usage'`),
  ],
);

/** Credits taken out of buckets for a request in flight; committed into a usage row or given back. */
export const reservations = sqliteTable(
  "reservations",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id").notNull().references(() => organizations.id),
    amount: integer("amount").notNull(),
    allocations: text("allocations", { mode: "json" }).$type<Array<{ bucketId: string; amount: number }>>().notNull(),
    keyId: text("key_id"),
    requestId: text("request_id").notNull(),
    createdAt: integer("created_at").notNull(),
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
