import { sql } from "drizzle-orm";
import { bigint, check, index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex } from "drizzle-orm/pg-core";

// The PostgreSQL twin of schema/sqlite.ts: same tables, columns and indexes, so one store
// interface maps onto both. Timestamps are bigint epoch milliseconds read as JS numbers; credits
// and ledger amounts are bigint like SQLite's 64-bit integers; money amounts are integer minor units.

const epochMs = (name: string) => bigint(name, { mode: "number" });
const credits = (name: string) => bigint(name, { mode: "number" });

export const organizations = pgTable("organizations", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  stripeCustomerId: text("stripe_customer_id"),
  /** Running sum of the organization's ledger (= available + reserved); the next balanceAfter. */
  ledgerBalance: credits("ledger_balance").notNull().default(0),
  createdAt: epochMs("created_at").notNull(),
});

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
    index("credit_transactions_org_id_idx").on(table.organizationId, table.id),
    index("credit_transactions_org_type_id_idx").on(table.organizationId, table.type, table.id),
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
