import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { openDebitConnection, openPostgresClient } from "../../src/db/postgres-client";
import { PostgresStore } from "../../src/db/postgres-store";
import { SQLiteStore } from "../../src/db/sqlite-store";
import type { NewOrder } from "../../src/db/billing/records";
import { SYSTEM_USER_ID, type FeedRecord, type Store } from "../../src/db/store";
import { FakeClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createApiKey } from "../../src/modules/keys/service";
import { developmentIdentity, signIn as signInIdentity } from "../../src/modules/auth/service";
import { createServices, openStore, type Services } from "../../src/services";
import { createTestSchema, dropTestSchema, giveBackSchema, takeMigratedSchema } from "./schemas";

export const BASE = "http://localhost";

/** The PostgreSQL server the suite runs against, or null for SQLite (see scripts/test.ts). */
export const TEST_DATABASE_URL: string | null = process.env.TEST_DATABASE_URL?.trim() || null;

/**
 * The store a test runs on: in-memory SQLite, or PostgreSQL when TEST_DATABASE_URL names one. On
 * PostgreSQL each call gets a fresh schema of its own (dropped on close), so tests stay isolated
 * and may run in parallel against one database.
 */
export async function openTestStore(): Promise<Store> {
  if (TEST_DATABASE_URL === null) return SQLiteStore.open("sqlite::memory:");
  return new TestPostgresStore(await takeMigratedSchema(TEST_DATABASE_URL));
}

/**
 * Waits until `store` has heard every change committed before the call: a PostgreSQL store learns
 * of other instances' changes to what it remembers (keys, the catalog version) by notification. A
 * SQLite store reads its file, which every connection shares at once.
 */
export async function changesHeard(store: Store): Promise<void> {
  if (store instanceof PostgresStore) await store.changesHeard();
}

/** Waits up to `withinMs` until the store's change listener counts (`live`) or does not, and says whether it came to be. */
export async function listenerLive(store: PostgresStore, live: boolean, withinMs = 5_000): Promise<boolean> {
  for (let waited = 0; waited < withinMs && store.changes.live !== live; waited += 10) await Bun.sleep(10);
  return store.changes.live === live;
}

/** A PostgreSQL store on a schema of its own, which it gives back for reuse (or drops) when it first closes. */
class TestPostgresStore extends PostgresStore {
  private givenBack = false;

  constructor(private readonly schemaURL: string) {
    super(openPostgresClient(schemaURL), openDebitConnection(schemaURL), schemaURL);
  }

  override async close(): Promise<void> {
    await super.close();
    // Closed twice, it must not give back a schema another store may have taken meanwhile.
    if (this.givenBack) return;
    this.givenBack = true;
    await giveBackSchema(this.schemaURL);
  }
}

export interface TestDatabase {
  /** A DATABASE_URL for stores, CLI runs and server processes that must share one database. */
  url: string;
  drop(): Promise<void>;
}

/**
 * One database for several connections or processes (instances, the operator CLI): a SQLite file in
 * a temporary directory, or a fresh PostgreSQL schema when TEST_DATABASE_URL is set. Not migrated yet.
 */
export async function createTestDatabase(): Promise<TestDatabase> {
  if (TEST_DATABASE_URL !== null) {
    const url = await createTestSchema(TEST_DATABASE_URL);
    return { url, drop: () => dropTestSchema(url) };
  }
  return createSQLiteTestDatabase();
}

/** A SQLite file of its own, whatever TEST_DATABASE_URL says: for what only SQLite has (file locks). */
export function createSQLiteTestDatabase(): TestDatabase {
  const directory = mkdtempSync(join(tmpdir(), "price-test-"));
  return { url: `sqlite:${join(directory, "test.db")}`, drop: async () => rmSync(directory, { recursive: true, force: true }) };
}

export interface TestContext {
  app: ReturnType<typeof createApp>;
  services: Services;
  store: Store;
  clock: FakeClock;
  logs: string[];
  request(path: string, init?: RequestInit): Promise<Response>;
  close(): Promise<void>;
}

/** A whole app on a fresh store with a fake clock and captured logs; `overrides` replaces built services (e.g. the OIDC verifier). */
export async function createTestContext(
  env: Record<string, string> = {},
  overrides: Partial<Pick<Parameters<typeof createServices>[0], "oidc" | "stripe" | "outbound" | "webhookDelivery">> = {},
): Promise<TestContext> {
  const config = loadConfig({ PRICE_ENV: "development", LOG_LEVEL: "debug", RATE_LIMIT: "100000/s", ...env });
  const store = await openTestStore();
  const clock = new FakeClock();
  const logs: string[] = [];
  const logger = createLogger({ level: config.logLevel, write: (chunk) => logs.push(chunk) });
  const services = createServices({ config, store, clock, logger, ...overrides });
  const app = createApp(services);
  return {
    app,
    services,
    store,
    clock,
    logs,
    request: (path, init) => app.handle(new Request(BASE + path, init)),
    close: () => store.close(),
  };
}

export interface TestOrganization {
  organizationId: string;
  keyId: string;
  clearKey: string;
  auth: { authorization: string };
}

/** An organization with one ACTIVE key and, if asked, a never-expiring grant of credits. */
export async function createOrganization(context: TestContext, credits = 0, name = "Test Org"): Promise<TestOrganization> {
  const { store, clock, services } = context;
  const organization = await store.createOrganization({ name, now: clock.now() });
  if (credits > 0) {
    await store.grantCredits({
      organizationId: organization.id,
      source: "grant",
      type: "grant",
      amount: credits,
      expiresAt: null,
      description: "test grant",
      now: clock.now(),
    });
  }
  await store.ensureSystemUser(clock.now());
  const created = await createApiKey(store, {
    organizationId: organization.id,
    name: "test key",
    createdBy: SYSTEM_USER_ID,
    keyPrefix: services.config.keyPrefix,
    now: clock.now(),
  });
  return { organizationId: organization.id, keyId: created.key.id, clearKey: created.clearKey, auth: { authorization: `Bearer ${created.clearKey}` } };
}

/** One product (GTIN-14 form) with offers observed `ageMs` before the clock's now. */
export async function addProduct(
  context: TestContext,
  gtin14: string,
  offers: Array<{ merchantId: string; price: number; ageMs: number; currency?: string; shipping?: number; availability?: "in_stock" | "out_of_stock" }>,
): Promise<void> {
  const now = context.clock.now();
  const product = { gtin: gtin14, title: `Product ${gtin14}`, brand: "Acme" };
  const records: FeedRecord[] =
    offers.length === 0
      ? [{ product }]
      : offers.map((offer) => ({
          product,
          offer: {
            merchantId: offer.merchantId,
            merchantName: `Merchant ${offer.merchantId}`,
            priceAmount: offer.price,
            currency: offer.currency ?? "EUR",
            shippingAmount: offer.shipping ?? null,
            availability: offer.availability ?? "in_stock",
            condition: "new",
            url: null,
            observedAt: now - offer.ageMs,
          },
        }));
  await context.store.applyFeedRecords(records, now);
}

export async function json<T = any>(response: Response): Promise<T> {
  return (await response.json()) as T;
}

/** Sum of every ledger amount of an organization, paging through all transactions. */
export async function ledgerSum(store: Store, organizationId: string): Promise<number> {
  let sum = 0;
  let after: string | undefined;
  do {
    const page = await store.listTransactions(organizationId, { limit: 100, after });
    for (const transaction of page.items) sum += transaction.amount;
    after = page.nextCursor ?? undefined;
  } while (after !== undefined);
  return sum;
}

export interface TestSession {
  /** Request headers that carry the session cookie. */
  headers: { cookie: string };
  token: string;
  userId: string;
  organizationId: string;
}

/**
 * A signed-in user with a session, made through the sign-in service (so it works whatever sign-in the
 * context allows). With `organizationId` the user joins that organization, as if invited.
 */
export async function signIn(context: TestContext, email: string, options: { organizationId?: string; role?: "owner" | "member" } = {}): Promise<TestSession> {
  const { store, clock, services } = context;
  if (options.organizationId !== undefined) {
    await store.upsertInvitation({
      email: email.toLowerCase(),
      organizationId: options.organizationId,
      role: options.role ?? "member",
      createdAt: clock.now(),
    });
  }
  const session = await signInIdentity(
    { store, clock, logger: services.logger, trialCredits: services.config.trialCredits },
    developmentIdentity(email),
    "development",
  );
  return { headers: { cookie: `session=${session.token}` }, token: session.token, userId: session.user.id, organizationId: session.user.organization.id };
}

/**
 * Rows of a raw SQL query on whichever store the test runs on, for tests that inspect what is
 * stored. `?` marks parameters; bigint columns come back as numbers on both stores.
 */
export async function queryRows<T = Record<string, unknown>>(store: Store, text: string, params: unknown[] = []): Promise<T[]> {
  if (store instanceof SQLiteStore) return store.connection.query(text).all(...(params as never[])) as T[];
  if (store instanceof PostgresStore) {
    let index = 0;
    const rows = await store.connection.unsafe(
      text.replace(/\?/g, () => `$${++index}`),
      params as never[],
    );
    return rows.map((row) =>
      Object.fromEntries(
        Object.entries(row).map(([key, value]) => [
          key,
          typeof value === "string" && /^-?\d+$/.test(value) && rows.columns.find((c) => c.name === key)?.type === 20 ? Number(value) : value,
        ]),
      ),
    ) as T[];
  }
  throw new Error("queryRows: unknown store");
}

/** The names of the tables of the store's database (its current schema on PostgreSQL). */
export async function tableNames(store: Store): Promise<string[]> {
  const rows = await queryRows<{ name: string }>(
    store,
    store.dialect === "sqlite"
      ? "SELECT name FROM sqlite_master WHERE type = 'table'"
      : "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()",
  );
  return rows.map((row) => row.name);
}

/**
 * Makes every reservation `ms` older by the store's own clock (PostgreSQL dates them by the database's
 * time, which a test cannot move), as if their requests had stalled that long.
 */
export async function ageReservations(store: Store, ms: number): Promise<void> {
  await queryRows(store, `UPDATE reservations SET created_at = created_at - ${Math.trunc(ms)}, expires_at = expires_at - ${Math.trunc(ms)}`);
}

/**
 * The key whose reservations are rows on PostgreSQL: one with a monthly credit limit (far out of
 * reach), whose holds every instance, refund and sweep sees. Other keys' holds live in the serving
 * instance's memory there, as every hold does on SQLite (null: no key).
 */
export async function rowReservingKey(store: Store, organizationId: string, now: number): Promise<string | null> {
  if (store.dialect === "sqlite") return null;
  await store.ensureSystemUser(now);
  return (
    await createApiKey(store, {
      organizationId,
      name: "row reservations",
      createdBy: SYSTEM_USER_ID,
      keyPrefix: "pps_",
      now,
      monthlyCreditLimit: 1_000_000_000,
    })
  ).key.id;
}

/** A pending order for a pack of `credits` at `amount` cents, as checkout would store it (local provider unless told). */
export function packOrder(input: {
  id: string;
  organizationId: string;
  credits: number;
  amount: number;
  now: number;
  provider?: "local" | "stripe";
  providerRef?: string;
}): NewOrder {
  return {
    id: input.id,
    organizationId: input.organizationId,
    userId: null,
    kind: "pack",
    itemId: "pack-test",
    itemName: "Test pack",
    credits: input.credits,
    interval: null,
    validityDays: null,
    amount: input.amount,
    currency: "EUR",
    provider: input.provider ?? "local",
    providerRef: input.providerRef ?? null,
    successUrl: null,
    cancelUrl: null,
    createdAt: input.now,
  };
}

export interface TwoStores {
  one: Store;
  two: Store;
  clock: FakeClock;
  /** An organization ("Shared") both stores see. */
  organizationId: string;
  close(): Promise<void>;
}

/** Two stores on one fresh database, as two instances (or an instance and the CLI) serving one organization. */
export async function twoStoresOnOneDatabase(): Promise<TwoStores> {
  const database = await createTestDatabase();
  const one = await openStore(database.url);
  const two = await openStore(database.url);
  const clock = new FakeClock();
  const organizationId = (await one.createOrganization({ name: "Shared", now: clock.now() })).id;
  return {
    one,
    two,
    clock,
    organizationId,
    async close() {
      await one.close();
      await two.close();
      await database.drop();
    },
  };
}
